"""Reaching a state by replay, checked: the observation digest (`observation_hash`), what a replay needs
(`ReplayState`: seed, options, actions and every observation's hash) and `replay`, which resets and steps an env
through it and stops at the first observation that differs. `envkit.snapshot` builds its replay snapshots on it;
the oracle pipeline replays recorded prefixes with it when a native snapshot cannot be used.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from envkit.errors import ReplayDivergenceError

__all__ = ["ReplayState", "observation_hash", "replay"]


def observation_hash(obs: Any, reward: SupportsFloat | None = None) -> str:
    """A stable digest of an observation (and optionally the reward that came with it)."""
    h = hashlib.sha256()
    if isinstance(obs, str):
        h.update(b"s" + obs.encode("utf-8", "surrogatepass"))
    elif isinstance(obs, np.ndarray):
        h.update(b"a" + str(obs.dtype).encode() + str(obs.shape).encode() + np.ascontiguousarray(obs).tobytes())
    else:
        h.update(b"p" + pickle.dumps(obs, protocol=4))
    if reward is not None:
        h.update(repr(float(reward)).encode())
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class ReplayState:
    """How to reach a state by replay: reset with (seed, options), then the actions.

    `hashes[i]` is the hash of the observation (and reward) after `i` actions (``hashes[0]`` after reset).
    """

    seed: int
    options: Mapping[str, Any]
    actions: tuple[str, ...]
    hashes: tuple[str, ...]


def replay(env: gym.Env[Any, Any], state: ReplayState) -> tuple[Any, dict[str, Any]]:
    """Reset `env` and replay `state.actions`, verifying every observation hash.

    Raises:
        ReplayDivergenceError: an observation differs from the recorded one (the env is not deterministic
            under its seed, or the data changed); the message names the step.
    """
    obs, info = env.reset(seed=state.seed, options=dict(state.options))
    got = observation_hash(obs)
    if got != state.hashes[0]:
        raise ReplayDivergenceError(
            f"replay diverged at reset: the observation after reset(seed={state.seed}) differs from the recorded "
            "one; the env is not deterministic under its seed (or its data changed)"
        )
    for i, action in enumerate(state.actions, start=1):
        obs, reward, _term, _trunc, info = env.step(action)
        got = observation_hash(obs, reward)
        if got != state.hashes[i]:
            raise ReplayDivergenceError(
                f"replay diverged at step {i} of {len(state.actions)} (action {action!r}): the observation or "
                "reward differs from the recorded one; the env is not deterministic under its seed"
            )
    return obs, info
