"""Root selection (docs/methods.md section 4.1) on hand-made groups, and the replay recipe rebuilt from a trajectory."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envkit  # noqa: F401  (registers the ids)
from envkit.core import Step, Trajectory
from envkit.credit.reachability import ReachConfig
from envkit.credit.sero import SeroConfig, select_roots
from envkit.oracles.continuation import replay_state_at
from envkit.oracles.run_config import OracleSeroOptions
from envkit.snapshot import replay


def traj(states: list[str], actions: list[str], *, success: bool = False, done: bool = False, failed: bool = False):
    """A trajectory through `states` (len(actions) + 1 of them); the last step is terminal when `done`."""
    steps = []
    for t, a in enumerate(actions):
        last = t == len(actions) - 1
        steps.append(Step(states[t], a, float(success and last), states[t + 1], last and (done or success), False, {}))
    return Trajectory("envkit/Toy-v0", "t", 0, {}, states[0], {}, tuple(steps), success, failed=failed)


def test_all_successful_group_has_no_roots():
    g = [traj(["a", "b"], ["x"], success=True), traj(["a", "c", "d"], ["y", "z"], success=True)]
    assert select_roots(g, group=0, config=SeroConfig(horizon=10)) == []


def test_failed_group_roots_deepest_first_with_budget_check():
    # No success: every state is graph-unreachable. Truncated at the horizon (done): the final state is terminal.
    g = [traj(["s0", "s1", "s2", "s3", "s4"], ["a", "b", "c", "d"], done=True)]
    roots = select_roots(g, group=3, config=SeroConfig(horizon=4, roots_per_group=2))
    # budget_left = 4 - t >= 2  ->  t <= 2; deepest first.
    assert [(r.t, r.observation, r.budget_left) for r in roots] == [(2, "s2", 2), (1, "s1", 3)]
    assert roots[0].actions == ("a", "b") and roots[0].group == 3 and roots[0].trajectory == 0
    roots = select_roots(g, group=3, config=SeroConfig(horizon=4, roots_per_group=5, min_budget=3))
    assert [r.t for r in roots] == [1, 0]


def test_known_path_states_are_skipped_and_states_deduplicated():
    # traj 0 succeeds through b; traj 1 fails through a -> b -> c -> d (not done: d is a candidate too);
    # traj 2 fails a -> e -> d (same d at a lower depth, deduplicated away) .
    g = [
        traj(["a", "b", "w"], ["go", "win"], success=True),
        traj(["a", "b", "c", "d"], ["go", "x", "y"]),
        traj(["a", "e", "d"], ["p", "q"]),
    ]
    roots = select_roots(g, group=0, config=SeroConfig(horizon=10, roots_per_group=10))
    got = [(r.trajectory, r.t, r.observation) for r in roots]
    # a and b have a known path to SUCCESS; d kept once (depth 3); episodes take turns: traj 2 gets its root e
    # before traj 1 gets its second, c (the design changed: two roots of one episode at t and t-1 are near twins).
    assert got == [(1, 3, "d"), (2, 1, "e"), (1, 2, "c")]
    capped = select_roots(g, group=0, config=SeroConfig(horizon=10, roots_per_group=2))
    assert [(r.trajectory, r.t) for r in capped] == [(1, 3), (2, 1)]


def test_one_root_per_episode_before_any_episode_gets_a_second():
    # four failed episodes of different depths; 6 roots: every episode's deepest first (deepest episode first),
    # then second roots in the same order
    g = [
        traj(["a", "b1", "c1"], ["x", "y"]),
        traj(["a", "b2", "c2", "d2", "e2"], ["x", "y", "z", "w"]),
        traj(["a", "b3"], ["x"]),
        traj(["a", "b4", "c4", "d4"], ["x", "y", "z"]),
    ]
    roots = select_roots(g, group=0, config=SeroConfig(horizon=10, roots_per_group=6))
    got = [(r.trajectory, r.t) for r in roots]
    assert got == [(1, 4), (3, 3), (0, 2), (2, 1), (1, 3), (3, 2)]
    # taken: trajectories 1 and 3 already hold a root each: 0 and 2 come first
    roots = select_roots(g, group=0, config=SeroConfig(horizon=10, roots_per_group=3), taken={1: 1, 3: 1})
    assert [(r.trajectory, r.t) for r in roots] == [(0, 2), (2, 1), (1, 4)]


def test_root_rounds_give_a_dead_root_s_episode_its_turn_back():
    from envkit.credit.sero import RootRounds

    g = [traj(["a", "b1", "c1", "d1"], ["x", "y", "z"]), traj(["a", "b2", "c2"], ["x", "y"])]
    picker = RootRounds(g, 0, SeroConfig(horizon=10, roots_per_group=2))
    first = picker.pick()
    assert [(r.trajectory, r.t) for r in first] == [(0, 3), (1, 2)]
    picker.settle(dead=True, root=first[0])  # episode 0's root is dead: it has no live root now
    picker.settle(dead=False, root=first[1])
    assert [(r.trajectory, r.t) for r in picker.pick()] == [(0, 2)]
    picker = RootRounds(g, 0, SeroConfig(horizon=10, roots_per_group=2))
    first = picker.pick()
    picker.settle(dead=False, root=first[0])
    picker.settle(dead=True, root=first[1])  # episode 1's root is dead; episode 0 holds one: 1 goes first
    assert [(r.trajectory, r.t) for r in picker.pick()] == [(1, 1)]


def test_crashed_trajectories_and_zero_roots():
    g = [traj(["a", "b"], ["x"], failed=True), traj(["a", "c"], ["y"], done=True)]
    roots = select_roots(g, group=0, config=SeroConfig(horizon=5))
    assert [(r.trajectory, r.t) for r in roots] == [(1, 0)]
    assert select_roots(g, group=0, config=SeroConfig(horizon=5, roots_per_group=0)) == []


def test_config_validation_names_the_setting():
    with pytest.raises(ValueError, match="min_budget"):
        SeroConfig(min_budget=0)
    with pytest.raises(ValueError, match="p_floor"):
        SeroConfig(reach=ReachConfig(p_floor=0.0))
    with pytest.raises(ValueError, match="weighting"):
        OracleSeroOptions(weighting="bogus")  # type: ignore[arg-type]


def test_replay_recipe_from_a_recorded_trajectory_reaches_the_state():
    from envkit.policies import RandomAdmissiblePolicy
    from envkit.rollout import Task, play

    env = gym.make("envkit/Toy-v0")
    obs, info = env.reset(seed=11)
    tr = play(env, RandomAdmissiblePolicy(5), obs, info, task=Task("t", 11), max_steps=6)
    for t in range(tr.length + 1):
        state = replay_state_at(tr, t)
        got, _ = replay(gym.make("envkit/Toy-v0"), state)
        assert got == tr.observations()[t]


def test_root_rounds_replace_each_dead_root_with_the_next_untried_candidate():
    from envkit.credit.sero import RootRounds

    g = [traj(["s0", "s1", "s2", "s3", "s4"], ["a", "b", "c", "d"])]  # not done: t = 0..4 are candidates
    picker = RootRounds(g, 0, SeroConfig(horizon=10, roots_per_group=2))
    assert [r.t for r in picker.pick()] == [4, 3]
    assert picker.pick() == []  # nothing reported dead: nothing owed
    picker = RootRounds(g, 0, SeroConfig(horizon=10, roots_per_group=2))
    first = picker.pick()
    picker.settle(dead=True)  # t=4 dead, t=3 alive
    picker.settle(dead=False)
    assert [r.t for r in first] == [4, 3] and [r.t for r in picker.pick()] == [2]
    picker.settle(dead=True)
    assert [r.t for r in picker.pick()] == [1]  # never a state already tried
    picker.settle(dead=False)
    assert picker.pick() == []


def test_root_rounds_stop_after_their_round_budget_and_when_candidates_run_out():
    from envkit.credit.sero import RootRounds

    g = [traj(["s0", "s1", "s2", "s3", "s4"], ["a", "b", "c", "d"])]
    picker = RootRounds(g, 0, SeroConfig(horizon=10, roots_per_group=1), rounds=2)
    picked = []
    while roots := picker.pick():
        picked += [r.t for r in roots]
        picker.settle(dead=True)
    assert picked == [4, 3, 2]  # 1 + 2 rounds
    picker = RootRounds(g, 0, SeroConfig(horizon=10, roots_per_group=3))
    picked = []
    while roots := picker.pick():
        picked += [r.t for r in roots]
        for _ in roots:
            picker.settle(dead=True)
    assert picked == [4, 3, 2, 1, 0]  # every candidate tried once, then nothing is left
