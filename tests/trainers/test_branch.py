"""Branching rollouts' planning and credit (`envkit.trainers.explorers.branch`): the budget, the branch-point choice
and the credit both backends call."""

from __future__ import annotations

import pytest

from envkit.trainers.explorers.branch import BranchConfig, admit, worst_cost


def test_defaults_resolve_to_half_the_group_and_the_baselines_step_cap():
    assert BranchConfig().resolve(group_size=8, max_turns=15) == (4, 120)
    assert BranchConfig().resolve(group_size=1, max_turns=4) == (1, 4)
    assert BranchConfig(backbones=3, budget_steps=50).resolve(group_size=8, max_turns=15) == (3, 50)


def test_a_budget_below_one_step_is_refused_and_one_below_the_backbones_is_allowed():
    with pytest.raises(ValueError, match=r"must be >= 1 env step per task"):
        BranchConfig(budget_steps=0).resolve(group_size=8, max_turns=15)
    assert BranchConfig(backbones=4, budget_steps=9).resolve(group_size=8, max_turns=15) == (4, 9)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(points=0), "must be >= 1"),
        (dict(branches=0), "must be >= 1"),
        (dict(backbones=0), "must be >= 1"),
        (dict(loo_weight=0.0, estimator_weight=0.0), "not both 0"),
        (dict(loo_weight=-1.0), ">= 0"),
        (dict(estimator_weight=float("inf")), "finite"),
        (dict(reserve="half"), "set 'worst' or 'backbone'"),
    ],
)
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        BranchConfig(**kw)


def test_admit_takes_the_highest_entropy_points_that_fit_the_budget():
    ent = [[0.1, 0.9, 0.5, 0.8], [0.7, 0.2]]
    # costs with K=2, H=5: turn t -> 2 * (5 - t): 10, 8, 6, 4
    assert worst_cost(3, 2, 5) == 4
    assert admit(ent, unspent=20, branches=2, max_turns=5, limit=4) == [(0, 1), (0, 3), (0, 2)]  # 8 + 4 + 6
    # (1, 0) (0.7, cost 10) does not fit after (0, 1) and (0, 3); (0, 2) does
    assert admit(ent, unspent=12, branches=2, max_turns=5, limit=4) == [(0, 1), (0, 3)]
    assert admit(ent, unspent=12, branches=2, max_turns=5, limit=1) == [(0, 1)]
    assert admit(ent, unspent=3, branches=2, max_turns=5, limit=4) == []
    assert admit(ent, unspent=20, branches=2, max_turns=5, limit=4, taken={(0, 1)}) == [(0, 3), (1, 0), (0, 2)]


def test_ties_go_to_the_earlier_backbone_and_turn_and_nan_is_refused():
    assert admit([[1.0, 1.0], [1.0]], unspent=100, branches=1, max_turns=4, limit=2) == [(0, 0), (0, 1)]
    with pytest.raises(ValueError, match="not finite"):
        admit([[0.1, float("nan")]], unspent=10, branches=1, max_turns=4, limit=1)


def test_the_backbone_reservation_costs_the_backbones_own_remaining_turns():
    ent = [[0.9, 0.1], [0.5, 0.4, 0.3]]  # backbone 0 took 2 turns, backbone 1 three, of up to 8
    # worst case: 2 * (8 - t) = 16 for (0, 0): nothing fits in 6
    assert admit(ent, unspent=6, branches=2, max_turns=8, limit=4) == []
    # backbone: (0, 0) costs 2 * 2 = 4, then (1, 0) 2 * 3 = 6 no longer fits; (1, 2) costs 2 * 1 = 2
    assert admit(ent, unspent=6, branches=2, max_turns=8, limit=4, lengths=[2, 3]) == [(0, 0), (1, 2)]


def test_branch_credit_exact_values_any_order_and_rows_outside_a_tree():
    """Backbone 0 (3 turns, success), its two forks at turn 1 (failures): LOO at the branch point +1 / -0.5 / -0.5
    (norm "mean", returns terminal_reward x success), weighted 2 and added to half the estimator's values; a row
    with no node keeps its values; the order of the rows does not matter."""
    import numpy as np

    from envkit.credit.advantage_options import AdvantageOptions
    from envkit.trainers.explorers.branch import BranchNode, branch_credit

    cfg = BranchConfig(points=1, branches=2, loo_weight=2.0, estimator_weight=0.5)
    adv = AdvantageOptions(norm="mean", terminal_reward=1.0)
    nodes = [BranchNode("g", 2, 0, 1, False), None, BranchNode("g", 0, -1, 0, True), BranchNode("g", 1, 0, 1, False)]
    est = [np.full(4, 2.0), np.array([7.0]), np.zeros(3), np.full(2, 2.0)]
    out, stats = branch_credit(nodes, est, cfg, adv)
    assert [a.tolist() for a in out] == [[1.0, 0.0, 0.0, 0.0], [7.0], [0.0, 2.0, 2.0], [1.0, 0.0]]
    assert est[0].tolist() == [2.0] * 4  # the caller's arrays stay
    assert stats == {"branch_decisions": 1, "branch_loo_mass": 4.0, "branch_loo_abs_mean": 4.0 / 7,
                     "branch_loo_nonzero_share": 6 / 7}  # fmt: skip
    with pytest.raises(ValueError, match="forks from 5, which is not in its group"):
        branch_credit([BranchNode("g", 1, 5, 1, False)], [np.zeros(2)], cfg, adv)
    with pytest.raises(ValueError, match="terminal_reward is None"):
        branch_credit(nodes, est, cfg, AdvantageOptions())
