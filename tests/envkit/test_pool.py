"""Env pool backends, crash recovery, rollout and branch."""

from __future__ import annotations

import pytest

from envkit.policies import PolicyInput, RandomAdmissiblePolicy, ScriptedPolicy
from envkit.pool import EnvFactory, make_pool
from envkit.rollout import Task, branch, rollout
from envkit.testing import ToyEnv, oracle_action

TASKS = [Task(f"t{i}", seed=i, options={"length": 10}) for i in range(6)]


def _summary(trajs):
    return [(t.task_id, t.length, t.success, t.failed, [s.action for s in t.steps]) for t in trajs]


def test_inprocess_rollout_records_snapshots_that_restore():
    with make_pool(EnvFactory("envkit/Toy-v0"), size=3, backend="inprocess") as pool:
        trajs = rollout(RandomAdmissiblePolicy(7), pool, TASKS)
    assert [t.task_id for t in trajs] == [t.task_id for t in TASKS]
    traj = max(trajs, key=lambda t: t.length)
    env = ToyEnv()
    for k, step in enumerate(traj.steps):
        obs, _ = env.restore(step.snapshot)
        assert obs == step.observation, f"snapshot before step {k} restores the wrong state"
    assert traj.done and traj.final_snapshot is None  # the env ended it: no root there (envkit.recorder's rule)
    with make_pool(EnvFactory("envkit/Toy-v0"), size=3, backend="inprocess") as pool:
        cut = rollout(RandomAdmissiblePolicy(7), pool, TASKS, max_steps=3)
    live = [t for t in cut if not t.done]
    assert live and all(t.final_snapshot is not None for t in live)
    assert all(t.final_snapshot is None for t in cut if t.done)
    for t in live:
        assert env.restore(t.final_snapshot)[0] == t.steps[-1].next_observation


@pytest.mark.slow
def test_subprocess_pool_matches_inprocess():
    with make_pool(EnvFactory("envkit/Toy-v0"), size=3, backend="inprocess") as pool:
        ref = rollout(RandomAdmissiblePolicy(7), pool, TASKS)
    with make_pool(EnvFactory("envkit/Toy-v0"), size=2, backend="subprocess") as pool:
        got = rollout(RandomAdmissiblePolicy(7), pool, TASKS)
    assert _summary(got) == _summary(ref)


def _crash_on_t1(x: PolicyInput) -> str:
    if x.task_id == "t1" and len(x.history) == 2:
        return "crash"
    return oracle_action(x.observation)


@pytest.mark.slow
def test_crashed_worker_is_restarted_and_episode_reported_failed():
    factory = EnvFactory("envkit/Toy-v0", {"allow_crash": True})
    with make_pool(factory, size=2, backend="subprocess") as pool:
        trajs = rollout(ScriptedPolicy(_crash_on_t1), pool, TASKS)
        assert pool.restarts == 1  # type: ignore[attr-defined]
        # The restarted worker serves new episodes.
        again = rollout(ScriptedPolicy(oracle_action_input), pool, TASKS[:2])
    bad = [t for t in trajs if t.failed]
    assert [t.task_id for t in bad] == ["t1"]
    assert "died" in (bad[0].error or "") and not bad[0].success
    assert all(t.success for t in trajs if t.task_id != "t1")
    assert all(t.success for t in again)


@pytest.mark.slow
def test_a_crashed_episode_is_retried_from_reset_as_often_as_the_caller_allows():
    factory = EnvFactory("envkit/Toy-v0", {"allow_crash": True})
    with make_pool(factory, size=2, backend="subprocess") as pool:
        trajs = rollout(ScriptedPolicy(_crash_on_t1), pool, TASKS, retries=1)
        assert pool.restarts == 2  # type: ignore[attr-defined]  # t1 crashes again on its retry
    assert [t.task_id for t in trajs] == [t.task_id for t in TASKS]  # once each
    assert [t.task_id for t in trajs if t.failed] == ["t1"] and "died" in (trajs[1].error or "")
    assert all(t.success for t in trajs if t.task_id != "t1")


def oracle_action_input(x: PolicyInput) -> str:
    return oracle_action(x.observation)


def test_env_exception_fails_only_that_episode():
    with make_pool(EnvFactory("envkit/Toy-v0"), size=2, backend="inprocess") as pool:
        tasks = [Task("ok", seed=0, options={"goal": 2}), Task("bad", seed=0, options={"goal": 99})]
        trajs = rollout(ScriptedPolicy(oracle_action_input), pool, tasks)
    assert trajs[0].success and not trajs[0].failed
    assert trajs[1].failed and "goal must be in" in (trajs[1].error or "")


def test_branch_from_snapshot_gives_n_episodes():
    env = ToyEnv(max_steps=15)
    env.reset(seed=0, options={"goal": 5, "length": 8})
    env.step("right")
    s = env.snapshot()
    trajs = branch(env, s, RandomAdmissiblePolicy(3), 4)
    assert len(trajs) == 4
    assert all(t.initial_observation.startswith("You are at cell 1") for t in trajs)
    assert len({tuple(st.action for st in t.steps) for t in trajs}) > 1  # keys vary the sampling


def test_pool_rejects_bad_requests():
    with make_pool(EnvFactory("envkit/Toy-v0"), size=1, backend="inprocess") as pool:
        with pytest.raises(IndexError):
            pool.call_many([(3, "reset", (), {})])
        with pytest.raises(ValueError, match="unknown pool backend"):
            make_pool(EnvFactory("envkit/Toy-v0"), backend="threads")
        res = pool.call(0, "fly")
        assert not res.ok and "unknown pool request" in res.error


@pytest.mark.slow
def test_ray_pool_runs_and_recovers():
    pytest.importorskip("ray")
    factory = EnvFactory("envkit/Toy-v0", {"allow_crash": True})
    with make_pool(factory, size=2, backend="ray", ray_init={"num_cpus": 2, "address": "local"}) as pool:
        trajs = rollout(ScriptedPolicy(_crash_on_t1), pool, TASKS[:3])
    assert [t.failed for t in trajs] == [False, True, False]
    assert trajs[0].success and trajs[2].success
