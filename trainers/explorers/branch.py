"""Branching rollouts (BPO-style, docs/methods.md section 8): settings, the env-step budget, branch-point choice.

Backend-agnostic (numpy only), shared by the local trainer (`envkit.trainers.local.explorers.branch`) and the OpenRLHF
backend. Per task, one training step:

1. play ``backbones`` episodes with a snapshot before every step;
2. score each backbone decision by the policy's mean token entropy of the action it sampled there;
3. `admit` the highest-entropy decisions whose worst-case cost fits the unspent env-step budget (a branch from
   turn t can take at most ``max_turns - t`` steps; K of them are reserved per point), at most ``points`` per
   task over the step;
4. restore each admitted point's snapshot natively into fresh env instances, sample K new actions there and let
   the policy finish every branch; refund what the branches did not use and admit again (rounds) until no
   candidate fits or ``points`` are taken;
5. discard every snapshot; credit the tree (`envkit.credit.branching.loo_advantages`) and add it to the
   estimator's advantages.

The budget (``budget_steps``, per task) defaults to the baseline's: ``group_size * max_turns``, the env steps its
G episodes may take at most. Backbones are always played; branches spend only what they leave, and admission
reserves worst cases, so branches never exceed it. A budget below the backbones' worst case
(``backbones * max_turns``; e.g. matched to a baseline's measured use on an env whose episodes end early) can be
overrun by the backbones alone: then no branch is played and the overrun is logged (``branch_budget_overrun``),
so a script matching cumulative env steps lowers the next step's budget.

Example:
    >>> cfg = BranchConfig(points=2, branches=2)
    >>> cfg.resolve(group_size=4, max_turns=5)
    (2, 20)
    >>> admit([[0.1, 0.9, 0.5], [0.7]], unspent=10, branches=2, max_turns=5, limit=2)
    [(0, 1)]
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["BranchConfig", "admit", "worst_cost"]


@dataclass(frozen=True)
class BranchConfig:
    """Branching-rollout settings (docs/methods.md section 8; every default is ours: the paper's are not public)."""

    # --- the tree ---
    points: int = 4
    """M, the most branch points per task and step."""
    branches: int = 2
    """K, new actions forked at each point (the backbone's own action is one more sibling)."""
    backbones: int | None = None
    """Backbone episodes per task; None: ``ceil(group_size / 2)``."""
    # --- budget ---
    budget_steps: int | None = None
    """Env steps per task and step (backbones + branches), >= 1; None: the baseline's ``group_size * max_turns``. Set it
    to a baseline run's measured mean to match actual use."""
    reserve: Literal["worst", "backbone"] = "worst"
    """What a point reserves of the budget before its branches run: ``"worst"`` (K x the turns left to ``max_turns``:
    branches can never exceed the budget) or ``"backbone"`` (K x the turns the backbone itself took from there: an
    estimate, so short-episode envs get branches under a budget matched to measured use; a step can overrun, logged
    as ``branch_budget_overrun``, and a script that matches cumulative env steps takes it back next step)."""
    # --- credit ---
    loo_weight: float = 1.0
    """Weight of the leave-one-out sibling advantage."""
    estimator_weight: float = 1.0
    """Weight of the run's estimator advantage (``agent.estimator`` on every trajectory of the tree as a full episode);
    0 trains on the leave-one-out term alone."""

    def __post_init__(self) -> None:
        if self.points < 1 or self.branches < 1:
            raise ValueError(f"branch.points ({self.points}) and branch.branches ({self.branches}) must be >= 1")
        if self.reserve not in ("worst", "backbone"):
            raise ValueError(f"branch.reserve {self.reserve!r}: set 'worst' or 'backbone'")
        if self.backbones is not None and self.backbones < 1:
            raise ValueError(f"branch.backbones {self.backbones}: must be >= 1 (or None: half the group)")
        if not (math.isfinite(self.loo_weight) and math.isfinite(self.estimator_weight)):
            raise ValueError("branch.loo-weight and branch.estimator-weight must be finite")
        if self.loo_weight < 0 or self.estimator_weight < 0 or self.loo_weight + self.estimator_weight == 0:
            raise ValueError("branch.loo-weight and branch.estimator-weight must be >= 0, not both 0")

    def resolve(self, group_size: int, max_turns: int) -> tuple[int, int]:
        """(backbones per task, env-step budget per task) for a run of this group size and turn cap.

        Raises:
            ValueError: a budget below 1 step.
        """
        backbones = self.backbones if self.backbones is not None else max(1, math.ceil(group_size / 2))
        budget = self.budget_steps if self.budget_steps is not None else group_size * max_turns
        if budget < 1:
            raise ValueError(f"branch.budget-steps {budget}: must be >= 1 env step per task (None: the baseline's)")
        return backbones, budget


def worst_cost(turn: int, branches: int, max_turns: int) -> int:
    """Env steps K branches from `turn` can take at most (each ``max_turns - turn``)."""
    return branches * (max_turns - turn)


def admit(
    entropies: Sequence[Any],
    *,
    unspent: int,
    branches: int,
    max_turns: int,
    limit: int,
    taken: Collection[tuple[int, int]] = (),
    lengths: Sequence[int] | None = None,
) -> list[tuple[int, int]]:
    """Branch points (backbone, turn) to play now, highest entropy first, each fitting the budget left.

    Args:
        entropies: Per backbone, the policy's entropy at each of its decisions (turn order; a list or 1-D array).
        unspent: Env steps not spent or reserved yet.
        branches: K.
        max_turns: The turn cap (a branch from turn t takes at most ``max_turns - t`` steps).
        limit: The most points to admit.
        taken: Points admitted in earlier rounds (skipped).
        lengths: Per backbone, its turns; given, a point costs ``branches * (lengths[b] - t)`` (the
            ``"backbone"`` reservation) instead of the worst case.

    Raises:
        ValueError: a non-finite entropy.
    """
    cands = []
    for b, row in enumerate(entropies):
        for t, h in enumerate(row):
            if not math.isfinite(h):
                raise ValueError(f"admit: entropy of backbone {b} turn {t} is {h}: the policy's logits are not finite")
            if (b, t) not in taken and t < max_turns:
                cands.append((-float(h), b, t))
    out: list[tuple[int, int]] = []
    for _, b, t in sorted(cands):
        if len(out) >= limit:
            break
        cost = worst_cost(t, branches, max_turns) if lengths is None else branches * (lengths[b] - t)
        if cost <= unspent:
            out.append((b, t))
            unspent -= cost
    return out
