"""Reachability weights (docs/methods.md section 4.5) and the pipeline's SERO credit (`credit_task`: distances before/after
oracle transitions, policy rows' episode term over the policy episodes only; docs/methods.md sections 3, 4.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envkit.core import Root, Step, Trajectory
from envkit.credit.reachability import ReachConfig
from envkit.credit.sero import SeroConfig
from envkit.oracles.continuation import ContinuationOutcome
from envkit.oracles.pipeline import credit_task
from envkit.oracles.reach_weights import oracle_turns, reach_weights
from envkit.oracles.scorers import UniformScorer


def _traj(states, actions, success=False):
    steps = [
        Step(states[t], a, float(success and t == len(actions) - 1), states[t + 1], False, False, {})
        for t, a in enumerate(actions)
    ]
    return Trajectory("envkit/Toy-v0", "t", 0, {}, states[0], {}, tuple(steps), success)


def _outcome(root_obs, states, actions, *, n_admissible=4, t=2, trajectory=1):
    adm = {"admissible_actions": [f"a{i}" for i in range(n_admissible)]}
    steps = tuple(
        Step(states[j], a, float(j == len(actions) - 1), states[j + 1], j == len(actions) - 1, False, adm, None, True)
        for j, a in enumerate(actions)
    )
    return ContinuationOutcome(Root(0, trajectory, t, root_obs), "native", steps=steps, success=True, root_info=adm)


def test_uniform_weights_equal_hand_values():
    o = _outcome("r", ["r", "x", "y", "z", "q"], ["a0", "a1", "a2", "a3"])
    w = reach_weights(UniformScorer(), (), o, SeroConfig(), weighting="sequence")
    # l_j = log(1/4) for every step: w = [1 (the paper's w_t, default), 1/4, 1/16, 1/64 -> w_min 0.05].
    assert w.loglik == pytest.approx((math.log(0.25),) * 4)
    assert w.weights == pytest.approx((1.0, 0.25, 0.0625, 0.05))
    own = reach_weights(UniformScorer(), (), o, SeroConfig(reach=ReachConfig(first="own")), weighting="sequence")
    assert own.weights == pytest.approx((0.25, 0.25, 0.0625, 0.05))  # the ablation: its own likelihood
    w2 = reach_weights(
        UniformScorer(), (), o, SeroConfig(reach=ReachConfig(tau_w=2.0, w_min=0.0)), weighting="sequence"
    )
    assert w2.weights == pytest.approx((1.0, 0.5, 0.25, 0.125))


def test_floor_applies_per_step():
    # 100 admissible actions: l = log(0.01) < log(p_floor = 0.05): each step contributes log(0.05).
    o = _outcome("r", ["r", "x", "y"], ["a0", "a1"], n_admissible=100)
    w = reach_weights(UniformScorer(), (), o, SeroConfig(reach=ReachConfig(w_min=0.0)), weighting="sequence")
    assert w.weights == pytest.approx((1.0, 0.05))  # the first weighs 1; the second its path, floored
    w = reach_weights(
        UniformScorer(), (), o, SeroConfig(reach=ReachConfig(w_min=0.0, p_floor=0.001)), weighting="sequence"
    )
    assert w.weights == pytest.approx((1.0, 0.01))
    w = reach_weights(
        UniformScorer(), (), o, SeroConfig(reach=ReachConfig(w_min=0.0, first="own")), weighting="sequence"
    )
    assert w.weights == pytest.approx((0.05, 0.05))  # the ablation floors the first one's own likelihood too


def test_choice_variant_and_fallback():
    o = _outcome("r", ["r", "x", "y"], ["a1", "not-listed"], n_admissible=5)
    w = reach_weights(UniformScorer(), (), o, SeroConfig(reach=ReachConfig(w_min=0.0)), weighting="choice")
    # choice prob among 5 equal candidates = 1/5; the unlisted action falls back to the sequence value.
    assert w.loglik == pytest.approx((math.log(0.2), math.log(0.2)))
    assert w.choice_fallbacks == 1
    assert w.weights == pytest.approx((1.0, 0.2))


def test_oracle_turns_carry_prefix_history_and_info_before_each_action():
    prefix = (Step("p0", "go", 0.0, "r", False, False, {}),)
    o = _outcome("r", ["r", "x", "y"], ["a0", "a1"])
    turns = oracle_turns(prefix, o, "task-7")
    assert [t.observation for t in turns] == ["r", "x"]
    assert [len(t.history) for t in turns] == [1, 2]
    assert turns[1].history[-1].action == "a0" and turns[0].task_id == "task-7"
    assert turns[0].info == o.root_info


def _credit(g, outs, cfg=None):
    cfg = cfg or SeroConfig()
    ws = [
        reach_weights(UniformScorer(), g[o.root.trajectory].steps[: o.root.t], o, cfg, weighting="sequence")
        for o in outs
    ]
    return credit_task(g, outs, ws, cfg)


def test_graph_distances_before_and_after_oracle_transitions():
    # traj 0: s0 -a-> s1 -b-> SUCCESS.  traj 1 (failed): s0 -c-> s2 -d-> s3.
    g = [_traj(["s0", "s1", "w"], ["a", "b"], success=True), _traj(["s0", "s2", "s3"], ["c", "d"])]
    # Oracle from root s3 (traj 1, t=2): s3 -e-> s4 -f-> SUCCESS.
    o = _outcome("s3", ["s3", "s4", "w2"], ["e", "f"], t=2, trajectory=1)
    res, pol, ora = _credit(g, [o])
    # Distances of each row's NEXT state. Before: s1=1, s0=2, SUCCESS=0; s2 and s3 unreachable -> d_max + 1 = 3.
    assert {k: v.distance_before for k, v in pol.items()} == {(0, 0): 1, (0, 1): 0, (1, 0): 3, (1, 1): 3}
    # After: s4=1, s3=2, s2=3 (now finite), s1=1.
    assert {k: v.distance for k, v in pol.items()} == {(0, 0): 1, (0, 1): 0, (1, 0): 3, (1, 1): 2}
    assert {k: v.distance for k, v in ora.items()} == {(0, 0): 1, (0, 1): 0}
    assert all(v.distance_before is None for v in ora.values())
    # R_G = 10 * 0.1 ** d; A = A_G + A_E.
    assert pol[(1, 0)].step_reward == pytest.approx(10 * 0.1**3)
    for v in [*pol.values(), *ora.values()]:
        assert v.advantage == pytest.approx(v.graph_advantage + v.episode_advantage)
    # The policy rows' episode term is plain GraphGPO's over the 2 policy episodes only (steps: 10, 10, 0, 0):
    # the oracle's success is not a policy episode and does not lower the failed trajectory's standing.
    ae = (np.array([10.0, 10, 0, 0]) - 5.0) / (np.std([10.0, 10, 0, 0], ddof=1) + 1e-6)
    assert [pol[k].episode_advantage for k in [(0, 0), (0, 1), (1, 0), (1, 1)]] == pytest.approx(ae, abs=1e-12)
    assert np.array_equal(res.policy.episode, res.plain.episode)
    # Oracle rows: a success's A_E among policy + oracle step rows (10, 10, 0, 0, 10, 10), weight from l_j.
    sc = np.array([10.0, 10, 0, 0, 10, 10])
    assert ora[(0, 0)].episode_advantage == pytest.approx((10 - sc.mean()) / (sc.std(ddof=1) + 1e-6), abs=1e-12)
    assert [ora[(0, j)].weight for j in range(2)] == pytest.approx([1.0, 0.25])


def test_failed_continuations_add_nothing():
    g = [_traj(["s0", "s2", "s3"], ["c", "d"])]
    o = _outcome("s3", ["s3", "s4", "w2"], ["e", "f"], t=2, trajectory=0)
    bad = ContinuationOutcome(o.root, "native", steps=o.steps, success=False, reason="budget")
    _, pol, ora = _credit(g, [bad])
    assert ora == {} and {v.distance for v in pol.values()} == {1}  # a group with no success: every d = 1
    assert {v.advantage for v in pol.values()} == {0.0}
    res, pol2, ora2 = _credit(g, [bad, o])
    assert [pol2[(0, t)].distance for t in range(2)] == [3, 2]
    assert set(ora2) == {(1, 0), (1, 1)}  # keyed by the outcome's index
    # one policy episode: its episode term stays 0 (plain GraphGPO's), its step rows have no sibling: A_G 0
    assert [pol2[(0, t)].advantage for t in range(2)] == [0.0, 0.0]
