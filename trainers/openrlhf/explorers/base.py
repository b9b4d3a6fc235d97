"""The OpenRLHF explorer contract: what an explorer does at each of the backend's hooks (plain groups by default).

One `Explorer` is built per process from the run's `BackendConfig` by the registry
(`envkit.trainers.openrlhf.explorers.registry.make_explorer`); the backend's modules call its hooks and never
compare the explorer's name:

| hook | caller | what it decides |
|---|---|---|
| `engine_kwargs` | the rollout actor (`rollout_actor.engine_kwargs`) | vLLM engine options (EDEN: prompt embeddings) |
| `plan` | the samples generator (`samples.EnvkitSamplesGenerator`) | the `RolloutSpec`s of one prompt (EDEN's noisy first turns, branching's fork slots) |
| `rounds` | the samples generator | XRPO's phased rounds in place of one dispatch (None: one dispatch) |
| `keeps_episodes`, `episode_extra` | the agent executor (`gym_executor`) | keep each episode with its snapshots (branching's backbones) and tag its record |
| `row_credit` | `turn_advantages.compute_turn_advantages` | one advantage per row for an episode-level estimator (EDEN's select + absorb, XRPO's sharpening) |
| `turn_credit` | `turn_advantages.compute_turn_advantages` | the per-turn advantages after the estimator (EDEN's select + absorb, branching's leave-one-out term) |
| `metrics` | `turn_advantages.compute_turn_advantages` | the explorer's batch diagnostics (docs/metrics.md) |

The methods' maths are backend-agnostic, in `envkit.trainers.explorers`; an explorer only wires them to
OpenRLHF's rows.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from envkit.credit.advantages import group_advantages
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutSpec

if TYPE_CHECKING:
    from envkit.trainers.openrlhf.turn_paths import SampleRow

__all__ = ["Explorer", "RowCredit", "TurnCredit", "plain_specs", "row_level"]


def plain_specs(group: str, n: int) -> list[RolloutSpec]:
    """n plain rollouts of one group."""
    return [RolloutSpec(group=group, index=i) for i in range(n)]


def row_level(rows: Sequence[SampleRow], groups: list[Hashable], cfg: BackendConfig) -> np.ndarray:
    """One group-normalised advantage per row from OpenRLHF's rewards (``--adv.norm``: std or mean only)."""
    estimator: Literal["grpo", "grpo_mean"] = "grpo" if cfg.adv.norm == "std" else "grpo_mean"
    return group_advantages([r.reward for r in rows], groups, estimator, eps=cfg.adv.eps)


@dataclass(frozen=True, eq=False)
class RowCredit:
    """An episode-level estimator's result: (N,) advantages, (N,) bool rows kept in the loss, diagnostics."""

    advantages: np.ndarray
    keep: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class TurnCredit:
    """Per-turn advantages after an explorer's post-processing, the rows kept in the loss, diagnostics."""

    per_turn: list[np.ndarray]
    keep: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


class Explorer:
    """Plain groups (``--explorer none``): n rollouts per prompt, the estimator's credit unchanged.

    Subclasses set `name` (the ``--explorer`` value), `section` (their ``--<section>.*`` options, None: none) and
    override the hooks they need (see the module docstring).

    Args:
        config: The run's backend config (its explorer config already sized and checked there).
    """

    #: The ``--explorer`` value.
    name: ClassVar[str] = "none"
    #: The option section that belongs to this explorer (``--eden.*``, ...; None: none).
    section: ClassVar[str | None] = None
    #: The executor keeps each episode (snapshots, env) until its group is finished, and samples the tokens'
    #: log-probs (branching forks from restored backbone states by entropy).
    keeps_episodes: ClassVar[bool] = False
    #: Groups of different sizes in one step (XRPO): OpenRLHF's dynamic filtering cannot regroup them.
    variable_groups: ClassVar[bool] = False

    def __init__(self, config: BackendConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"{type(self).__name__}(explorer={self.name!r})"

    # ----- engines and plans (rollout side) ---------------------------------------------------------------
    def engine_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The vLLM engine's keyword arguments with what this explorer needs (plain: unchanged)."""
        return kwargs

    def plan(self, group: str, n: int, step: int, rng: np.random.Generator) -> list[RolloutSpec]:
        """The rollout plan of one prompt: n specs of group `group` at training step `step`."""
        return plain_specs(group, n)

    def rounds(self) -> Any | None:
        """An object whose ``run(generator, prompts, labels, images, step, **kwargs)`` replaces the one dispatch of
        a step (XRPO's phases); None: one dispatch of `plan`s."""
        return None

    def episode_extra(self, nll: list[float]) -> dict[str, Any]:
        """What the executor adds to a kept episode's ``record.extra`` (per turn: the sampled tokens' mean -log p)."""
        return {}

    # ----- credit (experience maker) -------------------------------------------------------------------------
    def row_credit(self, rows: Sequence[SampleRow], groups: list[Hashable]) -> RowCredit:
        """One advantage per row for an episode-level estimator (plain: `row_level`, every row kept)."""
        return RowCredit(row_level(rows, groups, self.config), np.ones(len(rows), dtype=bool))

    def turn_credit(
        self, rows: Sequence[SampleRow], groups: list[Hashable], credit: TurnCredit, per_turn_estimator: bool
    ) -> TurnCredit:
        """The per-turn advantages after the estimator (``per_turn_estimator``: GiGPO / GraphGPO / SERO made them),
        post-processed by the explorer (plain: unchanged)."""
        return credit

    def metrics(self, rows: Sequence[SampleRow], groups: list[Hashable], keep: np.ndarray) -> dict[str, float]:
        """The explorer's batch diagnostics (plain: none)."""
        return {}
