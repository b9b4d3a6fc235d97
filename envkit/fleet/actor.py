"""`EnvHost`: one env-fleet actor (a Ray async actor) holding many envs, their snapshots and its clients' leases.

One actor serves many concurrent episodes: every call is a coroutine, each session's calls run one at a time
(an ``asyncio.Lock`` per session) in the actor's thread pool (``FleetConfig.threads``), so a session waiting on
I/O (a browser, a sandbox) never blocks the others. Snapshots stay here: a ``snapshot`` answers a
`envkit.fleet.handles.FleetSnapshot`, ``restore(handle)`` looks the snapshot up again (`_HeldEnv`). A client that
stops renewing its lease (`envkit.fleet.leases`) loses its sessions and snapshots here, discarded in the env that
took them. The class is plain Python; `envkit.fleet.client.Fleet` wraps it with ``ray.remote`` (imports ray lazily).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from envkit.errors import FleetCapacityError, SessionLostError, SnapshotError, SnapshotLostError
from envkit.fleet.handles import FleetSnapshot
from envkit.fleet.leases import LeaseTable
from envkit.pool_contract import EnvFactory, dispatch


@dataclass
class _Session:
    owner: str
    factory: EnvFactory
    env: Any
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _Held:
    snapshot: Any
    owner: str
    env: Any  # the env that took it (discards go there)


class _HeldEnv:
    """The env of one session as a call sees it: snapshots become handles, handles are looked up again."""

    def __init__(self, host: EnvHost, session: _Session):
        self._host = host
        self._session = session
        self._env = session.env

    def snapshot(self) -> FleetSnapshot:
        return self._host.hold(self._env.snapshot(), self._session.owner, self._env)

    def restore(self, handle: Any) -> Any:
        return self._env.restore(self._host.lookup(handle))

    def discard(self, handle: Any) -> None:
        self._host.drop(handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def restore_kind(env: Any, handle: Any) -> tuple[Any, dict[str, Any], str]:
    """Pool ``call`` function: restore and say how (``native`` / ``replay``: the env's ``last_restore_kind``)."""
    from envkit.core import jsonable

    obs, info = env.restore(handle)
    kind = getattr(env.unwrapped, "last_restore_kind", "") or str(env.metadata.get("snapshot", "native"))
    return obs, jsonable(info), kind


class EnvHost:
    """A fleet actor (see the module docstring); methods are called through Ray by `envkit.fleet.client.Fleet`."""

    def __init__(self, name: str, lease_s: float, threads: int, max_sessions: int):
        import ray

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self.name = name
        self.incarnation = uuid.uuid4().hex[:12]
        self.node_id = ray.get_runtime_context().get_node_id()
        self.max_sessions = max_sessions
        self.sessions: dict[str, _Session] = {}
        self.held: dict[str, _Held] = {}
        self.leases = LeaseTable(lease_s)
        self.warm: dict[str, list[Any]] = {}  # repr(factory) -> envs of closed sessions
        self.counts = {"opened": 0, "released_sessions": 0, "released_snapshots": 0, "expired_owners": 0}
        self._lock = threading.Lock()  # `held` is changed from the call threads and the event loop
        self._ids = itertools.count()
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="envkit-fleet")
        self._reaper: asyncio.Task[None] | None = None

    # ----- snapshots (called from the call threads) ---------------------------------------------------------
    def hold(self, snapshot: Any, owner: str, env: Any) -> FleetSnapshot:
        key = f"k{next(self._ids)}"
        with self._lock:
            self.held[key] = _Held(snapshot, owner, env)
        kind = str(getattr(env, "metadata", {}).get("snapshot", "native"))
        return FleetSnapshot(self.name, self.incarnation, self.node_id, key, kind, owner)

    def lookup(self, handle: Any) -> Any:
        if not isinstance(handle, FleetSnapshot):
            raise SnapshotError(
                f"a fleet env restores the FleetSnapshot handles its snapshot() returned, got {type(handle).__name__}"
            )
        if handle.incarnation != self.incarnation:
            raise SnapshotError(
                f"this snapshot is held by {handle.where()}, not by {self.name} (incarnation {self.incarnation}): "
                "restore it through a FleetEnv or FleetPool, which move the session to the holding actor"
            )
        with self._lock:
            held = self.held.get(handle.key)
        if held is None:
            raise SnapshotLostError(
                f"snapshot {handle.key} is no longer held by {handle.where()}: it was discarded, or released when "
                "its owner's lease expired; start again from reset (or replay the episode's actions)"
            )
        return held.snapshot

    def drop(self, handle: Any) -> None:
        self.lookup(handle)
        with self._lock:
            held = self.held.pop(handle.key, None)
        if held is not None:
            _discard(held)

    # ----- the actor's API (coroutines) ----------------------------------------------------------------------
    async def info(self) -> dict[str, Any]:
        """Where this actor runs and what it holds (sessions, snapshots, resident memory in bytes)."""
        self._ensure_reaper()
        return {
            "name": self.name,
            "incarnation": self.incarnation,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "sessions": len(self.sessions),
            "snapshots": len(self.held),
            "owners": self.leases.owners(),
            "rss_bytes": _rss_bytes(),
            **self.counts,
        }

    async def open(self, owner: str, factory: EnvFactory, n: int = 1) -> list[str]:
        """Open `n` sessions of `factory` for `owner` (a warm env of a closed session is reused)."""
        self._renew(owner)
        if len(self.sessions) + n > self.max_sessions:
            raise FleetCapacityError(
                f"fleet actor {self.name} holds {len(self.sessions)} of its {self.max_sessions} sessions; "
                f"cannot open {n} more: raise FleetConfig.sessions_per_actor or FleetConfig.actors"
            )
        loop = asyncio.get_running_loop()
        out = []
        for _ in range(n):
            warm = self.warm.get(repr(factory))
            env = warm.pop() if warm else await loop.run_in_executor(self._threads, factory)
            sid = f"s{next(self._ids)}"
            self.sessions[sid] = _Session(owner, factory, env)
            self.counts["opened"] += 1
            out.append(sid)
        return out

    async def call(self, owner: str, sid: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One `envkit.pool` request (reset, step, snapshot_step, snapshot, restore, discard, metadata, call)."""
        self._renew(owner)
        session = self.sessions.get(sid)
        if session is None or session.owner != owner:
            raise SessionLostError(
                f"fleet actor {self.name} holds no session {sid} of this client (closed, or released when the "
                "client's lease expired): reset the env to open a new session"
            )
        loop = asyncio.get_running_loop()
        async with session.lock:
            env: Any = _HeldEnv(self, session)  # an env as `dispatch` sees it
            return await loop.run_in_executor(self._threads, dispatch, env, method, args, kwargs)

    async def discard(self, owner: str, handle: FleetSnapshot) -> bool:
        """Discard one snapshot held here (False: it was gone already)."""
        self._renew(owner)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._threads, self.drop, handle)
        except SnapshotLostError:
            return False
        return True

    async def close(self, owner: str, sids: list[str]) -> int:
        """Close sessions (their envs stay warm for the next `open`); their snapshots stay until discarded."""
        n = 0
        for sid in sids:
            session = self.sessions.get(sid)
            if session is None or session.owner != owner:
                continue
            async with session.lock:
                self.sessions.pop(sid, None)
                self.warm.setdefault(repr(session.factory), []).append(session.env)
                n += 1
        return n

    async def renew(self, owner: str) -> float:
        """Renew `owner`'s lease; returns its deadline (monotonic seconds of this actor)."""
        self._renew(owner)
        return float(self.leases.deadline(owner) or 0.0)

    async def release(self, owner: str) -> dict[str, int]:
        """Release everything `owner` holds here: discard its snapshots, close its sessions."""
        self.leases.forget(owner)
        return await self._release(owner)

    # ----- internals -----------------------------------------------------------------------------------------
    def _renew(self, owner: str) -> None:
        self.leases.renew(owner, now=time.monotonic())
        self._ensure_reaper()

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.leases.lease_s / 4))
            for owner in self.leases.expired(now=time.monotonic()):
                self.counts["expired_owners"] += 1
                await self._release(owner)

    async def _release(self, owner: str) -> dict[str, int]:
        with self._lock:
            keys = [k for k, h in self.held.items() if h.owner == owner]
            gone = [self.held.pop(k) for k in keys]
        loop = asyncio.get_running_loop()
        for held in gone:
            await loop.run_in_executor(self._threads, _discard, held)
        sids = [sid for sid, s in self.sessions.items() if s.owner == owner]
        closed = await self.close(owner, sids)
        self.counts["released_snapshots"] += len(gone)
        self.counts["released_sessions"] += closed
        return {"snapshots": len(gone), "sessions": closed}


def _discard(held: _Held) -> None:
    try:
        held.env.discard(held.snapshot)
    except Exception:  # best effort, as envkit.lifetime.discard_many: the env may have dropped it already
        pass


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
