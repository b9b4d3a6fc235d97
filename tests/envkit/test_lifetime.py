"""`envkit.lifetime`'s capability questions: `holds_resources` and `instance_scoped` read the declared capability
(through wrappers) and answer False for an env without snapshots."""

from __future__ import annotations

import gymnasium as gym

import envkit  # noqa: F401  (registers envkit/Toy-v0)
from envkit.capability import SnapshotCapability
from envkit.lifetime import holds_resources, instance_scoped
from envkit.testing import ToyEnv


class _InstanceToy(ToyEnv):
    """ToyEnv declaring ALFWorld's capability: snapshots restore natively only in their instance, hold resources."""

    metadata = {"render_modes": [], **SnapshotCapability(scope="instance", holds_resources=True).metadata()}


def test_instance_scoped_reads_the_declared_scope():
    assert instance_scoped(ToyEnv()) is False
    assert instance_scoped(_InstanceToy()) is True
    assert holds_resources(_InstanceToy()) is True and holds_resources(ToyEnv()) is False


def test_instance_scoped_sees_through_wrappers_and_is_false_without_snapshots():
    wrapped = gym.wrappers.TimeLimit(_InstanceToy(), max_episode_steps=5)
    assert instance_scoped(wrapped) is True
    assert instance_scoped(gym.make("envkit/Toy-v0")) is False
    plain = gym.make("CartPole-v1")  # no metadata['snapshot']: not scoped, not an error
    assert instance_scoped(plain) is False and holds_resources(plain) is False
