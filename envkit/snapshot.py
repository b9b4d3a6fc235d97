"""Snapshot-capable environments: the protocol, a base class, and a replay wrapper for any env.

The contract (checked by `envkit.checker.check_snapshot_env`):

1. `snapshot()` changes nothing observable: not the next transition, not the RNG stream.
2. `restore(s)` returns the `(obs, info)` held when `s` was taken; stepping the same actions afterwards gives
   the same `(obs, reward, terminated, truncated)` as the first time.
3. Stepping on never mutates `s`; one `s` restores any number of times; restoring into a fresh env instance of
   the same id works (snapshots are picklable unless their `SnapshotCapability` says ``picklable=False``).
4. Wrapper state (step counters, history) is part of the state.
5. Capability is declared in ``metadata["snapshot"]`` (``"native"`` or ``"replay"``) and, in full, as one frozen
   `envkit.capability.SnapshotCapability` in ``metadata["snapshot_capability"]``.
6. Snapshots that hold resources (``SnapshotCapability.holds_resources``) are released by `discard(s)`; whoever
   takes them discards them once done (`envkit.lifetime`).

Example:
    >>> import gymnasium, envkit
    >>> env = gymnasium.make("envkit/Toy-v0")
    >>> obs, info = env.reset(seed=0)
    >>> s = env.snapshot()
    >>> _ = env.step("right")
    >>> obs2, info2 = env.restore(s)
    >>> obs2 == obs
    True
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, SupportsFloat, cast, runtime_checkable

import gymnasium as gym
import numpy as np

from envkit.capability import SNAPSHOT_KINDS, SnapshotCapability
from envkit.discard_ledger import DiscardLedger
from envkit.errors import InvalidActionError, ResetNeededError, SnapshotError, check_names
from envkit.replay import ReplayState, observation_hash, replay
from envkit.spaces import FreeText

__all__ = [
    "SNAPSHOT_KINDS",
    "ReplaySnapshot",
    "ReplayState",
    "Snapshot",
    "SnapshotEnv",
    "SnapshotEnvBase",
    "observation_hash",
    "replay",
    "snapshot_env",
]


@dataclass(frozen=True)
class Snapshot:
    """An opaque, immutable handle on an environment state.

    Attributes:
        env: Qualified class name of the env that made it (restore checks it).
        kind: ``"native"`` or ``"replay"``.
        payload: The env's own state object (treat as opaque; never mutated after creation).
        replay: The (seed, options, actions, hashes) that reach the same state by replay (None when the episode
            was reset without a seed). `SnapshotEnvBase` records it for every env.
        id: Unique id (for `discard` bookkeeping): ``"<origin>:<n>"``, `origin` drawn once per env instance and
            `n` counting up (`envkit.discard_ledger`).
        settings: The settings of the env that took it which shape its states (``(name, repr(value))`` pairs,
            `SnapshotEnvBase.state_settings`): restore refuses an env built with other ones.
    """

    env: str
    kind: str
    payload: Any = field(repr=False)
    replay: ReplayState | None = field(default=None, repr=False)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@runtime_checkable
class SnapshotEnv(Protocol):
    """What SERO, `branch` and the checker need from an env (besides gymnasium's reset/step)."""

    metadata: dict[str, Any]

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> tuple[Any, dict[str, Any]]: ...

    def discard(self, snapshot: Any) -> None: ...


def snapshot_env(env: object) -> SnapshotEnv:
    """`env` typed as a `SnapshotEnv`, the one way callers reach ``snapshot`` / ``restore`` / ``discard``.

    Raises:
        SnapshotError: `env` lacks one of them; the message names the env and how to get snapshots (a gymnasium
            wrapper hides its inner env's: gymnasium wrappers do not forward methods, see `envkit.wrappers`).
    """
    missing = [m for m in ("snapshot", "restore", "discard") if not callable(getattr(env, m, None))]
    if not missing:
        return cast(SnapshotEnv, env)
    name = f"{type(env).__name__} (env id {getattr(getattr(env, 'spec', None), 'id', None) or 'unknown'})"
    inner = env
    while isinstance(inner, gym.Wrapper) and not callable(getattr(inner, "snapshot", None)):
        inner = inner.env
    if inner is not env and callable(getattr(inner, "snapshot", None)):
        how = (
            f"it wraps {type(inner).__name__}, which has them, but gymnasium wrappers do not forward them: make the "
            "env without the wrapper (envkit ids take max_steps=N instead of max_episode_steps=N), or snapshot "
            "through envkit.wrappers.snapshot / restore(env), which keep the wrappers' state too"
        )
    else:
        how = "make it from an envkit/... id (native snapshots) or wrap it with envkit.ReplaySnapshot(env) (replay)"
    raise SnapshotError(f"{name} has no {' / '.join(f'{m}()' for m in missing)}: snapshots are needed here; {how}")


def _qualname(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class SnapshotEnvBase(gym.Env[str, str]):
    """Base class for envkit environments with free-text actions and observations.

    Subclasses implement `_reset`, `_step`, `_snapshot` (a picklable payload later steps never mutate) and
    `_restore` (returns ``(obs, info)``); optionally `_discard` (then declare ``SnapshotCapability(holds_resources=
    True)`` in ``metadata``). The public methods validate input and episode state, then delegate. Step limits and
    histories belong inside the env (not in gymnasium wrappers) so that they are part of the snapshot (rule 4).
    Settings checks, for every subclass: an unknown constructor keyword (``__init__`` parameters plus the fields of
    `config_class` for envs taking ``**options``) or `reset` option (outside `reset_options`) raises
    `envkit.errors.UnknownOptionError` naming the closest one; a snapshot restores only into an env whose
    `state_settings` equal the taker's (``SnapshotError`` naming the settings that differ).
    """

    metadata: dict[str, Any] = {"render_modes": [], **SnapshotCapability().metadata()}
    #: The keys `reset(options=...)` accepts; None: not checked (the subclass checks them itself).
    reset_options: ClassVar[frozenset[str] | None] = None
    #: The dataclass whose fields ``__init__(**options)`` forwards (the constructor check accepts them too).
    config_class: ClassVar[type | None] = None
    #: Fields of ``self.config`` that do not change what a state is (cache sizes): left out of `state_settings`.
    settings_not_state: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_envkit_checked", False):
            return
        params = inspect.signature(init).parameters
        names = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())

        @functools.wraps(init)
        def checked_init(self: Any, *args: Any, **kw: Any) -> None:
            config_class = type(self).config_class
            if not takes_any or config_class is not None:
                valid = names | ({f.name for f in dataclasses.fields(config_class)} if config_class else set())
                check_names(kw, valid, f"{type(self).__name__} keyword argument")
            if "init_args" not in self.__dict__:  # the outermost constructor's call (a subclass's, not its base's)
                #: ``(args, kwargs)`` this env was built with: `type(env)(*args, **kwargs)` builds a fresh twin.
                self.init_args = (args, dict(kw))
            init(self, *args, **kw)

        checked_init._envkit_checked = True  # type: ignore[attr-defined]
        cls.__init__ = checked_init  # type: ignore[method-assign]

    def state_settings(self) -> dict[str, Any]:
        """The settings this env was built with that shape its states (what a snapshot must be restored under).

        Default: the fields of ``self.config`` when it is a dataclass, minus `settings_not_state`; else none.
        Envs without such a config override this (e.g. `envkit.testing.ToyEnv`: its step limit).
        """
        config = getattr(self, "config", None)
        if config is None or not dataclasses.is_dataclass(config) or isinstance(config, type):
            return {}
        return {
            f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in self.settings_not_state
        }

    def _settings_key(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, repr(v)) for k, v in self.state_settings().items()))

    def __init__(
        self, *, evaluation: bool = False, max_action_length: int = 1 << 16, max_observation_length: int = 1 << 22
    ) -> None:
        #: Evaluation envs refuse oracles (SERO's oracle is training-only; `envkit.oracles.base.run_oracle` asserts it).
        self.evaluation = bool(evaluation)
        self.action_space = FreeText(max_action_length)
        self.observation_space = FreeText(max_observation_length)
        self._episode_started = False
        self._episode_over = False
        #: Discarded snapshot ids, as ranges of this env's snapshot counter (bounded memory, not a set of ids).
        self._discarded = DiscardLedger()
        self._snapshot_origin = uuid.uuid4().hex
        self._snapshots_taken = 0
        self._replay: ReplayState | None = None
        #: How the last `restore` reached its state: ``"native"``, or ``"replay"`` when it went through
        #: `restore_by_replay` (SERO counts restores by kind). Empty before the first restore.
        self.last_restore_kind = ""

    # ----- public API: validate, then delegate -----------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"reset(options=...) must be a dict or None, got {type(options).__name__}")
        if options and self.reset_options is not None:
            check_names(options, self.reset_options, f"{type(self).__name__} reset option")
        super().reset(seed=seed)
        opts = dict(options or {})
        obs, info = self._reset(seed=seed, options=opts)
        self._episode_started = True
        self._episode_over = False
        self._replay = None if seed is None else ReplayState(int(seed), opts, (), (observation_hash(obs),))
        return obs, info

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if not self._episode_started:
            raise ResetNeededError(f"{type(self).__name__}.step() called before reset(); call env.reset() first")
        if self._episode_over:
            raise ResetNeededError(
                f"{type(self).__name__}.step() called after the episode ended; call env.reset() or env.restore(s)"
            )
        why = self.action_space.why_not(action)  # type: ignore[attr-defined]
        if why is not None:  # refused before the env sees it: the state is untouched
            raise InvalidActionError(why)
        obs, reward, terminated, truncated, info = self._step(action)
        self._episode_over = bool(terminated or truncated)
        r = self._replay
        if r is not None:
            self._replay = ReplayState(
                r.seed, r.options, (*r.actions, action), (*r.hashes, observation_hash(obs, reward))
            )
        return obs, reward, terminated, truncated, info

    def snapshot(self) -> Snapshot:
        """Capture the current state; see the module docstring for the contract."""
        if not self._episode_started:
            raise SnapshotError(f"{type(self).__name__}.snapshot() called before reset(); call env.reset() first")
        payload = self._snapshot()
        n, self._snapshots_taken = self._snapshots_taken, self._snapshots_taken + 1
        return Snapshot(
            env=_qualname(self),
            kind=str(self.metadata.get("snapshot", "native")),
            payload=(payload, self._episode_over, self.np_random.bit_generator.state),  # the getter returns a new dict
            replay=self._replay,
            id=f"{self._snapshot_origin}:{n}",
            settings=self._settings_key(),
        )

    def restore(self, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        """Return the env to the state of `snapshot`; returns the ``(obs, info)`` held when it was taken."""
        self._check_snapshot(snapshot)
        payload, over, rng_state = snapshot.payload
        self.last_restore_kind = "native" if self.metadata.get("snapshot", "native") == "native" else "replay"
        obs, info = self._restore(payload, snapshot)
        self.np_random.bit_generator.state = rng_state  # numpy copies the values; the dict stays untouched
        self._episode_started = True
        self._episode_over = over
        self._replay = snapshot.replay
        return obs, info

    def restore_by_replay(self, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        """Reach the state of `snapshot` by resetting and replaying its recorded actions (hash-verified).

        Envs whose native payload is valid only in the instance that made it call this from `_restore` when
        the payload comes from elsewhere. Raises `SnapshotError` when the episode was reset without a seed.
        """
        if snapshot.replay is None:
            raise SnapshotError(
                "this snapshot cannot be restored here: its native state is valid only in the env instance that "
                "took it, and its episode was reset without a seed, so it cannot be replayed; reset with a seed"
            )
        obs, info = replay(self, snapshot.replay)
        self.last_restore_kind = "replay"
        return obs, info

    def discard(self, snapshot: Snapshot) -> None:
        """Release what `snapshot` holds; restoring it afterwards raises `SnapshotError`."""
        self._check_snapshot(snapshot)
        self._discard(snapshot.payload[0])
        self._discarded.add(snapshot.id)

    def _check_snapshot(self, snapshot: Any) -> None:
        if not isinstance(snapshot, Snapshot):
            raise SnapshotError(
                f"{type(self).__name__} expected a Snapshot from env.snapshot(), got {type(snapshot).__name__}"
            )
        if snapshot.env != _qualname(self):
            raise SnapshotError(
                f"this snapshot was taken from {snapshot.env}, not {_qualname(self)}: restore it into an env of "
                "the same id"
            )
        if snapshot.id in self._discarded:
            raise SnapshotError("this snapshot was discarded with env.discard(s) and can no longer be restored")
        theirs, ours = dict(getattr(snapshot, "settings", ())), dict(self._settings_key())
        if theirs != ours:
            diff = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
            was = ", ".join(f"{k}={theirs.get(k, '(unset)')}" for k in diff)
            now = ", ".join(f"{k}={ours.get(k, '(unset)')}" for k in diff)
            raise SnapshotError(
                f"this snapshot was taken in a {type(self).__name__} built with {was}; this env has {now}. Its state "
                f"means something else here: restore it into an env made with the same settings "
                f"(e.g. gymnasium.make(id, {', '.join(f'{k}={theirs[k]}' for k in diff if k in theirs)}))"
            )

    # ----- to implement ----------------------------------------------------------------------------------
    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        raise NotImplementedError

    def _snapshot(self) -> Any:
        raise SnapshotError(
            f"{type(self).__name__} has no native snapshots; wrap it with envkit.ReplaySnapshot(env) instead"
        )

    def _restore(self, payload: Any, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        raise SnapshotError(
            f"{type(self).__name__} has no native snapshots; wrap it with envkit.ReplaySnapshot(env) instead"
        )

    def _discard(self, payload: Any) -> None:
        """Release resources held by a payload (default: nothing to release)."""

    def native_bytes(self, snapshot: Snapshot) -> int:
        """Bytes `snapshot` holds outside Python objects (disk layers, engine memory) that discarding it frees;
        a server adds them to the snapshot's charge (`envkit.serve.budget`). Default 0."""
        return 0


class ReplaySnapshot(gym.Wrapper[Any, Any, Any, Any], gym.utils.RecordConstructorArgs):
    """Give any deterministic env snapshots by verified replay.

    A snapshot is ``(seed, options, action prefix, observation hashes)``. `restore` resets the inner env with the
    same seed and options, replays the prefix and checks every observation hash, raising
    `ReplayDivergenceError` on the first mismatch. Resetting without a seed draws one from the wrapper's own
    generator so that every episode can be replayed. It records its constructor arguments (gymnasium's
    `RecordConstructorArgs`), so ``gymnasium.make(env.spec)`` rebuilds the wrapped env, as the checker's fresh
    instance and `gymnasium.make_vec` need.
    """

    metadata: dict[str, Any] = {"render_modes": [], **SnapshotCapability(kind="replay").metadata()}

    def __init__(self, env: gym.Env[Any, Any]):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.metadata = {**getattr(env, "metadata", {}), **SnapshotCapability(kind="replay").metadata()}
        self._seed_rng = np.random.default_rng()
        self._state: ReplayState | None = None
        self._last: tuple[Any, dict[str, Any]] | None = None
        #: ``id()`` of the discarded snapshots still alive (an entry goes when its snapshot is collected, so the
        #: set stays as small as the discarded snapshots someone still holds, and a reused ``id()`` is not stale).
        self._discarded: set[int] = set()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is None:
            seed = int(self._seed_rng.integers(0, 2**31 - 1))
        else:
            self._seed_rng = np.random.default_rng(seed)
        obs, info = self.env.reset(seed=seed, options=options)
        self._state = ReplayState(int(seed), dict(options or {}), (), (observation_hash(obs),))
        self._last = (obs, info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise ResetNeededError("ReplaySnapshot.step() called before reset(); call env.reset() first")
        obs, reward, terminated, truncated, info = self.env.step(action)
        s = self._state
        self._state = ReplayState(s.seed, s.options, (*s.actions, action), (*s.hashes, observation_hash(obs, reward)))
        self._last = (obs, info)
        return obs, reward, terminated, truncated, info

    def snapshot(self) -> ReplayState:
        if self._state is None:
            raise SnapshotError("ReplaySnapshot.snapshot() called before reset(); call env.reset() first")
        return self._state

    def restore(self, snapshot: ReplayState) -> tuple[Any, dict[str, Any]]:
        if not isinstance(snapshot, ReplayState):
            raise SnapshotError(f"ReplaySnapshot expected a ReplayState from snapshot(), got {type(snapshot).__name__}")
        if id(snapshot) in self._discarded:
            raise SnapshotError("this snapshot was discarded with env.discard(s) and can no longer be restored")
        obs, info = replay(self.env, snapshot)
        self._state = snapshot
        self._last = (obs, info)
        return obs, info

    def discard(self, snapshot: ReplayState) -> None:
        if not isinstance(snapshot, ReplayState):
            raise SnapshotError(f"ReplaySnapshot expected a ReplayState from snapshot(), got {type(snapshot).__name__}")
        if id(snapshot) not in self._discarded:
            self._discarded.add(id(snapshot))
            weakref.finalize(snapshot, self._discarded.discard, id(snapshot))
