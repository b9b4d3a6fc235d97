"""Single-turn batches (``arith``, ``envkit/Math-v0``, ``envkit/Code-v0``): prompts, a group of rollouts each.

`SingleTurnSource.collect` samples the step's problems (seeded by (run seed, step)) and lets its explorer
(`SingleTurnExplorer`: plain groups, EDEN or XRPO) sample and verify the rollouts; `advantages` computes the
group advantages under ``TrainConfig.estimator`` (`envkit.credit.advantages`), hands them to the explorer, whose
`envkit.trainers.local.contracts.RolloutCredit` (EDEN's absorb and top-p selection, XRPO's sharpening) is a new
value (the frozen `Rollout` values are not changed), and builds the `TrainBatch`: one row per rollout the credit
keeps, every response token carrying its rollout's advantage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from envkit.credit.advantages import group_advantages, zero_advantage_fraction
from envkit.trainers.local.contracts import Budget, SingleTurnExplorer, step_seed
from envkit.trainers.local.prompt_encoding import encode_prompt
from envkit.trainers.local.single_turn import Rollout
from envkit.trainers.local.tasks import Problem, ProblemSource
from envkit.trainers.local.update import TrainBatch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = ["SingleTurnSamples", "SingleTurnSource"]


@dataclass(frozen=True)
class SingleTurnSamples:
    """One step's problems and their verified rollouts (``rollout.group`` indexes `problems`)."""

    problems: Sequence[Problem]
    rollouts: list[Rollout]


class SingleTurnSource:
    """The `BatchSource` of single-turn runs (see the module docstring)."""

    def __init__(
        self, run: TrainConfig, tok: PreTrainedTokenizerBase, task: ProblemSource, explorer: SingleTurnExplorer
    ):
        self.run, self.tok, self.task, self.explorer = run, tok, task, explorer

    def collect(self, step: int, seed: int | None = None) -> SingleTurnSamples:
        """The step's problems (drawn from (run seed, step)) and their rollouts within `Budget.of(run)`.

        Args:
            seed: The step's sampling seed (None: `step_seed(run.seed, step)`, as the trainer does).
        """
        run = self.run
        seed = step_seed(run.seed, step) if seed is None else seed
        problems = self.task.sample(np.random.default_rng([run.seed, step]), run.prompts_per_step)
        prompts = [encode_prompt(self.tok, p.prompt, raw=self.task.raw_prompts) for p in problems]
        rollouts = self.explorer.collect(step, problems, prompts, Budget.of(run), seed=seed)
        return SingleTurnSamples(problems, rollouts)

    def advantages(self, step: int, samples: SingleTurnSamples) -> tuple[TrainBatch, dict[str, Any]]:
        rollouts = samples.rollouts
        rewards = np.array([r.reward for r in rollouts], dtype=np.float64)
        groups = np.array([r.group for r in rollouts])
        adv = group_advantages(rewards, groups, self.run.estimator)
        metrics: dict[str, Any] = {"zero_adv_fraction": zero_advantage_fraction(adv, groups)}
        credit = self.explorer.postprocess(step, samples.problems, rollouts, tuple(adv.tolist()))
        if len(credit.advantages) != len(rollouts):
            raise RuntimeError(
                f"{type(self.explorer).__name__}.postprocess credited {len(credit.advantages)} rollouts of "
                f"{len(rollouts)}; an explorer returns one advantage per rollout"
            )
        metrics.update(credit.metrics)
        kept = [(r, a) for i, (r, a) in enumerate(zip(rollouts, credit.advantages, strict=True)) if credit.keeps(i)]
        batch = TrainBatch(
            prompts=[r.prompt_ids for r, _ in kept],
            responses=[r.response_ids for r, _ in kept],
            advantages=[[a] * len(r.response_ids) for r, a in kept],
            loss_flags=[[1] * len(r.response_ids) for r, _ in kept],
            weights=[1.0] * len(kept),
        )
        metrics.update(
            reward_mean=float(rewards.mean()),
            success_rate=float((rewards >= 1.0).mean()),
            response_length=float(np.mean([len(r.response_ids) for r in rollouts])),
            truncated_share=float(np.mean([r.truncated for r in rollouts])),
            rollouts=len(rollouts),
            rows_in_loss=len(kept),
        )
        return batch, metrics

    def batch(self, step: int, seed: int | None = None) -> tuple[TrainBatch, dict[str, Any]]:
        """`collect` then `advantages`: one step's `TrainBatch` and metrics (tests, scripts)."""
        return self.advantages(step, self.collect(step, seed))

    def state_dict(self) -> dict[str, Any] | None:
        return self.explorer.state_dict()
