"""Multi-turn batches for the local trainer (`AgentSource`): play, credit each turn, build token rows.

`AgentSource.collect` draws the step's task seeds and lets its explorer (`AgentExplorer`: plain episodes,
`envkit.trainers.local.multi_turn.play`, or EDEN's noisy first turn, XRPO's phases, branching) play them;
`AgentSource.advantages` gives each turn an advantage (``gigpo`` / ``graphgpo`` on a `StepTable`, an episode-level
estimator, or SERO's GraphGPO credit with oracle continuations, `envkit.trainers.local.sero`), lets the explorer
post-process them, and returns the `TrainBatch`: per episode the row (first prompt, everything after it) with
loss flags on action tokens only, each action's tokens carrying its turn's advantage; SERO's oracle rows last
(flagged in ``TrainBatch.oracle``: the update then logs the policy / oracle rows' gradient norms).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from envkit.credit.advantages import group_advantages, zero_advantage_fraction
from envkit.credit.turn_credit import turn_credit
from envkit.lifetime import discard_many
from envkit.trainers.local.contracts import AgentExplorer, Budget, step_seed
from envkit.trainers.local.episode_steps import episodes_state_key, step_table
from envkit.trainers.local.multi_turn import AgentConfig, Episode
from envkit.trainers.local.update import TrainBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = ["AgentSource", "episodes_state_key", "step_table"]
_LOG = logging.getLogger(__name__)


class AgentSource:
    """The `BatchSource` of multi-turn runs (see the module docstring); `batch` runs both halves at once."""

    def __init__(self, run: TrainConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, explorer: AgentExplorer):
        self.run, self.model, self.tok, self.explorer = run, model, tok, explorer

    def collect(self, step: int, seed: int | None = None) -> list[Episode]:
        """The step's episodes: `prompts_per_step` task seeds drawn from (run seed, `seed`), played by the explorer.

        Args:
            seed: The step's sampling seed (None: `step_seed(run.seed, step)`, as the trainer does).
        """
        run = self.run
        seed = step_seed(run.seed, step) if seed is None else seed
        seeds = np.random.default_rng([run.seed, seed]).integers(0, 2**31 - 1, size=run.prompts_per_step).tolist()
        return self.explorer.collect(step, seeds, Budget.of(run), seed=seed)

    def advantages(self, step: int, episodes: list[Episode]) -> tuple[TrainBatch, dict[str, Any]]:
        """Each turn's advantage (the estimator, or SERO's credit), the explorer's post-processing, the rows."""
        cfg: AgentConfig = self.run.agent
        episodes, lost_metrics = _drop_lost(episodes)
        sero = None
        if cfg.sero:
            from envkit.trainers.local.sero import sero_credit

            sero = sero_credit(self.model, self.tok, self.run.task, episodes, cfg)
            per_episode = sero.turn_advantages
        else:
            per_episode = _turn_advantages(episodes, cfg)
        credit = self.explorer.postprocess(episodes, per_episode)
        per_episode, explorer_metrics = list(credit.advantages), dict(credit.metrics)
        prompts, responses, advs, flags = [], [], [], []
        for i, (e, turn_adv) in enumerate(zip(episodes, per_episode, strict=True)):
            if not credit.keeps(i):
                continue
            prompts.append(e.train_prompt_ids)
            responses.append(e.context[len(e.prompt_ids) :])
            advs.append([float(turn_adv[t]) if t >= 0 else 0.0 for t in e.turn_of_token])
            flags.append(e.flags)
        metrics = _episode_metrics(episodes, per_episode, cfg)
        metrics.update(explorer_metrics)
        metrics.update(lost_metrics)
        if sero is not None:
            metrics.update(sero.metrics)
            for row in sero.rows:
                prompts.append(row.prompt)
                responses.append(row.response)
                advs.append(row.advantages)
                flags.append(row.flags)
            # a group's oracle rows are its rows too: a group whose only signal is its rescue is not zero-advantage
            metrics["zero_adv_fraction"] = zero_advantage_fraction(
                np.array([*_peaks(per_episode), *(max(map(abs, r.advantages), default=0.0) for r in sero.rows)]),
                [*(e.group for e in episodes), *(r.group for r in sero.rows)],
            )
        metrics["rows_in_loss"] = len(prompts)
        n_oracle = len(sero.rows) if sero is not None else 0
        oracle = None if sero is None else [False] * (len(prompts) - n_oracle) + [True] * n_oracle
        batch = TrainBatch(prompts=prompts, responses=responses, advantages=advs, loss_flags=flags,
                           weights=[1.0] * len(prompts), oracle=oracle)  # fmt: skip
        return batch, metrics

    def batch(self, step: int, seed: int | None = None) -> tuple[TrainBatch, dict[str, Any]]:
        """`collect` then `advantages`: one step's `TrainBatch` and metrics (tests, scripts)."""
        return self.advantages(step, self.collect(step, seed))

    def state_dict(self) -> dict[str, Any] | None:
        return self.explorer.state_dict()


def _drop_lost(episodes: list[Episode]) -> tuple[list[Episode], dict[str, Any]]:
    """The episodes that did not lose their env, and the step's ``episodes_lost`` / ``episodes_retried`` metrics.

    A lost episode (`Episode.lost`: its fleet actor or node died mid-way, after ``agent.retries`` tries from reset)
    leaves the update: its group credits the episodes that finished, as if it had one member fewer. Its reason is
    logged; its snapshots, if any are left, are discarded.

    Raises:
        RuntimeError: every episode of the step was lost (nothing to learn from; the fleet is gone).
    """
    lost = [e for e in episodes if e.lost]
    for e in lost:
        _LOG.warning("episode %s/%s (seed %s) dropped from the update: %s", e.group, e.index, e.seed, e.lost)
        discard_many(e.env, e.snapshots())
    kept = [e for e in episodes if not e.lost]
    if episodes and not kept:
        raise RuntimeError(
            f"all {len(episodes)} episodes of the step lost their env (first: {lost[0].lost}); check the fleet's "
            "nodes (docs/fleet.md, 'Failures and preemption') or raise agent.retries"
        )
    return kept, {"episodes_lost": len(lost), "episodes_retried": sum(e.retries for e in episodes)}


def _peaks(per_episode: list[np.ndarray]) -> list[float]:
    """Each episode's largest |turn advantage| (0 for an episode without turns)."""
    return [float(np.abs(a).max()) if len(a) else 0.0 for a in per_episode]


def _episode_metrics(episodes: list[Episode], per_episode: list[np.ndarray], cfg: AgentConfig) -> dict[str, Any]:
    """The step's episode metrics (docs/methods.md section 7), before the explorer's and SERO's."""
    groups = [e.group for e in episodes]
    zero = zero_advantage_fraction(np.array(_peaks(per_episode)), groups)
    n_act = sum(len(e.actions) for e in episodes)
    win = float(cfg.adv.terminal_reward or 0.0)  # a successful last step's reward (set: AgentConfig checks it)
    return {
        "reward_mean": float(np.mean([win * e.success for e in episodes])),
        "success_rate": float(np.mean([e.success for e in episodes])),
        "zero_adv_fraction": zero,
        "response_length": float(np.mean([sum(e.flags) / max(1, len(e.actions)) for e in episodes])),
        "episode_turns": float(np.mean([len(e.actions) for e in episodes])),
        "invalid_share": float(np.mean([x for e in episodes for x in e.invalid])) if n_act else 0.0,
        "context_truncated": int(sum(e.context_truncated for e in episodes)),
        "action_truncated": int(sum(e.action_truncated for e in episodes)),
        "truncated_share": float(sum(e.action_truncated for e in episodes) / max(1, n_act)),
        "context_tokens_max": int(max(len(e.context) for e in episodes)),
        "rollouts": len(episodes),
        "state_key": episodes_state_key(episodes, cfg) if cfg.estimator in ("gigpo", "graphgpo") else "none",
    }


def _turn_advantages(episodes: list[Episode], cfg: AgentConfig) -> list[np.ndarray]:
    """Per episode, the advantage of each of its turns under `cfg.estimator` (no SERO)."""
    table = step_table(episodes, cfg)
    if cfg.estimator == "gigpo" or cfg.estimator == "graphgpo":  # the turn estimators (TURN_ESTIMATORS)
        row_adv = turn_credit(table, cfg.estimator, cfg.adv).advantages
    else:
        ep_adv = group_advantages([float(e.success) for e in episodes], [e.group for e in episodes], cfg.estimator)
        row_adv = np.concatenate([np.full(len(e.actions), a) for e, a in zip(episodes, ep_adv, strict=True)])
    out, i = [], 0
    for e in episodes:
        out.append(np.asarray(row_adv[i : i + len(e.actions)]))
        i += len(e.actions)
    return out
