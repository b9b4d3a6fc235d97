"""Gymnasium's conventions hold for envkit envs: snapshots through ``gymnasium.make(id, max_episode_steps=N)``
(TimeLimit's counter included), `ReplaySnapshot` rebuilt by gymnasium from a spec (so the checker passes on the
README's "any deterministic gymnasium env"), and async vector envs with gymnasium's default shared memory."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envkit
from envkit import wrappers
from envkit.errors import SnapshotError


def test_time_limit_counter_is_part_of_the_wrapped_snapshot():
    env = gym.make("envkit/Toy-v0", max_episode_steps=3)
    with pytest.raises(AttributeError):
        env.snapshot()  # gymnasium wrappers do not forward it: what envkit.wrappers is for
    env.reset(seed=0)
    s = wrappers.snapshot(env)
    env.step("right")
    env.step("right")
    wrappers.restore(env, s)
    assert [env.step("left")[3] for _ in range(3)] == [False, False, True]  # truncates at step 3 of the restore
    wrappers.discard(env, s)
    with pytest.raises(SnapshotError, match="discarded"):
        wrappers.restore(env, s)


def test_wrapped_snapshot_refuses_unknown_wrappers_and_other_stacks():
    env = gym.wrappers.TransformObservation(gym.make("envkit/Toy-v0"), lambda o: o.upper(), None)
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="TransformObservation wraps this env"):
        wrappers.snapshot(env)
    a = gym.make("envkit/Toy-v0", max_episode_steps=3)
    a.reset(seed=0)
    b = gym.make("envkit/Toy-v0")
    b.reset(seed=0)
    with pytest.raises(SnapshotError, match=r"through the wrappers \['TimeLimit'\], this env has \[\]"):
        wrappers.restore(b, wrappers.snapshot(a))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "FrozenLake-v1"])
def test_replay_snapshot_passes_the_checker_on_plain_gymnasium_envs(env_id):
    env = envkit.ReplaySnapshot(gym.make(env_id))
    assert gym.make(env.spec).__class__ is envkit.ReplaySnapshot  # rebuilt from its spec (RecordConstructorArgs)
    assert "passed" in str(envkit.check_snapshot_env(env))


def test_async_vector_env_works_with_default_shared_memory():
    vec = gym.make_vec("envkit/Toy-v0", num_envs=2, vectorization_mode="async")
    try:
        obs, _ = vec.reset(seed=0)
        assert obs[0].startswith("You are at cell 0") and len(obs) == 2
        obs, *_ = vec.step(("right", "left"))
        assert obs[0].startswith("You are at cell 1") and obs[1].startswith("You are at cell 0")
        assert isinstance(obs, tuple)  # the deep copy gymnasium returns is a plain tuple of the current texts
    finally:
        vec.close()
