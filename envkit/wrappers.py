"""Snapshots through gymnasium wrappers: ``gymnasium.make(id, max_episode_steps=N)`` and friends.

``gymnasium.make`` wraps an env in `gymnasium.wrappers.TimeLimit` when given ``max_episode_steps`` (and in
`OrderEnforcing` / `PassiveEnvChecker` unless the id turns them off, as envkit's ids do). Gymnasium wrappers do not
forward unknown methods, so ``env.snapshot()`` is an `AttributeError` there, and TimeLimit's step counter lives in
the wrapper, outside the env's snapshot: restored naively, an episode would truncate at the wrong step.

`snapshot`, `restore` and `discard` take the outer (wrapped) env: they snapshot the innermost object that has
snapshots (an envkit env, or a `envkit.ReplaySnapshot` wrapper) together with the state of every gymnasium
wrapper around it that holds state (TimeLimit's elapsed steps, OrderEnforcing's reset flag,
RecordEpisodeStatistics' running return and length). A wrapper type that is not known to be stateless or
captured here is refused with its name, never dropped silently::

    >>> import gymnasium, envkit
    >>> from envkit import wrappers
    >>> env = gymnasium.make("envkit/Toy-v0", max_episode_steps=3)
    >>> _ = env.reset(seed=0)
    >>> s = wrappers.snapshot(env)
    >>> _ = env.step("right"); _ = env.step("right")
    >>> _ = wrappers.restore(env, s)          # TimeLimit's counter is back at 0 too
    >>> [env.step("left")[3] for _ in range(3)]
    [False, False, True]

The alternative that needs no helper: envkit's own step limit, part of every envkit env's snapshot
(``gymnasium.make("envkit/WebShop-v0", max_steps=N)``; ALFWorld, MiniShop and Toy take ``max_steps`` too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics, TimeLimit

from envkit.errors import SnapshotError

__all__ = ["WrappedSnapshot", "discard", "restore", "snapshot"]

#: Wrapper attributes that are state (copied into the snapshot, set back on restore), by wrapper type.
STATEFUL: dict[type, tuple[str, ...]] = {
    TimeLimit: ("_elapsed_steps",),
    OrderEnforcing: ("_has_reset",),
    PassiveEnvChecker: ("checked_reset", "checked_step", "checked_render"),
    RecordEpisodeStatistics: ("episode_returns", "episode_lengths", "episode_start_time"),
}


@dataclass(frozen=True)
class WrappedSnapshot:
    """An inner snapshot plus the state of each wrapper around it, outermost first (type name, values)."""

    inner: Any
    wrappers: tuple[tuple[str, tuple[Any, ...]], ...]


def _layers(env: gym.Env[Any, Any]) -> tuple[list[gym.Wrapper[Any, Any, Any, Any]], Any]:
    """The wrappers above the first object with ``snapshot`` (outermost first), and that object."""
    layers: list[gym.Wrapper[Any, Any, Any, Any]] = []
    cur: Any = env
    while isinstance(cur, gym.Wrapper) and not callable(type(cur).__dict__.get("snapshot")):
        if not any(isinstance(cur, t) for t in STATEFUL):
            raise SnapshotError(
                f"{type(cur).__name__} wraps this env and may hold state that envkit.wrappers cannot capture "
                f"(known: {', '.join(t.__name__ for t in STATEFUL)}); apply it outside the snapshots, or use the "
                "env's own settings (max_steps) instead"
            )
        layers.append(cur)
        cur = cur.env
    if not callable(getattr(type(cur), "snapshot", None)):
        raise SnapshotError(
            f"{type(cur).__name__} has no snapshots: wrap the env with envkit.ReplaySnapshot(env) first, then "
            "apply gymnasium's wrappers (or make an envkit/... id)"
        )
    return layers, cur


def _kind(w: gym.Wrapper[Any, Any, Any, Any]) -> type:
    return next(t for t in STATEFUL if isinstance(w, t))


def snapshot(env: gym.Env[Any, Any]) -> WrappedSnapshot:
    """Snapshot `env` through its gymnasium wrappers (see the module docstring)."""
    layers, core = _layers(env)
    states = tuple((type(w).__name__, tuple(_copy(getattr(w, a)) for a in STATEFUL[_kind(w)])) for w in layers)
    return WrappedSnapshot(core.snapshot(), states)


def restore(env: gym.Env[Any, Any], s: WrappedSnapshot) -> tuple[Any, dict[str, Any]]:
    """Restore `s` into `env` (the same wrapper stack): the inner env first, then each wrapper's state."""
    if not isinstance(s, WrappedSnapshot):
        raise SnapshotError(f"expected a snapshot from envkit.wrappers.snapshot(env), got {type(s).__name__}")
    layers, core = _layers(env)
    names = tuple(type(w).__name__ for w in layers)
    if names != tuple(n for n, _ in s.wrappers):
        raise SnapshotError(
            f"this snapshot was taken through the wrappers {[n for n, _ in s.wrappers]}, this env has "
            f"{list(names)}: restore it into an env made the same way"
        )
    obs, info = core.restore(s.inner)
    for w, (_, values) in zip(layers, s.wrappers, strict=True):
        for a, v in zip(STATEFUL[_kind(w)], values, strict=True):
            setattr(w, a, _copy(v))
    return obs, info


def discard(env: gym.Env[Any, Any], s: WrappedSnapshot) -> None:
    """Release what the inner snapshot of `s` holds."""
    _layers(env)[1].discard(s.inner)


def _copy(value: Any) -> Any:
    copy = getattr(value, "copy", None)  # numpy arrays (RecordEpisodeStatistics); ints and bools are immutable
    return copy() if callable(copy) else value
