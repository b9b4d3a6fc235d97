"""The hand-computed GiGPO / GraphGPO step table shared by test_advantages (where its values are derived) and
test_turn_credit (which checks the same values through `turn_credit`)."""

from __future__ import annotations

import pytest

from envkit.credit.advantages import StepTable


# group 0: T0 = a -> b -> SUCCESS (rewards 0, 10); T1 = a -> a (invalid, a loop) -> c -> failed end.
# group 1: one trajectory, one step from x, failed (singleton everything -> 0).
@pytest.fixture
def hand_table() -> StepTable:
    """A fresh copy of the hand-computed table for each test."""
    return StepTable(
        group=[0, 0, 0, 0, 0, 1],
        trajectory=[0, 0, 1, 1, 1, 0],
        step=[0, 1, 0, 1, 2, 0],
        state=["a", "b", "a", "a", "c", "x"],
        reward=[0, 10, 0, 0, 0, 0],
        invalid=[False, False, False, True, False, False],
    )
