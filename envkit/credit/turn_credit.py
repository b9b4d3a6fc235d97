"""`turn_credit`: the one call that turns a step table into per-turn advantages, for every caller.

The local trainer (`envkit.trainers.local.agent_source`), the OpenRLHF backend
(`envkit.trainers.openrlhf.turn_advantages`) and SERO's credit (`envkit.credit.sero_advantages.sero_advantages`,
which ``envkit-oracle rollout`` and both trainers call) build their `StepTable` their own way (token episodes,
rollout records, trajectories), then all credit it here: the estimator's name and the `AdvantageOptions` go in,
the estimator's result comes out, so no caller spells the estimators' keyword arguments by hand.

Episode-level estimators (``grpo``, ``rloo``, ...) have no turns to credit: they are
`envkit.credit.advantages.group_advantages` over one value per episode.

Example:
    >>> from envkit.credit.step_table import StepTable
    >>> t = StepTable(group=[0, 0], trajectory=[0, 1], step=[0, 0], state=["s", "s"], reward=[1.0, 0.0])
    >>> turn_credit(t, "gigpo", AdvantageOptions(norm="mean")).advantages.tolist()
    [1.0, -1.0]
"""

from __future__ import annotations

from typing import Literal, overload

from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.advantages import GigpoResult, GraphgpoResult, gigpo_advantages, graphgpo_advantages
from envkit.credit.step_table import StepTable

__all__ = ["TURN_ESTIMATORS", "TurnEstimator", "turn_credit"]

TurnEstimator = Literal["gigpo", "graphgpo"]
#: The estimators that credit each turn (the others are episode-level).
TURN_ESTIMATORS: tuple[TurnEstimator, ...] = ("gigpo", "graphgpo")


@overload
def turn_credit(table: StepTable, estimator: Literal["gigpo"], options: AdvantageOptions) -> GigpoResult: ...
@overload
def turn_credit(table: StepTable, estimator: Literal["graphgpo"], options: AdvantageOptions) -> GraphgpoResult: ...
@overload
def turn_credit(table: StepTable, estimator: str, options: AdvantageOptions) -> GigpoResult | GraphgpoResult: ...
def turn_credit(table: StepTable, estimator: str, options: AdvantageOptions) -> GigpoResult | GraphgpoResult:
    """Per-turn advantages of `table` under `estimator` with `options` (docs/methods.md sections 2-3).

    Args:
        table: One row per turn (any number of groups; rows in any order).
        estimator: ``gigpo`` or ``graphgpo``.
        options: Every setting of the estimator (``gamma_g`` None: `envkit.credit.defaults.GAMMA_G`).

    Returns:
        The estimator's result (``.advantages``: (N,) float64 aligned with the table's rows, and its parts).

    Raises:
        ValueError: an estimator that does not credit turns.
    """
    if estimator == "gigpo":
        return gigpo_advantages(table, **options.gigpo_kwargs())
    if estimator == "graphgpo":
        return graphgpo_advantages(table, **options.graphgpo_kwargs())
    raise ValueError(
        f"turn_credit: estimator {estimator!r} does not credit turns; use one of {TURN_ESTIMATORS}, or "
        "envkit.credit.advantages.group_advantages for an episode-level estimator (grpo, grpo_mean, rloo, dr_grpo)"
    )
