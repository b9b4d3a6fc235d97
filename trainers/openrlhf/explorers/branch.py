"""``--explorer branch`` on OpenRLHF: branching rollouts from restored high-entropy backbone states.

- plan (`branch_specs`): ``backbones`` rollouts from reset and ``points x branches`` fork slots that the rollout
  actor fills from restored backbone states (`envkit.trainers.openrlhf.branch_rows`);
- executor: every episode is kept with its snapshots until its group is finished (`keeps_episodes`), the sampled
  tokens' log-probs are asked for (the entropy estimate) and the record carries its node of the tree
  (`episode_extra`: ``extra["branch"]``);
- credit: the tree's leave-one-out term added to the estimator's per-turn values
  (`envkit.trainers.explorers.branch.branch_credit`, the local trainer's, through
  `envkit.trainers.openrlhf.branch_turns.branch_turn_advantages`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from envkit.trainers.openrlhf.branch_turns import branch_turn_advantages
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.explorers.base import Explorer, TurnCredit
from envkit.trainers.openrlhf.rollout_records import RolloutSpec

if TYPE_CHECKING:
    from envkit.trainers.openrlhf.turn_paths import SampleRow

__all__ = ["BranchExplorer", "branch_specs"]


def branch_specs(group: str, n: int, config: BackendConfig) -> list[RolloutSpec]:
    """Branching rollouts' plan for one prompt: the backbones, then ``points x branches`` fork slots (filled from
    restored backbone states by the group's branch step, `envkit.trainers.openrlhf.branch_rows`); n in all."""
    backbones = config.branch_config().resolve(n, config.max_turns)[0]
    return [RolloutSpec(group=group, index=i, fork=i >= backbones) for i in range(n)]


class BranchExplorer(Explorer):
    """Branching rollouts (see the module docstring)."""

    name: ClassVar[str] = "branch"
    section: ClassVar[str | None] = "branch"
    keeps_episodes: ClassVar[bool] = True

    def plan(self, group: str, n: int, step: int, rng: np.random.Generator) -> list[RolloutSpec]:
        return branch_specs(group, n, self.config)

    def episode_extra(self, nll: list[float]) -> dict[str, Any]:
        return {"branch": {"parent": -1, "fork": 0, "nll": nll}}  # a backbone: the root of its tree

    def turn_credit(
        self, rows: Sequence[SampleRow], groups: list[Hashable], credit: TurnCredit, per_turn_estimator: bool
    ) -> TurnCredit:
        per_turn, stats = branch_turn_advantages(rows, groups, credit.per_turn, self.config)
        return TurnCredit(per_turn, credit.keep, {**credit.stats, **stats})
