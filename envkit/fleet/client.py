"""`Fleet`: a client's handle on its env actors (`envkit.fleet.actor.EnvHost`), placed by Ray on the nodes that
advertise the fleet's custom resource; dead actors are replaced, lost sessions and snapshots fail cleanly.

A `Fleet` starts ``FleetConfig.actors`` actors (Ray schedules them by ``num_cpus`` and ``{resource: units}``),
opens sessions on the least loaded one, renews its lease on every actor from a daemon thread, and turns an actor's
death (``ray.kill``, a lost node) into `envkit.errors.FleetActorLostError` for the calls it was serving; the slot
then gets a new actor (Ray places it on a surviving node), and snapshot handles of the dead one raise
`envkit.errors.SnapshotLostError`. `get_fleet` keeps one `Fleet` per config in a process (trainers' envs share it).
"""

from __future__ import annotations

import atexit
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from envkit.errors import EnvkitError, FleetActorLostError, SnapshotLostError, require
from envkit.fleet.actor import EnvHost
from envkit.fleet.config import FleetConfig
from envkit.fleet.handles import FleetSnapshot
from envkit.pool_contract import EnvFactory

#: Seconds a new actor may take to be placed and start (no node with room: the error says how to add one).
START_TIMEOUT_S = 120.0


@dataclass
class _Slot:
    index: int
    generation: int
    handle: Any
    name: str
    incarnation: str = ""
    node_id: str = ""
    sessions: int = 0


@dataclass(frozen=True)
class SessionRef:
    """One session: the slot of its actor, that actor's incarnation and the session id there."""

    slot: int
    incarnation: str
    sid: str


class Fleet:
    """Env actors for one client (see the module docstring); `close()` releases and kills them."""

    def __init__(self, cfg: FleetConfig, *, heartbeat: bool = True):
        ray = require("ray", "ray", what="the env fleet")
        self._ray = ray
        self.cfg = cfg
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=cfg.address, include_dashboard=False, log_to_driver=False)
        self.owner = uuid.uuid4().hex[:12]
        self.fleet_id = f"fleet-{self.owner}"
        self._check_resource()
        self._cls = ray.remote(EnvHost)
        self._lock = threading.RLock()
        self.lost: dict[str, str] = {}  # incarnation -> why it is gone
        self.replaced = 0
        self.slots = [self._spawn(i, 0) for i in range(cfg.actors)]
        for slot in self.slots:
            self._await_start(slot)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if heartbeat:
            self._beat = threading.Thread(target=self._heartbeat, name="envkit-fleet-lease", daemon=True)
            self._beat.start()

    # ----- actors --------------------------------------------------------------------------------------------
    def _check_resource(self) -> None:
        cfg = self.cfg
        if cfg.resource and self._ray.cluster_resources().get(cfg.resource, 0.0) < cfg.resource_per_actor:
            raise EnvkitError(
                f"no node of this Ray cluster advertises the resource {cfg.resource!r} (the fleet's actors need "
                f"{cfg.resource_per_actor} each): start CPU nodes with `ray start --address <head> --resources "
                f"'{{\"{cfg.resource}\": 8}}'`, or set FleetConfig.resource to one the cluster has (docs/fleet.md)"
            )

    def _spawn(self, index: int, generation: int) -> _Slot:
        name = f"{self.fleet_id}/{index}.{generation}"
        cfg = self.cfg
        # named (`ray list actors`, `ray.get_actor(name)`): an operator can find, inspect or kill one
        handle = self._cls.options(name=name, **cfg.actor_options()).remote(
            name, cfg.lease_s, cfg.threads, cfg.sessions_per_actor
        )
        return _Slot(index, generation, handle, name)

    def _await_start(self, slot: _Slot) -> None:
        try:
            info = self._ray.get(slot.handle.info.remote(), timeout=START_TIMEOUT_S)
        except self._ray.exceptions.GetTimeoutError as exc:
            raise EnvkitError(
                f"fleet actor {slot.name} was not placed within {START_TIMEOUT_S:.0f}s: no node has "
                f"{self.cfg.num_cpus} CPU and {{{self.cfg.resource!r}: {self.cfg.resource_per_actor}}} free; add "
                "CPU nodes (`ray start --resources ...`) or lower FleetConfig.actors / num_cpus"
            ) from exc
        slot.incarnation, slot.node_id = info["incarnation"], info["node_id"]

    def _replace(self, slot: _Slot, why: str) -> None:
        """Record `slot`'s actor as lost and start a replacement (Ray places it on a node with room)."""
        with self._lock:
            if slot.incarnation in self.lost:
                return
            self.lost[slot.incarnation] = why
            try:
                self._ray.kill(slot.handle, no_restart=True)
            except Exception:  # already gone
                pass
            new = self._spawn(slot.index, slot.generation + 1)
            self.slots[slot.index] = new
            self.replaced += 1
        self._await_start(new)

    def slot_of(self, incarnation: str) -> _Slot | None:
        return next((s for s in self.slots if s.incarnation == incarnation), None)

    def holder(self, handle: FleetSnapshot) -> _Slot:
        """The live actor holding `handle`'s snapshot.

        Raises:
            SnapshotLostError: its actor is gone (killed, node lost) or belongs to another client.
        """
        slot = self.slot_of(handle.incarnation)
        if slot is None:
            why = self.lost.get(handle.incarnation, "it belongs to another fleet client or was closed")
            raise SnapshotLostError(
                f"snapshot {handle.key} was held by {handle.where()}, which is gone ({why}); it cannot be "
                "restored: start that episode again from reset (or replay its actions)"
            )
        return slot

    # ----- sessions and calls --------------------------------------------------------------------------------
    def open(self, factory: EnvFactory, *, slot: int | None = None) -> SessionRef:
        """Open a session of `factory` on actor `slot` (None: the one with the fewest sessions of this client)."""
        with self._lock:
            target = self.slots[slot] if slot is not None else min(self.slots, key=lambda s: s.sessions)
            target.sessions += 1
        try:
            (sid,) = self._get(target, target.handle.open.remote(self.owner, factory, 1), "open")
        except BaseException:
            target.sessions -= 1
            raise
        return SessionRef(target.index, target.incarnation, sid)

    def open_many(self, factory: EnvFactory, n: int, *, slot: int) -> list[SessionRef]:
        """Open `n` sessions of `factory` on actor `slot` in one round trip."""
        target = self.slots[slot]
        with self._lock:
            target.sessions += n
        try:
            sids = self._get(target, target.handle.open.remote(self.owner, factory, n), "open")
        except BaseException:
            target.sessions -= n
            raise
        return [SessionRef(target.index, target.incarnation, sid) for sid in sids]

    def close_session(self, ref: SessionRef) -> None:
        slot = self.slot_of(ref.incarnation)
        if slot is None:
            return
        slot.sessions -= 1
        try:
            self._get(slot, slot.handle.close.remote(self.owner, [ref.sid]), "close")
        except EnvkitError:
            pass  # the actor died meanwhile: nothing left to close

    def submit(self, ref: SessionRef, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Send one request; returns Ray's future (`result` waits for it).

        Raises:
            FleetActorLostError: the session's actor is gone already.
        """
        slot = self.slot_of(ref.incarnation)
        if slot is None:
            raise FleetActorLostError(
                f"the fleet actor of session {ref.sid} is gone ({self.lost.get(ref.incarnation, 'closed')}); "
                "reset the env to start a new episode on a live actor"
            )
        return slot, slot.handle.call.remote(self.owner, ref.sid, method, tuple(args), dict(kwargs))

    def result(self, submitted: Any, method: str) -> Any:
        slot, future = submitted
        return self._get(slot, future, method)

    def call(self, ref: SessionRef, method: str, *args: Any, **kwargs: Any) -> Any:
        """One request on one session; an error of the env is raised as its own type."""
        return self.result(self.submit(ref, method, args, kwargs), method)

    def discard(self, handle: FleetSnapshot) -> bool:
        """Discard a snapshot in the actor that holds it (False: gone already, or its actor is)."""
        try:
            slot = self.holder(handle)
            return bool(self._get(slot, slot.handle.discard.remote(self.owner, handle), "discard"))
        except (SnapshotLostError, FleetActorLostError):
            return False

    def _get(self, slot: _Slot, future: Any, method: str) -> Any:
        ray = self._ray
        try:
            return ray.get(future, timeout=self.cfg.call_timeout_s)
        except ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None  # the env's own error (SnapshotError, InvalidActionError, ...)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            why = _reason(exc, self.cfg.call_timeout_s)
            where = f"{slot.name} on node {slot.node_id[:12]}"
            self._replace(slot, f"{where} died: {why}")
            raise FleetActorLostError(
                f"fleet actor {where} was lost during {method!r} ({why}); its sessions and snapshots are gone and "
                "the fleet has replaced it: reset the env to start a new episode on a live actor"
            ) from exc

    # ----- leases, info, close -------------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        period = self.cfg.lease_s / 3
        while not self._stop.wait(period):
            for slot in list(self.slots):
                try:
                    slot.handle.renew.remote(self.owner)  # fire and forget: a dead actor shows on the next call
                except Exception:
                    pass

    def info(self) -> list[dict[str, Any]]:
        """Each live actor's `EnvHost.info` (node, sessions, snapshots, memory)."""
        return [self._get(s, s.handle.info.remote(), "info") for s in list(self.slots)]

    def close(self) -> None:
        """Release this client's sessions and snapshots and stop its actors."""
        self._stop.set()
        for slot in self.slots:
            try:
                self._ray.get(slot.handle.release.remote(self.owner), timeout=30)
            except Exception:  # best effort: the actor may be gone
                pass
            try:
                self._ray.kill(slot.handle, no_restart=True)
            except Exception:
                pass
        self.slots = []
        _FLEETS.pop(_key(self.cfg), None)
        if self._owns_ray:
            self._ray.shutdown()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reason(exc: BaseException, timeout: float) -> str:
    if type(exc).__name__ == "GetTimeoutError":
        return f"no answer within call_timeout_s={timeout:.0f}s"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


_FLEETS: dict[str, Fleet] = {}
_FLEETS_LOCK = threading.Lock()


def _key(cfg: FleetConfig) -> str:
    return repr(cfg)


def get_fleet(cfg: FleetConfig | dict[str, Any] | str) -> Fleet:
    """This process's `Fleet` for `cfg` (started on first use, closed at exit)."""
    cfg = FleetConfig.coerce(cfg)
    with _FLEETS_LOCK:
        fleet = _FLEETS.get(_key(cfg))
        if fleet is None or not fleet.slots:
            fleet = _FLEETS[_key(cfg)] = Fleet(cfg)
    return fleet


@atexit.register
def close_fleets() -> None:
    """Close every fleet `get_fleet` started in this process (at exit, or before disconnecting from Ray)."""
    for fleet in list(_FLEETS.values()):
        try:
            fleet.close()
        except Exception:  # best effort: Ray may be down already
            pass
    _FLEETS.clear()
