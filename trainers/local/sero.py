"""SERO in the local trainer: oracle continuations from states the policy reached, as token rows with reachability
weights (docs/methods.md section 4; the OpenRLHF backend's counterpart is `envkit.trainers.openrlhf.sero_rows`).

After `envkit.trainers.local.multi_turn.play` (with ``record=True``: every step keeps a snapshot of the state before it),
`sero_credit` does, per task group:

1. `envkit.credit.sero.select_roots`: states on failed episodes with no known path to success, deepest first, at most
   ``sero_opts.roots_per_group``; a root the oracle proves dead (``dead_end``) is replaced by the next candidate
   (`envkit.credit.sero.RootRounds`), so dead ends do not use up the group's roots;
2. `envkit.oracles.continuation.continue_from_root` in the episode's own env: native restore of the snapshot (else verified
   replay from the seed), then the env's oracle acts in the live env; only continuations the env confirms as
   success are used;
3. one oracle row per success, token-in/token-out: the episode's own ids up to the root (loss flag 0, never
   re-tokenised), then each oracle action (its text's ids + EOS, flag 1) and the env's next observation (flag 0);
   one no-grad forward over all oracle rows gives l_j, the policy's mean token log-prob of each oracle action;
4. `envkit.credit.sero_advantages.sero_advantages` on the step's plain GraphGPO table (`episode_steps.step_table`)
   and the rescues: the policy rows keep plain GraphGPO's episode term and change only where the oracle's
   transitions changed their same-state distances; oracle action k's advantage is a success's, times its weight;
5. once the group is credited, every snapshot its episodes took is discarded in the episode's env
   (`envkit.lifetime.discard_many`): SWE overlay layers do not pile up over a run.

With ``agent.sero_rows="supervised"`` (a control) steps 1-3 and 5 are the same, but the policy rows keep plain
GraphGPO's credit and every oracle action gets `SUPERVISED_ADVANTAGE` at weight 1: the continuations as plain
supervised rows. Oracle rows are added to the batch (the failed episode keeps its own row, every turn with its policy credit) and
capped at ``sero_opts.max_oracle_share`` of it. The metrics carry `SeroAdvantages.metrics` (share of oracle actions
at ``w_min``, the first oracle action's mean l_j, advantage mass of policy vs oracle rows, rescues).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envkit.credit.sero import RootRounds
from envkit.credit.sero_advantages import OracleCredit, Rescue, SeroAdvantages, sero_advantages
from envkit.lifetime import discard_many
from envkit.oracles.continuation import ContinuationOutcome, continue_from_root, job_for
from envkit.trainers.local.episode_steps import episodes_state_key, step_table
from envkit.trainers.local.multi_turn import AgentConfig, Episode, continuation_ids
from envkit.trainers.local.prompt_encoding import encode_text
from envkit.trainers.local.shared_prefix import response_logits
from envkit.trainers.sero_splice import splice_oracle_steps

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: advantage of every oracle action token under ``agent.sero_rows="supervised"``: with weight 1 and ratio 1 the
#: clipped surrogate's gradient is then the oracle actions' log-likelihood gradient (supervised rows, token-averaged
#: with the batch)
SUPERVISED_ADVANTAGE = 1.0


@dataclass(frozen=True)
class OracleRow:
    """One oracle continuation as a training row (aligned lists over `response`): a value; `sero_credit` makes the
    credited row with `dataclasses.replace` (advantages of its action spans, weights)."""

    group: int
    prompt: list[int]
    response: list[int]
    advantages: list[float]
    flags: list[int]
    spans: list[tuple[int, int]]  # oracle action k's token span in `response`
    weights: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class SeroResult:
    """What SERO adds to one step.

    Attributes:
        turn_advantages: Per episode (in order), the GraphGPO advantage of each of its turns, oracle transitions
            included in the graph.
        rows: Oracle rows, reachability weights already applied to their advantages.
        metrics: ``sero_*`` counters of docs/methods.md section 7.
    """

    turn_advantages: list[np.ndarray]
    rows: list[OracleRow]
    metrics: dict[str, float]


def sero_credit(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, env_id: str, episodes: list[Episode], cfg: AgentConfig
) -> SeroResult:
    """Roots, continuations, credit and oracle rows of one step's episodes (see the module docstring)."""
    if cfg.max_turns is None:
        raise ValueError("sero_credit: agent.max_turns is None; resolve the settings with cfg.for_env(env_id) first")
    opts = cfg.sero_opts
    scfg = opts.resolve(
        horizon=cfg.max_turns, gamma_g=cfg.adv.graphgpo_kwargs()["gamma_g"],
        terminal_reward=float(cfg.adv.terminal_reward or 0.0),
    )  # fmt: skip
    budget = opts.max_oracle_rows(len(episodes))
    counts = dict.fromkeys(
        ("tried", "dead", "restored", "native", "diverged", "succeeded", "capped", "too_long", "discarded"), 0
    )
    found: list[tuple[Episode, ContinuationOutcome]] = []
    for g in sorted({e.group for e in episodes}):
        eps = sorted((e for e in episodes if e.group == g), key=lambda e: e.index)
        trajs = [e.trajectory(env_id) for e in eps]
        picker = RootRounds(trajs, g, scfg)  # a root the oracle proves dead is replaced by the next candidate
        for root in picker.roots():  # round after round (`envkit.credit.sero.root_rounds`, the one loop)
            if len(found) >= budget:
                counts["capped"] += 1
                continue
            out = continue_from_root(
                eps[root.trajectory].env, job_for(root, trajs[root.trajectory], env_id, cfg.max_turns)
            )
            picker.settle(dead=out.dead_end, root=root)
            if out.dead_end:  # restored, checked, never continued: counted apart from the tried roots
                counts["dead"] += 1
                continue
            counts["tried"] += 1
            counts["restored"] += int(bool(out.restored_by))
            counts["native"] += int(out.restored_by == "native")
            counts["diverged"] += int(out.diverged)
            if out.success and out.steps:
                found.append((eps[root.trajectory], out))
        counts["succeeded"] += sum(1 for e, _ in found if e.group == g)
        counts["discarded"] += sum(discard_many(e.env, e.snapshots()) for e in eps)
    rows: list[OracleRow] = []
    kept: list[tuple[Episode, ContinuationOutcome]] = []
    for e, out in found:
        row = _oracle_row(tokenizer, e, out)
        if len(row.prompt) + len(row.response) > cfg.max_context_tokens:
            counts["too_long"] += 1
            continue
        rows.append(row)
        kept.append((e, out))
    res = episode_credit(episodes, kept, _logliks(model, tokenizer, rows), cfg)
    o = res.oracle
    supervised = cfg.sero_rows == "supervised"
    rows = [_credited(row, o, k, supervised) for k, row in enumerate(rows)]
    policy_adv = res.plain.advantages if supervised else res.policy.advantages  # supervised: plain GraphGPO's
    turn_adv, i = [], 0
    for e in episodes:
        turn_adv.append(np.asarray(policy_adv[i : i + len(e.actions)]))
        i += len(e.actions)
    weights = [w for r in rows for w in r.weights]
    metrics = {f"sero_{k}": float(v) for k, v in counts.items()}
    metrics.update(res.metrics())
    metrics.update(sero_rows=float(len(rows)), sero_weight_mean=float(np.mean(weights)) if weights else 0.0)
    return SeroResult(turn_adv, rows, metrics)


def _credited(row: OracleRow, o: OracleCredit, k: int, supervised: bool) -> OracleRow:
    """Oracle row `k` with its credit: each action span's advantage (the weighted oracle credit, or
    `SUPERVISED_ADVANTAGE`) and its reachability weights (1 for supervised rows)."""
    part = o.of(k)
    weights = [1.0] * len(row.spans) if supervised else [float(w) for w in o.weights[part]]
    values = [SUPERVISED_ADVANTAGE] * len(row.spans) if supervised else o.weighted[part]
    advantages = list(row.advantages)
    for (s, t), a in zip(row.spans, values, strict=True):
        advantages[s:t] = [float(a)] * (t - s)
    return dataclasses.replace(row, advantages=advantages, weights=weights)


def episode_credit(
    episodes: list[Episode],
    rescued: list[tuple[Episode, ContinuationOutcome]],
    logliks: list[list[float]],
    cfg: AgentConfig,
) -> SeroAdvantages:
    """`envkit.credit.sero_advantages.sero_advantages` of a step: the plain GraphGPO table of its episodes
    (`episode_steps.step_table`, in episode order) and one `Rescue` per (episode, successful continuation, l_j).
    States are anchors under `episodes_state_key` (the one rule: unset, the env's exact key when every policy
    and oracle state has one); a rescue's follow the episode's path through its root (`Rescue.from_path`)."""
    kind = episodes_state_key(episodes, cfg, [s.info for _, out in rescued for s in out.steps])
    rescues = [
        Rescue.from_path(
            kind, (e.initial_observation, e.initial_info), e.steps[: out.root.t], out.steps, group=e.group,
            trajectory=e.index, t=out.root.t, loglik=ll, episode_return=float(cfg.adv.terminal_reward or 0.0),
        )
        for (e, out), ll in zip(rescued, logliks, strict=True)
    ]  # fmt: skip
    return sero_advantages(step_table(episodes, cfg, kind), rescues, cfg.adv, cfg.sero_opts)


def _oracle_row(tokenizer: PreTrainedTokenizerBase, e: Episode, outcome: ContinuationOutcome) -> OracleRow:
    """The episode's ids up to the root (flag 0), then the oracle's actions (flag 1) and observations (flag 0);
    advantages 0 (`sero_credit` returns the credited copy, `_credited`)."""
    t = outcome.root.t
    if t < len(e.actions):
        context = e.context[: e.action_start(t)]
    else:  # the root is the episode's final state: its observation was never appended
        context = e.context + continuation_ids(tokenizer, e.action_ids(t - 1), outcome.root.observation, raw=False)
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    response, spans = splice_oracle_steps(
        context[len(e.prompt_ids) :], outcome.steps, lambda action: encode_text(tokenizer, action) + eos,
        lambda act, observation: continuation_ids(tokenizer, act, observation, raw=False),
    )  # fmt: skip
    advs = [0.0] * len(response)
    flags = [0] * len(response)
    for start, end in spans:
        flags[start:end] = [1] * (end - start)
    return OracleRow(e.group, list(e.train_prompt_ids), response, advs, flags, spans)


def _logliks(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: list[OracleRow], chunk: int = 4
) -> list[list[float]]:
    """l_j of every oracle row: the policy's mean token log-prob of each oracle action, from no-grad forwards
    (`chunk` rows at a time: long agent rows times a real vocabulary make large logits)."""
    logps: list[Any] = []
    with torch.no_grad():
        for k in range(0, len(rows), chunk):
            part = rows[k : k + chunk]
            out = response_logits(model, [r.prompt for r in part], [r.response for r in part], tokenizer.pad_token_id)
            logps.extend(out.logprobs().float().cpu().numpy())
    return [[min(float(logp[s:e].mean()), 0.0) for s, e in r.spans] for r, logp in zip(rows, logps, strict=True)]
