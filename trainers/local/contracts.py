"""The local trainer's contracts: one step's budget, the batch source a step reads, and the two explorer types.

One training step (`envkit.trainers.local.trainer.LocalTrainer.step`) reads top to bottom::

    samples = source.collect(step)                          # rollouts / episodes, within the step's Budget
    batch, metrics = source.advantages(step, samples)       # credit, the explorer's post-processing, token rows
    stats = update(model, optimizer, batch, ...)            # envkit.trainers.local.update
    logger.log(step, metrics | stats)

A `BatchSource` is `SingleTurnSource` (prompts with verifiable answers, `envkit.trainers.local.single_turn_source`)
or `AgentSource` (multi-turn envs, `envkit.trainers.local.agent_source`); each holds an explorer of its own type:

- `SingleTurnExplorer`: ``collect(step, problems, prompts, budget, seed=) -> list[Rollout]`` and
  ``postprocess(step, problems, rollouts, advantages) -> RolloutCredit`` (a new value: per rollout its advantage
  and whether it stays in the loss, and the metrics; the rollouts are frozen `Rollout` values);
- `AgentExplorer`: ``collect(step, seeds, budget, seed=) -> list[Episode]`` and ``postprocess(episodes,
  turn_advantages) -> EpisodeCredit`` (a new value: per episode its turn advantages and whether it stays in the
  loss, and the metrics; the episodes are not changed).

As torchrl's ``EnvBase.step`` validates around ``_step``, the public ``collect`` checks the budget once and the
method's ``_collect`` implements it. Plain groups (``--explorer none``) are explorers too
(`envkit.trainers.local.explorers.plain`), so a step has one path. Both have ``state_dict()`` (saved in
checkpoints, passed back as ``state`` on resume). This module imports no driver: the registry that builds them is
`envkit.trainers.local.explorers.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np

from envkit.trainers.local.multi_turn import Episode
from envkit.trainers.local.single_turn import Rollout
from envkit.trainers.local.tasks import Problem
from envkit.trainers.local.update import TrainBatch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = [
    "AgentExplorer",
    "BatchSource",
    "Budget",
    "EpisodeCredit",
    "RolloutCredit",
    "SingleTurnExplorer",
    "step_seed",
]

SamplesT = TypeVar("SamplesT")


def step_seed(run_seed: int, step: int) -> int:
    """The sampling seed of one step: every step's randomness derives from (run seed, step), so a resumed run
    continues exactly."""
    return run_seed * 1_000_003 + step


@dataclass(frozen=True)
class Budget:
    """One step's rollout budget, read from the run (`TrainConfig.prompts_per_step`, `TrainConfig.group_size`).

    Attributes:
        prompts: Prompts (single-turn) or tasks (multi-turn) of the step.
        group_size: Rollouts or episodes per prompt (G); ``total = prompts * group_size``.
    """

    prompts: int
    group_size: int

    @classmethod
    def of(cls, run: TrainConfig) -> Budget:
        return cls(run.prompts_per_step, run.group_size)

    @property
    def total(self) -> int:
        return self.prompts * self.group_size

    def check(self, who: str, groups: Sequence[int], *, fixed_total: bool = True) -> None:
        """Raise unless `groups` (each sample's prompt index) covers every prompt and, with `fixed_total`, spends
        exactly ``total`` samples."""
        counts = Counter(groups)
        if set(counts) != set(range(self.prompts)):
            raise RuntimeError(
                f"{who}: samples must cover prompts 0..{self.prompts - 1} and no other, got {sorted(counts)}"
            )
        if fixed_total and len(groups) != self.total:
            raise RuntimeError(
                f"{who}: collected {len(groups)} samples for a budget of {self.total} "
                f"({self.prompts} prompts x group_size {self.group_size}); an explorer keeps the run's budget"
            )


class BatchSource(Protocol[SamplesT]):
    """Where a step's training rows come from (see the module docstring)."""

    run: TrainConfig

    @property
    def explorer(self) -> SingleTurnExplorer | AgentExplorer:
        """The explorer that samples (plain groups for ``--explorer none``)."""
        ...

    def collect(self, step: int) -> SamplesT:
        """Sample the step's rollouts or episodes within `Budget.of(run)`."""
        ...

    def advantages(self, step: int, samples: SamplesT) -> tuple[TrainBatch, dict[str, Any]]:
        """Credit the samples and build the `TrainBatch` `update` trains on, plus the step's metrics."""
        ...

    def state_dict(self) -> dict[str, Any] | None: ...


class SingleTurnExplorer(ABC):
    """An explorer of single-turn groups: `collect` checks the budget, `_collect` samples (module docstring)."""

    run: TrainConfig
    model: PreTrainedModel
    tok: PreTrainedTokenizerBase

    def collect(
        self, step: int, problems: Sequence[Problem], prompts: Sequence[list[int]], budget: Budget, *, seed: int
    ) -> list[Rollout]:
        """The step's verified rollouts, exactly ``budget.total`` of them."""
        if len(prompts) != budget.prompts or len(problems) != budget.prompts:
            raise ValueError(f"{type(self).__name__}.collect: {len(prompts)} prompts for a budget of {budget.prompts}")
        out = self._collect(step, problems, prompts, budget, seed=seed)
        budget.check(type(self).__name__, [r.group for r in out])
        return out

    @abstractmethod
    def _collect(
        self, step: int, problems: Sequence[Problem], prompts: Sequence[list[int]], budget: Budget, *, seed: int
    ) -> list[Rollout]: ...

    def postprocess(
        self, step: int, problems: Sequence[Problem], rollouts: Sequence[Rollout], advantages: Sequence[float]
    ) -> RolloutCredit:
        """The rollouts' advantages after the explorer's credit (`advantages`: the estimator's, one per rollout),
        which rollouts stay in the loss, and the explorer's metrics."""
        return RolloutCredit(tuple(advantages))

    def state_dict(self) -> dict[str, Any] | None:
        return None


def _check_in_loss(who: str, in_loss: tuple[bool, ...] | None, n: int, what: str) -> None:
    if in_loss is not None and len(in_loss) != n:
        raise ValueError(f"{who}: {len(in_loss)} in_loss flags for {n} {what}; give one each")


@dataclass(frozen=True)
class RolloutCredit:
    """A single-turn explorer's credit of one step's rollouts (`SingleTurnExplorer.postprocess`), a value of its
    own: the `Rollout` values stay as they were sampled.

    Attributes:
        advantages: Per rollout (in order), its advantage; every response token of its row carries it.
        metrics: The explorer's metrics of the step.
        in_loss: Per rollout, whether its row enters the loss (EDEN's top-p selection drops noisy ones); None:
            every rollout.
    """

    advantages: tuple[float, ...]
    metrics: Mapping[str, Any] = field(default_factory=dict)
    in_loss: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        _check_in_loss("RolloutCredit", self.in_loss, len(self.advantages), "rollouts")

    def keeps(self, i: int) -> bool:
        """Whether rollout `i`'s row enters the loss."""
        return True if self.in_loss is None else self.in_loss[i]


@dataclass(frozen=True)
class EpisodeCredit:
    """An agent explorer's credit of one step's episodes (`AgentExplorer.postprocess`), a value of its own: the
    episodes stay as they were played.

    Attributes:
        advantages: Per episode (in order), the advantage of each of its turns.
        metrics: The explorer's metrics of the step.
        in_loss: Per episode, whether its row enters the loss (EDEN's top-p selection drops noisy ones); None:
            every episode.
    """

    advantages: tuple[np.ndarray, ...]
    metrics: Mapping[str, Any] = field(default_factory=dict)
    in_loss: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        _check_in_loss("EpisodeCredit", self.in_loss, len(self.advantages), "episodes")

    def keeps(self, i: int) -> bool:
        """Whether episode `i`'s row enters the loss."""
        return True if self.in_loss is None else self.in_loss[i]


class AgentExplorer(ABC):
    """An explorer of multi-turn episodes: `collect` checks the budget, `_collect` plays (module docstring)."""

    #: False where the explorer spends another budget than ``budget.total`` episodes (branch: env steps per task).
    fixed_total: ClassVar[bool] = True
    run: TrainConfig
    model: PreTrainedModel
    tok: PreTrainedTokenizerBase

    def collect(self, step: int, seeds: Sequence[int], budget: Budget, *, seed: int) -> list[Episode]:
        """The step's played episodes, grouped by task."""
        if len(seeds) != budget.prompts:
            raise ValueError(f"{type(self).__name__}.collect: {len(seeds)} task seeds for a budget of {budget.prompts}")
        episodes = self._collect(step, [int(s) for s in seeds], budget, seed=seed)
        budget.check(type(self).__name__, [e.group for e in episodes], fixed_total=self.fixed_total)
        return episodes

    @abstractmethod
    def _collect(self, step: int, seeds: list[int], budget: Budget, *, seed: int) -> list[Episode]: ...

    def postprocess(self, episodes: list[Episode], turn_advantages: list[np.ndarray]) -> EpisodeCredit:
        """The turn advantages after the explorer's credit, which episodes stay in the loss, and its metrics."""
        return EpisodeCredit(tuple(turn_advantages))

    def state_dict(self) -> dict[str, Any] | None:
        return None
