"""Plain groups (``--explorer none``): `group_size` rollouts per prompt, or `group_size` episodes per task.

No post-processing and no state: the advantages are the estimator's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from envkit.trainers.local.contracts import AgentExplorer, Budget, SingleTurnExplorer
from envkit.trainers.local.multi_turn import Episode, play
from envkit.trainers.local.single_turn import Rollout, collect_plain
from envkit.trainers.local.tasks import Problem, ProblemSource

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = ["PlainEpisodes", "PlainGroups"]


class PlainGroups(SingleTurnExplorer):
    """GRPO groups: one `generate` call of ``budget.total`` rows at the run's temperature, verified."""

    def __init__(self, run: TrainConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: ProblemSource):
        self.run, self.model, self.tok, self.task = run, model, tok, task

    def _collect(
        self, step: int, problems: Sequence[Problem], prompts: Sequence[list[int]], budget: Budget, *, seed: int
    ) -> list[Rollout]:
        return collect_plain(
            self.model, self.tok, self.task, problems, prompts, group_size=budget.group_size,
            temperature=self.run.temperature, max_new_tokens=self.run.max_new_tokens, seed=seed,
        )  # fmt: skip


class PlainEpisodes(AgentExplorer):
    """``budget.group_size`` episodes per task (`envkit.trainers.local.multi_turn.play`)."""

    def __init__(self, run: TrainConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase):
        self.run, self.model, self.tok = run, model, tok

    def _collect(self, step: int, seeds: list[int], budget: Budget, *, seed: int) -> list[Episode]:
        run = self.run
        return play(
            self.model, self.tok, run.task, seeds, budget.group_size, run.agent, max_new_tokens=run.max_new_tokens,
            temperature=run.temperature, seed=seed, record=run.agent.sero,
        )  # fmt: skip
