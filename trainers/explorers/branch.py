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
5. discard every snapshot; credit the tree (`branch_credit`: `envkit.credit.branching.loo_advantages` over each
   group's `BranchNode`s, returns ``adv.terminal_reward * success``) and add it to the estimator's advantages.
   Both backends call `branch_credit` (the local driver's postprocess, OpenRLHF's experience maker through
   `envkit.trainers.openrlhf.branch_turns`); each only reads its own records into `BranchNode`s.

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
from collections import defaultdict
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from envkit.credit.branching import BranchTree, loo_advantages

if TYPE_CHECKING:
    from envkit.credit.advantage_options import AdvantageOptions

__all__ = ["BranchConfig", "BranchNode", "admit", "branch_credit", "worst_cost"]


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


@dataclass(frozen=True)
class BranchNode:
    """One trajectory of a branching group's tree, as both backends read it from their records.

    Attributes:
        group: The task (prompt) whose tree it belongs to.
        index: Its index in the group (backbones and forks numbered together); the tree is over index order.
        parent: The index of the backbone it forks from; -1 for a backbone or a fork at turn 0 (one more root).
        fork: The turn it forks at (its first own turn; 0 with parent -1).
        success: The episode succeeded (its return is ``adv.terminal_reward * success``).
    """

    group: Hashable
    index: int
    parent: int
    fork: int
    success: bool


def branch_credit(
    nodes: Sequence[BranchNode | None],
    turn_advantages: Sequence[ArrayLike],
    cfg: BranchConfig,
    adv: AdvantageOptions,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Per trajectory, ``estimator_weight * turn_advantages + loo_weight * (the tree's leave-one-out advantages)``,
    and the credit's diagnostics (docs/methods.md section 8): the branch credit of both trainers, and of
    scripts/openrlhf_credit_check.py. Pure.

    Each group's tree is over its nodes in index order; a trajectory's length is its number of turn advantages
    (a fork: its backbone's prefix turns too, which get 0 from the tree), its return
    ``adv.terminal_reward * success`` (the one rule of both backends: `envkit.env_settings.resolve_env_settings`
    fills ``terminal_reward`` per run, unset: ``TERMINAL_REWARD``).

    Args:
        nodes: Per trajectory, its node, or None to keep its estimator values (a row outside any tree).
        turn_advantages: Per trajectory, the estimator's advantage of each of its turns.
        cfg: The branch settings (the two weights).
        adv: The resolved advantage options: ``terminal_reward`` (set), ``norm`` and ``eps`` (the leave-one-out
            values' normalisation).

    Raises:
        ValueError: ``adv.terminal_reward`` is None, a node names a parent outside its group, or the tree is not
            one (`envkit.credit.branching.BranchTree`).
    """
    if adv.terminal_reward is None:
        raise ValueError(
            "branch_credit: adv.terminal_reward is None; branching credits terminal_reward * success: resolve the "
            "run's options with envkit.env_settings.resolve_env_settings (unset: TERMINAL_REWARD, 10)"
        )
    win = float(adv.terminal_reward)
    out = [np.array(a, dtype=np.float64) for a in turn_advantages]  # copies: the caller's arrays stay
    groups: dict[Hashable, list[tuple[int, BranchNode]]] = defaultdict(list)
    for i, node in enumerate(nodes):
        if node is not None:
            groups[node.group].append((i, node))
    mass, owned, nonzero, decisions = 0.0, 0, 0, 0
    for g, members in groups.items():
        members.sort(key=lambda m: m[1].index)
        where = {n.index: k for k, (_, n) in enumerate(members)}
        for _, n in members:
            if n.parent != -1 and n.parent not in where:
                raise ValueError(
                    f"branch credit: trajectory {n.index} of group {g!r} forks from {n.parent}, which is not in its "
                    "group (a record's extra['branch']['parent'] names the spec index of a backbone of its prompt)"
                )
        tree = BranchTree(
            parent=tuple(-1 if n.parent == -1 else where[n.parent] for _, n in members),
            fork=tuple(n.fork for _, n in members), length=tuple(len(out[i]) for i, _ in members),
            returns=tuple(win * float(n.success) for _, n in members),
        )  # fmt: skip
        credit = loo_advantages(tree, norm=adv.norm, eps=adv.eps)
        decisions += credit.decisions
        for k, (i, _) in enumerate(members):
            loo = credit.advantages[k]
            out[i] = cfg.estimator_weight * out[i] + cfg.loo_weight * loo
            mine = np.abs(loo[tree.fork[k] :])
            mass += float(mine.sum())
            owned += len(mine)
            nonzero += int((mine > 0).sum())
    stats = {
        "branch_decisions": decisions,
        "branch_loo_mass": mass,
        "branch_loo_abs_mean": mass / max(owned, 1),
        "branch_loo_nonzero_share": nonzero / max(owned, 1),
    }
    return out, stats
