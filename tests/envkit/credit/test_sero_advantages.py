"""SERO's credit (`envkit.credit.sero_advantages`): what adding oracle rescues may and may not do to policy rows.

Exact-value tests of the design in docs/methods.md (SERO): policy rows keep plain GraphGPO's episode term and
change their step term only where the rescued graph changed their same-state distances; oracle rows get a
success's episode term, the same-state graph term and the reachability weight (first action: its own likelihood).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.advantages import graphgpo_advantages
from envkit.credit.reachability import ReachConfig
from envkit.credit.sero import SeroOptions
from envkit.credit.sero_advantages import Rescue, sero_advantages
from envkit.credit.step_table import StepTable

ADV = AdvantageOptions(terminal_reward=10.0)


def _table(trajs, group=0):
    """trajs: list of (states, actions, success, invalid per step); next states are the next row's state."""
    cols = {k: [] for k in ("group", "trajectory", "step", "state", "reward", "invalid", "action")}
    for i, (states, actions, success, invalid) in enumerate(trajs):
        for t, a in enumerate(actions):
            last = t == len(actions) - 1
            for k, v in zip(cols, (group, i, t, states[t], 10.0 * success * last, invalid[t], a)):
                cols[k].append(v)
    return cols


def _group(group=0):
    # 0 succeeds: s0 -a-> s1 -b-> SUCCESS.  1: s0 -c-> s2 -d-> s3 (cut by the turn cap: last points to TERMINAL).
    # 2: s0 -c-> s2 -e-> s4 -x-> s9.  3: s5 -g-> s5 (invalid) -h-> s6, a state nobody else visits.
    return _table(
        [
            (["s0", "s1"], ["a", "b"], True, [False, False]),
            (["s0", "s2"], ["c", "d"], False, [False, False]),
            (["s0", "s2", "s4"], ["c", "e", "x"], False, [False, False, False]),
            (["s5", "s5"], ["g", "h"], False, [True, False]),
        ],
        group,
    )


def _rescue(group=0, trajectory=2, t=2, loglik=(-3.0, -0.5), states=("s4", "s8"), actions=("o1", "o2")):
    return Rescue(group, trajectory, t, states, actions, (*states[1:], "won"), (False,) * len(actions), loglik, 10.0)


def _plain(table, adv=ADV):
    return graphgpo_advantages(table, **adv.graphgpo_kwargs())


def test_no_rescue_is_plain_graphgpo_exactly():
    table = StepTable(**_group())
    res = sero_advantages(table, [], ADV)
    plain = _plain(table)
    assert np.array_equal(res.policy.advantages, plain.advantages)
    assert np.array_equal(res.policy.graph_adv, plain.graph_adv) and not res.policy.changed.any()
    assert len(res.oracle.advantages) == 0


FIELD_VALUES = {
    "gamma_g": 0.3, "beta_g": 0.5, "beta_e": 2.0, "reward_scale": 3.0, "episode_stats": "trajectories",
    "norm": "mean", "invalid_penalty": 0.7, "eps": 0.5, "terminal_reward": 4.0,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FIELD_VALUES))
def test_every_advantage_option_reaches_the_sero_arm_as_it_reaches_plain_graphgpo(name):
    adv = dataclasses.replace(ADV, **{name: FIELD_VALUES[name]})
    cols = _group()
    if name == "terminal_reward":  # the return of a success: what every backend builds its table from
        cols["reward"] = [r * adv.terminal_reward / 10.0 for r in cols["reward"]]
    table = StepTable(**cols)
    # with no rescue: plain GraphGPO with the same options, bit for bit
    assert np.array_equal(sero_advantages(table, [], adv).policy.advantages, _plain(table, adv).advantages)
    # with a rescue, the field changes the SERO output (policy or oracle rows) against the default options
    ret = float(adv.terminal_reward or 0.0)
    base = sero_advantages(StepTable(**_group()), [_rescue()], ADV)
    res = sero_advantages(table, [dataclasses.replace(_rescue(), episode_return=ret)], adv)
    assert not (
        np.array_equal(res.policy.advantages, base.policy.advantages)
        and np.array_equal(res.oracle.weighted, base.oracle.weighted)
    ), name


def test_gigpo_only_options_do_not_touch_graphgpo_or_sero():
    table = StepTable(**_group())
    base = sero_advantages(table, [_rescue()], ADV)
    for change in ({"gamma": 0.5}, {"omega": 3.0}):
        res = sero_advantages(table, [_rescue()], dataclasses.replace(ADV, **change))
        assert np.array_equal(res.policy.advantages, base.policy.advantages)
        assert np.array_equal(res.oracle.weighted, base.oracle.weighted)


def test_policy_rows_keep_plain_episode_term_and_change_only_where_their_distances_changed():
    table = StepTable(**_group())
    plain = _plain(table)
    res = sero_advantages(table, [_rescue()], ADV)
    p = res.policy
    # A_E: plain GraphGPO's, over the 4 policy episodes only (the oracle success is not among them)
    assert np.array_equal(p.episode, plain.episode)
    # distances: before s1=1 SUCCESS=0, s0 reaches via a (2); s2, s4, s9, s5, s6, TERMINAL unreachable -> 3.
    assert p.distance_before.tolist() == [1, 0, 3, 3, 3, 3, 3, 3, 3]
    # after: s8=1, s4=2, s2=3 (via e); fill = 3 + 1 = 4 for s9, s5, s6 and TERMINAL.
    assert p.distance.tolist() == [1, 0, 3, 4, 3, 2, 4, 4, 4]
    # same-state groups: s0 {0,2,4}: d (1,3,3) -> (1,3,3) unchanged; s1 {1}; s2 {3,5}: (3,3) -> (4,2) changed;
    # s4 {6}: (3) -> (4): one row, all equal before and after; s5 {7,8}: (3,3) -> (4,4) all equal.
    assert p.changed.tolist() == [False, False, False, True, False, True, False, False, False]
    untouched = ~p.changed
    assert np.array_equal(p.advantages[untouched], plain.advantages[untouched])
    # the changed pair at s2: R_G = 10 * 0.1 ** (4, 2) = (0.001, 0.1), normalised over the two policy rows
    r = np.array([10 * 0.1**4, 10 * 0.1**2])
    z = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert p.graph_adv[[3, 5]] == pytest.approx(z, abs=1e-15)
    assert p.advantages[[3, 5]] == pytest.approx(z + plain.episode[[3, 5]], abs=1e-15)
    # in plain GraphGPO both rows at s2 were unreachable: A_G 0; the rescue separates e (towards the root) from d
    assert plain.graph_adv[[3, 5]].tolist() == [0.0, 0.0] and p.graph_adv[3] < 0 < p.graph_adv[5]


def test_oracle_rows_success_episode_term_same_state_graph_term_and_weights():
    table = StepTable(**_group())
    res = sero_advantages(table, [_rescue()], ADV)
    o = res.oracle
    assert o.rescue.tolist() == [0, 0] and o.step.tolist() == [0, 1] and o.distance.tolist() == [1, 0]
    # A_E: score 10 in the step statistics of the 9 policy rows (returns 10, 10, then 7 zeros) and the 2 oracle rows
    scores = np.array([10, 10, 0, 0, 0, 0, 0, 0, 0, 10, 10], dtype=float) - 0.1 * np.array([0] * 7 + [1] + [0] * 3)
    ae = (scores[9] - scores.mean()) / (scores.std(ddof=1) + 1e-6)
    assert o.episode == pytest.approx([ae, ae], abs=1e-12)
    # A_G at s4: the policy's x (d(s9) = 4) and the oracle's o1 (d(s8) = 1) together; s8 holds only the oracle row
    r = np.array([10 * 0.1**4, 10 * 0.1**1])
    assert o.graph_adv == pytest.approx([((r - r.mean()) / (r.std(ddof=1) + 1e-6))[1], 0.0], abs=1e-12)
    assert o.advantages == pytest.approx(o.graph_adv + o.episode, abs=1e-15)
    # weights: the first action 1 (the paper's w_t, default); the second its path, exp(-3) floored at p_floor 0.05
    assert o.weights == pytest.approx([1.0, 0.05], abs=1e-15)
    assert np.array_equal(o.weighted, o.advantages * o.weights)
    # the policy row at the root keeps its plain value: an oracle sibling does not enter its baseline
    assert res.policy.advantages[6] == res.plain.advantages[6]


def test_first_oracle_action_weighs_exactly_one_under_defaults():
    """The paper's weighting is the default (issue 32): the first oracle action weighs exactly 1, however unlikely."""
    assert ReachConfig().first == "one"
    for ll in ([-0.5, -1.0, -0.1], [-9.0], [-40.0, -40.0], [0.0]):
        assert ReachConfig().weights(ll)[0] == 1.0
    assert ReachConfig().weights([-0.5, -1.0, -0.1]).tolist() == [1.0, math.exp(-0.5), math.exp(-1.5)]
    assert ReachConfig(tau_w=2.0).weights([-1.0, -3.0]).tolist() == [1.0, math.exp(-0.5)]


def test_first_action_weight_own_likelihood_ablation():
    own = ReachConfig(first="own").weights([-0.5, -1.0, -0.1])
    assert own.tolist() == [math.exp(-0.5), math.exp(-0.5), math.exp(-1.5)]
    assert ReachConfig(first="own", tau_w=2.0).weights([-1.0]).tolist() == [math.exp(-0.5)]
    assert ReachConfig(first="own").weights([-9.0]) == pytest.approx(
        [0.05], abs=1e-15
    )  # floored at p_floor, then clipped to w_min
    assert ReachConfig(first="own", p_floor=1e-6, w_min=0.2).weights([-9.0]).tolist() == [0.2]
    with pytest.raises(ValueError, match=r"reach\.first"):
        ReachConfig(first="max")  # type: ignore[arg-type]


def test_same_state_all_lets_oracle_siblings_re_rank_the_policy_row():
    table = StepTable(**_group())
    plain = _plain(table)
    res = sero_advantages(table, [_rescue()], ADV, SeroOptions(same_state="all"))
    # row 6 (s4 -x-> s9) now shares its statistics with the oracle's o1: -1/sqrt(2) up to eps
    r = np.array([10 * 0.1**4, 10 * 0.1**1])
    z = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    assert res.policy.changed[6] and res.policy.graph_adv[6] == pytest.approx(z[0], abs=1e-12)
    assert res.policy.advantages[6] == pytest.approx(z[0] + plain.episode[6], abs=1e-12)
    # other rows as in the default
    default = sero_advantages(table, [_rescue()], ADV)
    keep = np.arange(len(table)) != 6
    assert np.array_equal(res.policy.advantages[keep], default.policy.advantages[keep])


def test_a_rescue_from_the_final_state_reveals_it_to_the_last_policy_row():
    table = StepTable(**_group())
    # trajectory 1 ends after d (cut: plain GraphGPO points its last row to TERMINAL); the oracle continues from
    # its final observation s3
    res = sero_advantages(table, [_rescue(trajectory=1, t=2, states=("s3",), actions=("win",), loglik=(-1.0,))])
    assert res.policy.distance_before[3] == 3 and res.policy.distance[3] == 1  # s3 -win-> SUCCESS
    assert res.policy.changed[3] and res.policy.graph_adv[3] > 0
    with pytest.raises(ValueError, match="final state"):
        explicit = StepTable(**_group(), next_state=["s1", "w", "s2", "s3", "s2", "s4", "s9", "s5", "s6"])
        sero_advantages(explicit, [_rescue(trajectory=1, t=2, states=("zz",), actions=("win",), loglik=(-1.0,))])


def test_rescues_change_only_their_own_group():
    a, b = _group(0), _group(1)
    table = StepTable(**{k: a[k] + b[k] for k in a})
    res = sero_advantages(table, [_rescue(group=1)], ADV)
    plain = _plain(table)
    n = len(a["state"])
    assert np.array_equal(res.policy.advantages[:n], plain.advantages[:n])
    alone = sero_advantages(StepTable(**_group(1)), [_rescue(group=1)], ADV)
    assert np.array_equal(res.policy.advantages[n:], alone.policy.advantages)
    assert np.array_equal(res.oracle.weighted, alone.oracle.weighted)


def test_bad_rescues_are_refused_with_the_reason():
    table = StepTable(**_group())
    with pytest.raises(ValueError, match="not the state of its policy row"):
        sero_advantages(table, [_rescue(states=("s9", "s8"))])
    with pytest.raises(ValueError, match="no such rows"):
        sero_advantages(table, [_rescue(trajectory=7)])
    with pytest.raises(ValueError, match="successful trajectory"):
        sero_advantages(table, [_rescue(trajectory=0, t=2, states=("w",), actions=("z",), loglik=(-1.0,))])
    with pytest.raises(ValueError, match="t <= length"):
        sero_advantages(table, [_rescue(t=5)])
    with pytest.raises(ValueError, match="loglik"):
        _rescue(loglik=(0.5, -1.0))
    with pytest.raises(ValueError, match="2 entries for 1"):
        Rescue(0, 2, 2, ("s4", "s8"), ("o1",), ("s8",), (False,), (-1.0,), 10.0)


def test_metrics_are_the_diagnostics_of_the_group():
    table = StepTable(**_group())
    res = sero_advantages(
        table, [_rescue(), _rescue(trajectory=1, t=1, states=("s2",), actions=("o",), loglik=(-0.2,))]
    )
    m = res.metrics()
    assert m["sero_rescues"] == 2.0 and m["sero_oracle_actions"] == 3.0
    # weights [1, 0.05] and [1] (each first oracle action weighs 1): one of three oracle actions at w_min
    assert m["sero_w_min_share"] == pytest.approx(1 / 3) and m["sero_first_loglik"] == pytest.approx(-1.6)
    assert m["sero_policy_mass"] == pytest.approx(float(res.policy.advantages.sum()))
    assert m["sero_oracle_mass"] == pytest.approx(float(res.oracle.weighted.sum()))
    assert m["sero_policy_mass_plain"] == pytest.approx(float(res.plain.advantages.sum()))
    assert m["sero_policy_changed"] == float(np.sum(res.policy.advantages != res.plain.advantages))
