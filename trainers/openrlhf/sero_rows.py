"""SERO on the OpenRLHF backend: oracle continuations from restored states, as token rows with reachability weights.

Called by `GymAgentExecutor.finish_group` after a group's rollouts (one prompt, G planned rollouts), inside the
vLLM rollout actor that ran them:

1. the group's episodes (kept with their snapshots while ``--sero`` is on) become `envkit.core.Trajectory`s and
   `envkit.credit.sero.select_roots` picks roots on failed trajectories (deepest first, no known path to success;
   a root the oracle proves dead is replaced by the next candidate, `envkit.credit.sero.RootRounds`);
2. `envkit.oracles.continuation.continue_from_root` restores each root (native snapshot, else verified replay) and lets the env's
   oracle act in the live env; only continuations the env confirms as success are used;
3. the oracle row is the failed rollout's tokens up to the root, then the oracle's actions (tokenised, EOS
   appended like a policy turn) and the env's observations; each oracle turn keeps l_j, the policy's mean token
   log-prob of the action (one prompt-logprobs pass of the live engine);
4. the oracle row REPLACES the failed rollout it branched from, so the batch keeps exactly ``batch x n`` rows
   and OpenRLHF's batch arithmetic (train batch size, DeepSpeed accumulation) is untouched (the project's choice
   for this backend). The record stays the POLICY episode's (``success`` False, its return, both read from its
   policy steps): its steps and turns before the root are the rollout's own, trained with their own policy
   credit, then the oracle's steps (``is_oracle``) with their turns; the rollout's steps from the root on ride
   along as ``policy_suffix`` (credited with the group, no tokens: they leave the loss). At most ``roots_per_group``
   rows and ``max_oracle_share`` of the group are replaced.
5. the experience maker credits the batch with `envkit.credit.sero_advantages.sero_advantages`
   (`envkit.trainers.openrlhf.sero_turns`), the function the local trainer and ``envkit-oracle rollout`` call.

Afterwards `GymAgentExecutor.finish_group` discards every snapshot of the group's episodes in the env that took
it (`envkit.lifetime.discard_many`), whether or not SERO used them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from envkit.core import Step, Trajectory
from envkit.recorder import EpisodeRecorder
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord, Turn
from envkit.trainers.sero_splice import splice_oracle_steps

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from envkit.oracles.continuation import ContinuationOutcome
    from envkit.trainers.openrlhf.executor_contract import GenerationContext, GroupExecutor, RolloutTask


@dataclass
class SeroEpisode:
    """What the executor keeps of one rollout while SERO may still need it."""

    task: RolloutTask
    recorder: EpisodeRecorder  # the steps with the snapshot before each, the final one by its rule
    env: gym.Env[str, str]  # the env instance that took the snapshots (they are discarded there)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The recorded steps, each with the snapshot of the state before it."""
        return self.recorder.steps

    @property
    def initial_observation(self) -> str:
        return self.recorder.initial_observation

    @property
    def initial_info(self) -> dict[str, Any]:
        return self.recorder.initial_info

    def snapshots(self) -> list[Any]:
        """Every snapshot this episode took (before each step, and of its final state)."""
        return self.recorder.snapshots()

    def trajectory(self, success: bool) -> Trajectory:
        task = self.task
        return self.recorder.trajectory(
            env_id=task.env_id, task_id=str(task.seed), seed=task.seed, options=task.options, success=success
        )


def _tokenize(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text=text, add_special_tokens=False)["input_ids"])


async def sero_group(
    executor: GroupExecutor, responses: list[dict], episodes: list[SeroEpisode | None], gen: GenerationContext
) -> list[dict]:
    """The group's responses with up to ``roots_per_group`` failed rollouts replaced by oracle rows (`gen`'s engine,
    the rollout actor, scores each oracle action's l_j)."""
    from envkit.credit.sero import RootRounds
    from envkit.oracles.continuation import continue_from_root, job_for

    cfg: BackendConfig = executor.config
    opts = cfg.sero_opts
    records = [RolloutRecord.from_dict(r[RESPONSE_KEY]) for r in responses]
    kept = [e for e in episodes if e is not None]
    if len(kept) < len(episodes) or not records:
        return responses
    scfg = cfg.sero_config  # resolved once from --env (envkit.env_settings): the turn cap is SERO's horizon
    horizon = scfg.horizon
    trajs = [e.trajectory(rec.success) for e, rec in zip(kept, records)]
    cap = min(opts.roots_per_group, opts.max_oracle_rows(len(responses), replace=True))
    out = list(responses)
    used: set[int] = set()
    picker = RootRounds(trajs, 0, scfg)  # a root the oracle proves dead is replaced by the next candidate
    for root in picker.roots():  # round after round (`envkit.credit.sero.root_rounds`, the one loop)
        if len(used) >= cap or root.trajectory in used:
            continue
        task = kept[root.trajectory].task
        async with executor.lease(task) as env:
            outcome = await asyncio.to_thread(
                continue_from_root, env, job_for(root, trajs[root.trajectory], task.env_id, horizon)
            )
        picker.settle(dead=outcome.dead_end, root=root)
        if not outcome.success:
            continue
        row = await _oracle_row(cfg, responses[root.trajectory], records[root.trajectory], root.t, outcome, gen)
        if row is not None:
            out[root.trajectory] = row
            used.add(root.trajectory)
    return out


def oracle_record(
    cfg: BackendConfig,
    record: RolloutRecord,
    t: int,
    outcome: ContinuationOutcome,
    spans: list[tuple[int, int]],
    loglik: list[float],
) -> RolloutRecord:
    """The record of the oracle row that replaces `record` (see the module docstring, step 4): its steps and turns
    before root step `t`, then the oracle's steps (`outcome`) with their turns (token `spans`, l_j `loglik`, the
    weight logged), ``policy_suffix`` the rollout's steps from `t` on; success and return stay the policy
    episode's (read from its steps). Each state's anchors are read from the steps, along the path from the
    record's first state through the root."""
    weights = cfg.sero_opts.reach.weights(loglik)  # what the credit recomputes (logged with the turns)
    oracle_turns = [
        Turn(s, e, float(w), oracle=True, loglik=float(ll))
        for (s, e), w, ll in zip(spans, weights, loglik, strict=True)
    ]
    steps = (*record.steps[:t], *outcome.steps)
    if len(oracle_turns) != len(outcome.steps):
        raise ValueError(f"oracle_record: {len(outcome.steps)} oracle steps but {len(spans)} token spans")
    return dataclasses.replace(
        record, steps=steps, turns=(*record.turns[:t], *oracle_turns), oracle=True,
        extra={"root_t": t, "restored_by": outcome.restored_by},
        policy_suffix=record.steps[t:],
    )  # fmt: skip


async def _oracle_row(
    cfg: BackendConfig,
    response: dict,
    record: RolloutRecord,
    t: int,
    outcome: ContinuationOutcome,
    gen: GenerationContext,
) -> dict | None:
    """Tokens and record of one oracle row (None when it does not fit in ``gen.max_length``)."""
    tokenizer = gen.tokenizer
    tokens = list(response["observation_tokens"])
    if t < len(record.turns):
        tokens = tokens[: record.turns[t].start]
    else:  # the root is the final state: append its observation as feedback
        tokens = tokens + _tokenize(tokenizer, cfg.feedback_template.format(obs=outcome.root.observation))
    eos = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
    tokens, spans = splice_oracle_steps(
        tokens, outcome.steps, lambda action: _tokenize(tokenizer, action) + eos,
        lambda _act, observation: _tokenize(tokenizer, cfg.feedback_template.format(obs=observation)),
    )  # fmt: skip
    if len(tokens) > gen.max_length:
        return None
    logprobs = await gen.engine.prompt_logprobs(tokens)  # logprobs[i] is the log-prob of tokens[i + 1]
    loglik = [min(float(np.mean(logprobs[s - 1 : e - 1])), 0.0) for s, e in spans]
    new_record = oracle_record(cfg, record, t, outcome, spans, loglik)
    rollout_lps = None
    if getattr(gen.sampling_params, "logprobs", None) is not None:
        base = list(response.get("rollout_log_probs") or [])[: spans[0][0] if spans else len(tokens)]
        rollout_lps = base + [0.0] * (len(tokens) - len(base))
        for s, e in spans:
            rollout_lps[s:e] = [float(x) for x in logprobs[s - 1 : e - 1]]
    logs = dict(response.get("extra_logs") or {})
    return {
        **response,  # the policy episode's reward and score: the rescue is not the policy's success
        "observation_tokens": tokens,
        "action_ranges": [(tr.start, tr.end) for tr in new_record.turns],
        "rollout_log_probs": rollout_lps,
        "extra_logs": {**logs, "envkit_oracle": 1.0},
        RESPONSE_KEY: new_record.to_dict(),
    }
