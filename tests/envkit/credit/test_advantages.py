"""Exact-value tests of envkit.credit.advantages on hand-computed tables (docs/methods.md sections 1-4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envkit.credit.advantages import (
    SUCCESS_NODE,
    TERMINAL_NODE,
    StepTable,
    apply_sero_weights,
    build_transition_graph,
    choice_logprob,
    discounted_returns,
    distances_to_success,
    gigpo_advantages,
    graphgpo_advantages,
    group_advantages,
    pass_at_k,
    reachability_weights,
    zero_advantage_fraction,
)

# Four groups: "a" 1 success of 4, "b" two values, "c" singleton, "d" all equal (0.1 is not exact in binary).
REWARDS = [1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 7.0, 0.1, 0.1, 0.1]
GROUPS = ["a", "a", "b", "a", "b", "a", "c", "d", "d", "d"]


def test_grpo_std_exact_with_variable_group_sizes():
    r = [1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 7.0, 0.1, 0.1, 0.1]
    g = [0, 0, 0, 0, 1, 1, 2, 3, 3, 3]
    adv = group_advantages(r, g, "grpo", eps=0.0)
    # group 0: mean .25, unbiased std .5; group 1: mean 3, std sqrt 2; singleton and all-equal -> exactly 0
    expected = [1.5, -0.5, -0.5, -0.5, -1 / math.sqrt(2), 1 / math.sqrt(2), 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(adv, expected, rtol=1e-12, atol=1e-12)
    assert np.all(adv[6:] == 0.0)  # exact zero, no NaN
    adv_eps = group_advantages(r, g, "grpo")
    np.testing.assert_allclose(adv_eps[:4], np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6), rtol=1e-12)


def test_grpo_interleaved_string_groups_match_sorted():
    adv = group_advantages(REWARDS, GROUPS, "grpo", eps=0.0)
    # "a": rows 0,1,3,5 = [1,0,0,4]: mean 1.25, var = (0.0625+1.5625*2+7.5625)/3 = 3.583333
    std = math.sqrt((0.0625 + 1.5625 * 2 + 7.5625) / 3)
    np.testing.assert_allclose(adv[[0, 1, 3, 5]], np.array([-0.25, -1.25, -1.25, 2.75]) / std, rtol=1e-12)
    np.testing.assert_allclose(adv[[2, 4]], [-1 / math.sqrt(2), 1 / math.sqrt(2)], rtol=1e-12)
    assert adv[6] == 0.0 and np.all(adv[7:] == 0.0)


def test_mean_only_rloo_dr_grpo_exact():
    r = [1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 7.0, 0.1, 0.1, 0.1]
    g = [0, 0, 0, 0, 1, 1, 2, 3, 3, 3]
    mean_only = [0.75, -0.25, -0.25, -0.25, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(group_advantages(r, g, "grpo_mean"), mean_only, atol=1e-15)
    np.testing.assert_allclose(group_advantages(r, g, "dr_grpo"), mean_only, atol=1e-15)
    # RLOO: r_i - mean of the others
    rloo = [1.0, -1 / 3, -1 / 3, -1 / 3, -2.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(group_advantages(r, g, "rloo"), rloo, atol=1e-12)
    assert np.all(group_advantages(r, g, "rloo")[6:] == 0.0)


def test_all_fail_and_all_success_groups_are_zero():
    for estimator in ("grpo", "grpo_mean", "rloo", "dr_grpo"):
        adv = group_advantages([0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1], estimator)
        assert np.all(adv == 0.0)
        assert zero_advantage_fraction(adv, [0, 0, 0, 1, 1, 1]) == 1.0


def test_estimator_errors():
    with pytest.raises(ValueError, match="unknown estimator"):
        group_advantages([1, 0], [0, 0], "ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rows"):
        group_advantages([1, 0], [0], "grpo")
    with pytest.raises(ValueError, match="NaN"):
        group_advantages([1, float("nan")], [0, 0])


def test_zero_advantage_fraction():
    adv = group_advantages(REWARDS, GROUPS, "grpo")
    assert zero_advantage_fraction(adv, GROUPS) == 0.5  # a, b nonzero; c, d zero
    per_token = np.repeat(adv[:, None], 3, axis=1)
    per_token[6, 1] = 0.5  # one non-zero token makes group "c" non-zero
    assert zero_advantage_fraction(per_token, GROUPS) == 0.25
    assert zero_advantage_fraction(np.zeros(0), []) == 0.0
    assert zero_advantage_fraction([1e-9, -1e-9], [0, 0], atol=1e-8) == 1.0


def test_pass_at_k():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 3) == 1.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c < k
    assert pass_at_k(256, 1, 256) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


# ---- GiGPO / GraphGPO on one hand-computed table (`hand_table`, tests/envkit/credit/conftest.py) ----
def test_step_table_defaults_and_row_order_independence(hand_table: StepTable):
    t = hand_table
    np.testing.assert_array_equal(t.episode_return, [10, 10, 0, 0, 0, 0])
    np.testing.assert_array_equal(t.success, [True, True, False, False, False, False])
    assert list(t.next_nodes()) == ["b", SUCCESS_NODE, "a", "c", TERMINAL_NODE, TERMINAL_NODE]
    np.testing.assert_allclose(discounted_returns(t, 0.5), [5, 10, 0, 0, 0, 0])
    perm = [4, 1, 5, 0, 3, 2]
    shuffled = StepTable(
        group=t.group[perm],
        trajectory=t.trajectory[perm],
        step=t.step[perm],
        state=t.state[perm],
        reward=t.reward[perm],
        invalid=t.invalid[perm],
    )
    a = gigpo_advantages(t, gamma=0.5, invalid_penalty=0.5).advantages
    b = gigpo_advantages(shuffled, gamma=0.5, invalid_penalty=0.5).advantages
    np.testing.assert_allclose(b, a[perm])
    with pytest.raises(ValueError, match="same"):
        StepTable(group=[0, 0], trajectory=[0, 0], step=[0, 0], state=["a", "b"], reward=[0, 0])


def test_gigpo_steps_mode_mean_norm_exact(hand_table: StepTable):
    res = gigpo_advantages(hand_table, gamma=0.5, omega=1.0, norm="mean", invalid_penalty=0.5)
    # episode scores 10, 10, 0, -0.5 (invalid), 0 -> step-row mean 3.9
    np.testing.assert_allclose(res.episode, [6.1, 6.1, -3.9, -4.4, -3.9, 0.0], atol=1e-12)
    # returns after penalty: 5, 10, 0, -0.5, 0, 0; state-a group {5, 0, -0.5}, mean 1.5
    np.testing.assert_allclose(res.returns, [5, 10, 0, -0.5, 0, 0])
    np.testing.assert_allclose(res.step, [3.5, 0.0, -1.5, -2.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(res.advantages, [9.6, 6.1, -5.4, -6.4, -3.9, 0.0], atol=1e-12)
    assert res.step_group[0] == res.step_group[2] == res.step_group[3]  # loop visits are separate members
    res2 = gigpo_advantages(hand_table, gamma=0.5, omega=2.0, norm="mean", invalid_penalty=0.5)
    np.testing.assert_allclose(res2.advantages, res.episode + 2 * res.step, atol=1e-12)


def test_gigpo_std_and_trajectory_stats_exact(hand_table: StepTable):
    res = gigpo_advantages(hand_table, gamma=0.5, norm="std", invalid_penalty=0.5, eps=0.0)
    scores = np.array([10, 10, 0, -0.5, 0])
    std_e = scores.std(ddof=1)
    np.testing.assert_allclose(res.episode[:5], (scores - 3.9) / std_e, rtol=1e-12)
    std_a = math.sqrt((3.5**2 + 1.5**2 + 2.0**2) / 2)
    np.testing.assert_allclose(res.step[[0, 2, 3]], np.array([3.5, -1.5, -2.0]) / std_a, rtol=1e-12)
    traj = gigpo_advantages(hand_table, gamma=0.5, norm="mean", invalid_penalty=0.5, episode_stats="trajectories")
    # paper mode: mean over the two trajectory returns {10, 0} = 5; each row centred with its own score
    np.testing.assert_allclose(traj.episode, [5, 5, -5, -5.5, -5, 0], atol=1e-12)
    traj_std = gigpo_advantages(hand_table, norm="std", eps=0.0, invalid_penalty=0.0, episode_stats="trajectories")
    np.testing.assert_allclose(traj_std.episode[:5], np.array([5, 5, -5, -5, -5]) / math.sqrt(50), rtol=1e-12)
    with pytest.raises(ValueError, match="episode_stats"):
        gigpo_advantages(hand_table, episode_stats="episodes")  # type: ignore[arg-type]


def test_gigpo_all_fail_group_is_zero_without_invalid_actions():
    t = StepTable(
        group=[0] * 4, trajectory=[0, 0, 1, 1], step=[0, 1, 0, 1], state=["s", "u", "s", "v"], reward=[0, 0, 0, 0]
    )
    res = gigpo_advantages(t)
    assert np.all(res.advantages == 0.0)


def test_graph_distances_unreachable_and_no_success():
    g = build_transition_graph([("a", "go", "b"), ("b", "win", SUCCESS_NODE), ("a", "look", "c"), ("c", "x", "c")])
    assert distances_to_success(g) == {"a": 2, "b": 1, SUCCESS_NODE: 0, "c": 3}
    none = build_transition_graph([("a", "go", "b"), ("b", "go", TERMINAL_NODE)])
    assert distances_to_success(none) == {"a": 1, "b": 1, TERMINAL_NODE: 1}
    # SERO: an oracle transition from c makes c (and so nothing else new) reach SUCCESS
    g2 = g.with_transitions([("c", "oracle", "d"), ("d", "oracle", SUCCESS_NODE)])
    assert distances_to_success(g2) == {"a": 2, "b": 1, SUCCESS_NODE: 0, "c": 2, "d": 1}
    assert distances_to_success(g)["c"] == 3  # the original graph is unchanged
    with pytest.raises(ValueError, match="SUCCESS"):
        build_transition_graph([(SUCCESS_NODE, "x", "a")])


def test_graphgpo_exact(hand_table: StepTable):
    res = graphgpo_advantages(hand_table, gamma_g=0.5, norm="mean", invalid_penalty=0.5)
    assert res.distances[0] == {"a": 2, "b": 1, SUCCESS_NODE: 0, "c": 3, TERMINAL_NODE: 3}
    assert res.distances[1] == {"x": 1, TERMINAL_NODE: 1}  # no success in the group: every node d = 1
    np.testing.assert_array_equal(res.distance, [1, 0, 2, 3, 3, 1])
    np.testing.assert_allclose(res.step_reward, [5, 10, 2.5, 0.75, 1.25, 5])
    # same-state "a" rows {5, 2.5, 0.75}: mean 2.75
    np.testing.assert_allclose(res.graph_adv, [2.25, 0, -0.25, -2.0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(res.advantages, [8.35, 6.1, -4.15, -6.4, -3.9, 0.0], atol=1e-12)
    weighted = graphgpo_advantages(hand_table, gamma_g=0.5, norm="mean", invalid_penalty=0.5, beta_g=2.0, beta_e=0.5)
    np.testing.assert_allclose(weighted.advantages, 2 * res.graph_adv + 0.5 * res.episode, atol=1e-12)


def test_graphgpo_all_success_prefers_shorter_path_and_all_fail_is_zero():
    t = StepTable(group=[0, 0, 0], trajectory=[0, 1, 1], step=[0, 0, 1], state=["a", "a", "b"], reward=[10, 0, 10])
    res = graphgpo_advantages(t, gamma_g=0.5, norm="mean")
    np.testing.assert_allclose(res.episode, 0.0)  # both succeed with return 10
    np.testing.assert_allclose(res.step_reward, [10, 5, 10])
    np.testing.assert_allclose(res.advantages, [2.5, -2.5, 0.0])
    fail = StepTable(group=[0] * 3, trajectory=[0, 1, 1], step=[0, 0, 1], state=["a", "a", "b"], reward=[0, 0, 0])
    assert np.all(graphgpo_advantages(fail).advantages == 0.0)


def test_graphgpo_no_success_group_graph_advantage_is_only_the_invalid_penalty():
    # Decision (docs/training.md, envkit.credit.advantages): the invalid penalty stays in R_G. A group with no success
    # has every d = 1, so its graph advantage is exactly 0 when no action is invalid and otherwise only
    # separates invalid rows from valid ones in the same state (as GiGPO's episode and step parts do).
    kw = {"group": [0] * 4, "trajectory": [0, 0, 1, 1], "step": [0, 1, 0, 1], "state": ["a", "b", "a", "b"]}
    valid = StepTable(**kw, reward=[0, 0, 0, 0])
    res = graphgpo_advantages(valid, gamma_g=0.5, norm="mean", invalid_penalty=0.1)
    assert np.all(res.graph_adv == 0.0) and np.all(res.advantages == 0.0)
    bad = StepTable(**kw, reward=[0, 0, 0, 0], invalid=[False, False, True, False])
    res = graphgpo_advantages(bad, gamma_g=0.5, norm="mean", invalid_penalty=0.1)
    np.testing.assert_array_equal(res.distance, [1, 1, 1, 1])
    np.testing.assert_allclose(res.step_reward, [5.0, 5.0, 4.9, 5.0])
    np.testing.assert_allclose(res.graph_adv, [0.05, 0.0, -0.05, 0.0], atol=1e-12)


def test_graphgpo_extra_transitions_for_sero(hand_table: StepTable):
    t = hand_table
    res = graphgpo_advantages(
        t, gamma_g=0.5, norm="mean", invalid_penalty=0.0, extra_transitions={0: [("c", "oracle", SUCCESS_NODE)]}
    )
    assert res.distances[0]["c"] == 1
    # d_max is now 2 (a), so the failed terminal is 3; row 3 (a -> c) now has d = 1
    np.testing.assert_array_equal(res.distance[:5], [1, 0, 2, 1, 3])
    with pytest.raises(ValueError, match="no rows"):
        graphgpo_advantages(t, extra_transitions={7: []})


def test_step_table_from_trajectories():
    from envkit.core import Step, Trajectory

    def traj(obs, acts, rewards, success, invalid=()):
        steps = tuple(
            Step(obs[i], acts[i], rewards[i], obs[i + 1], i == len(acts) - 1, False, {"invalid": i in invalid})
            for i in range(len(acts))
        )
        return Trajectory("envkit/Toy-v0", "t", 0, {}, obs[0], {}, steps, success)

    groups = [
        [
            traj(["a", "b", "win"], ["go", "take"], [0.0, 10.0], True),
            traj(["a", "a", "c"], ["bad", "go"], [0.0, 0.0], False, invalid=(0,)),
        ]
    ]
    t = StepTable.from_trajectories(groups)
    assert list(t.state) == ["a", "b", "a", "a"]
    np.testing.assert_array_equal(t.invalid, [False, False, True, False])
    assert t.transitions() == [("a", "go", "b"), ("b", "take", SUCCESS_NODE), ("a", "bad", "a"), ("a", "go", "c")]
    t10 = StepTable.from_trajectories(groups, terminal_reward=1.0)
    np.testing.assert_array_equal(t10.episode_return, [1, 1, 0, 0])


# ---- SERO reachability weights (docs/methods.md section 4) ----
def test_reachability_weights_exact():
    ll = [-0.5, -10.0, -0.1, -0.2]
    # floored: -0.5, log .05 = -2.9957, -0.1; log w = 0, -0.5, -3.4957, -3.5957
    w = reachability_weights(ll)
    np.testing.assert_allclose(w, [1.0, math.exp(-0.5), 0.05, 0.05], rtol=1e-12)
    w2 = reachability_weights(ll, tau_w=2.0)
    lw = np.array([0.0, -0.5, -0.5 + math.log(0.05), -0.6 + math.log(0.05)])
    np.testing.assert_allclose(w2, np.exp(lw / 2), rtol=1e-12)
    w3 = reachability_weights(ll, p_floor=1e-6, w_min=0.0)
    np.testing.assert_allclose(w3, np.exp([0.0, -0.5, -10.5, -10.6]), rtol=1e-12)
    # the last action's own likelihood never enters any weight
    np.testing.assert_array_equal(reachability_weights([-0.5, -10.0, -0.1, -99.0]), w)
    assert reachability_weights([]).shape == (0,)
    assert reachability_weights([-5.0]).tolist() == [1.0]


def test_choice_logprob_and_apply_weights():
    assert choice_logprob([0.0, math.log(3.0)], 1) == pytest.approx(math.log(0.75))
    assert choice_logprob([-100.0, -101.0, -102.0], 0) == pytest.approx(-math.log(1 + math.exp(-1) + math.exp(-2)))
    with pytest.raises(IndexError):
        choice_logprob([0.0], 1)
    np.testing.assert_allclose(apply_sero_weights([2.0, -1.0, 4.0], [1.0, 0.5, 0.05]), [2.0, -0.5, 0.2])
    per_token = apply_sero_weights(np.ones((2, 3)), [1.0, 0.25])
    np.testing.assert_allclose(per_token, np.array([[1.0, 1.0, 1.0], [0.25, 0.25, 0.25]]))
    with pytest.raises(ValueError):
        apply_sero_weights([1.0], [-1.0])
