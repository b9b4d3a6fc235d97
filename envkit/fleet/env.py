"""`FleetEnv`: one env of an env fleet, used like a local snapshot env by trainers (`envkit.make(id, fleet=...)`).

Every call runs in the fleet actor that holds this env's session. `snapshot()` returns a `FleetSnapshot` handle;
`restore(handle)` first moves the session to the actor holding that snapshot (SERO's restore + continue and
branching's forks run where the snapshot lives), and raises `envkit.errors.SnapshotLostError` when that actor is
gone. A call on an actor that dies raises `envkit.errors.FleetActorLostError`; the next `reset` opens a session
on a live actor.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envkit.errors import FleetActorLostError, ResetNeededError, SessionLostError, SnapshotError, SnapshotLostError
from envkit.fleet.actor import restore_kind
from envkit.fleet.client import Fleet, SessionRef, get_fleet
from envkit.fleet.config import FleetConfig
from envkit.fleet.handles import FleetSnapshot
from envkit.pool_contract import EnvFactory
from envkit.spaces import FreeText


class FleetEnv(gym.Env[str, str]):
    """An envkit env in a fleet actor (see the module docstring)."""

    def __init__(self, env_id: str, fleet: Fleet | FleetConfig | dict[str, Any] | str, **kwargs: Any):
        self.env_id = env_id
        self.factory = EnvFactory(env_id, kwargs)
        self._fleet = fleet if isinstance(fleet, Fleet) else FleetConfig.coerce(fleet)
        self._ref: SessionRef | None = self.fleet.open(self.factory)
        md = self._call("metadata")
        self.metadata = {**md, "fleet": self.fleet.fleet_id}
        self.action_space = FreeText()
        self.observation_space = FreeText()
        self.last_restore_kind = ""

    @property
    def fleet(self) -> Fleet:
        """The fleet this env runs on (for a config: this process's `get_fleet`, started again after a close)."""
        return self._fleet if isinstance(self._fleet, Fleet) else get_fleet(self._fleet)

    @property
    def session(self) -> SessionRef | None:
        """Where this env runs now (actor slot, incarnation, session id)."""
        return self._ref

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._ref is None:
            raise ResetNeededError(f"{self!r} lost its actor: reset it to start a new episode on a live actor")
        try:
            return self.fleet.call(self._ref, method, *args, **kwargs)
        except FleetActorLostError:
            self._ref = None
            raise

    def _fresh_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A call that needs no episode state (reset, restore): a session the actor released is opened again."""
        try:
            return self._call(method, *args, **kwargs)
        except SessionLostError:
            assert self._ref is not None
            self._ref = self.fleet.open(self.factory, slot=self._ref.slot)
            return self._call(method, *args, **kwargs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self._ref is None or self.fleet.slot_of(self._ref.incarnation) is None:
            self._ref = self.fleet.open(self.factory)
        out: tuple[Any, dict[str, Any]] = self._fresh_call("reset", seed=seed, options=options)
        return out

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        out: tuple[Any, float, bool, bool, dict[str, Any]] = self._call("step", action)
        return out

    def snapshot(self) -> FleetSnapshot:
        handle: FleetSnapshot = self._call("snapshot")
        return handle

    def snapshot_step(self, action: Any) -> tuple[FleetSnapshot, tuple[Any, float, bool, bool, dict[str, Any]]]:
        """A snapshot, then a step, in one round trip."""
        out: tuple[FleetSnapshot, Any] = self._call("snapshot_step", action)
        return out

    def restore(self, snapshot: Any) -> tuple[Any, dict[str, Any]]:
        if not isinstance(snapshot, FleetSnapshot):
            raise SnapshotError(f"a FleetEnv restores FleetSnapshot handles, got {type(snapshot).__name__}")
        self._move_to(self.fleet.holder(snapshot))  # SnapshotLostError when its actor is gone
        obs, info, kind = self._fresh_call("call", restore_kind, snapshot)
        self.last_restore_kind = kind
        return obs, info

    def discard(self, snapshot: Any) -> None:
        if isinstance(snapshot, FleetSnapshot):
            self.fleet.discard(snapshot)

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(env, *args, **kwargs)`` in the actor, on this env (a picklable module-level function)."""
        return self._call("call", fn, *args, **kwargs)

    def call_at(self, snapshot: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """`call` on the actor holding `snapshot` (this env's session moves there first), so that a function that
        restores it (SERO's restore + oracle continuation) runs where it lives; where that actor is gone, on this
        env's own actor (where the restore fails with the reason, and a caller may replay instead)."""
        if isinstance(snapshot, FleetSnapshot):
            try:
                self._move_to(self.fleet.holder(snapshot))
            except SnapshotLostError:
                pass
        if self._ref is None or self.fleet.slot_of(self._ref.incarnation) is None:
            self._ref = self.fleet.open(self.factory)
        return self._fresh_call("call", fn, *args, **kwargs)

    def _move_to(self, holder: Any) -> None:
        if self._ref is None or self._ref.incarnation != holder.incarnation:
            if self._ref is not None:
                self.fleet.close_session(self._ref)
            self._ref = None
            self._ref = self.fleet.open(self.factory, slot=holder.index)

    def close(self) -> None:
        if self._ref is not None and self.fleet.slots:
            self.fleet.close_session(self._ref)
        self._ref = None

    def __repr__(self) -> str:
        return f"FleetEnv({self.env_id!r}, session={self._ref})"
