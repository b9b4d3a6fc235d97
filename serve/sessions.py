"""Sessions of an env server: one env instance and one thread each, a limit, idle expiry, held snapshots.

Every session owns an `EnvkitEnvironment` and runs all of its calls on its own thread (envs are not thread-safe,
some engines are thread-bound). Every env the server builds belongs to a session of this table: HTTP sessions,
WebSocket connections and OpenEnv's stateless routes (a session for the one request), so ``--max-sessions``
counts them all and ``/envkit/info`` shows them. An HTTP session has a public id (in URLs) and a secret key
(only its opener has it): every request on it, and closing it, needs the key. Snapshots stay in this process:
`snapshot` stores the envkit snapshot under a random handle and returns the handle; any session of the server
may restore it (one of a different instance falls back to the env's own replay where its native state is
instance-bound), only the session that took it discards it, and a session's snapshots go with it when it
closes or expires. Snapshots count against `SnapshotBudget` (per session, server-wide count and bytes).
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from envkit.errors import ServerCapacityError, SessionLostError, SnapshotError
from envkit.serve.budget import SnapshotBudget, deep_size, native_bytes
from envkit.serve.models import EnvkitEnvironment
from envkit.tenancy import set_owner

T = TypeVar("T")


@dataclass
class Session:
    id: str
    env: EnvkitEnvironment
    thread: ThreadPoolExecutor
    last_used: float
    kind: str = "http"  # "http" (addressable by id + key), "ws" (its connection only), "oneshot" (one request)
    key: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    snapshots: set[str] = field(default_factory=set)
    pending: int = 0  # snapshots reserved, being taken
    snapshot_bytes: int = 0  # charged to its snapshots (its share of the byte budget)
    busy: int = 0
    owner: str = "default"  # the owner whose token opened it (--owner-tokens); "default" with one --token

    def owned_by(self, key: str | None) -> bool:
        return key is not None and hmac.compare_digest(key.encode(), self.key.encode())


class SessionTable:
    """The server's sessions and snapshots.

    Args:
        factory: Builds the env of a new session.
        max_sessions: Most sessions at once (a new one beyond it is refused with `ServerCapacityError`).
        idle_timeout: Seconds without a request after which a session (and its snapshots) is dropped; None: never.
        budget: The server's snapshot budget (per session, per owner, server-wide count and bytes).
        max_sessions_per_owner: Most sessions one owner (`Session.owner`) holds at once (None: `max_sessions`).
        owners: The owner names (several: each session's env is built with `envkit.tenancy.set_owner` of its
            owner, so envs that charge native resources per owner -- the SWE layer store -- charge that owner;
            one: each session is its own owner there, since its clients cannot be told apart).
    """

    def __init__(
        self,
        factory: Callable[[], EnvkitEnvironment],
        *,
        max_sessions: int = 64,
        idle_timeout: float | None = 600.0,
        budget: SnapshotBudget | None = None,
        max_sessions_per_owner: int | None = None,
        owners: tuple[str, ...] = ("default",),
    ):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.factory = factory
        self.max_sessions = max_sessions
        self.max_sessions_per_owner = max_sessions_per_owner or max_sessions
        self.owners = owners
        self.idle_timeout = idle_timeout
        self.budget = budget or SnapshotBudget(10_000, 100_000, 4 << 30)
        self.sessions: dict[str, Session] = {}
        #: Sessions closed but whose env has not stopped yet (a step still running): they keep their slot.
        self.closing: dict[str, Session] = {}
        self.snapshots: dict[str, tuple[str, Any, int]] = {}  # handle -> (owner session id, snapshot, bytes)
        self._reserved = 0
        self._reserved_by: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self.expired = 0

    def held_by(self, owner: str) -> int:
        """Slots `owner` holds (open, closing and being opened)."""
        held = (*self.sessions.values(), *self.closing.values())
        return sum(1 for s in held if s.owner == owner) + self._reserved_by.get(owner, 0)

    async def open(self, kind: str = "http", owner: str = "default") -> Session:
        async with self._lock:
            if self.held() + self._reserved >= self.max_sessions:
                raise ServerCapacityError(
                    f"the server holds its maximum of {self.max_sessions} sessions; close some (env.close()) or "
                    "start envkit-serve with a larger --max-sessions"
                )
            if self.held_by(owner) >= self.max_sessions_per_owner:
                raise ServerCapacityError(
                    f"owner {owner!r} holds its maximum of {self.max_sessions_per_owner} sessions "
                    "(--max-sessions-per-owner); close some (env.close())"
                )
            self._reserved += 1
            self._reserved_by[owner] = self._reserved_by.get(owner, 0) + 1
        sid = secrets.token_hex(16)
        tenant = owner if len(self.owners) > 1 else f"session-{sid[:12]}"

        def build() -> EnvkitEnvironment:
            set_owner(tenant)  # this thread runs every call of the session: its env charges `tenant`
            return self.factory()

        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="envkit-session")
        try:
            env = await asyncio.get_running_loop().run_in_executor(thread, build)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        finally:
            async with self._lock:
                self._reserved -= 1
                self._reserved_by[owner] -= 1
        s = Session(sid, env, thread, time.monotonic(), kind, owner=owner)
        async with self._lock:
            self.sessions[s.id] = s
        return s

    def held(self) -> int:
        """Slots in use: open sessions plus closed ones whose env is still running (its close queued behind)."""
        return len(self.sessions) + len(self.closing)

    def get(self, sid: str, key: str | None = None, kind: str = "http") -> Session:
        """The session `sid`; for an HTTP request (`kind` "http") only with its key."""
        s = self.sessions.get(sid)
        if s is None or s.kind != kind:
            raise SessionLostError(
                f"no session {sid[:12]!r} on this server: it was closed, expired after {self.idle_timeout}s idle, "
                "or the server restarted; reset the env to open a new session"
            )
        if kind == "http" and not s.owned_by(key):
            raise PermissionError(
                "this session belongs to another client: requests on a session need the session_key its opener "
                "got from POST /envkit/sessions, in the Envkit-Session-Key header"
            )
        return s

    async def run(self, s: Session, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the session's thread."""
        s.busy += 1
        s.last_used = time.monotonic()
        try:
            return await asyncio.get_running_loop().run_in_executor(s.thread, fn, *args)
        finally:
            s.busy -= 1
            s.last_used = time.monotonic()

    # ----- snapshots ---------------------------------------------------------------------------------------
    async def snapshot(self, s: Session, step: str | None = None) -> tuple[str, Any]:
        """Snapshot the session's env (then step `step` if given); returns (handle, step result or None).

        The slot is reserved before any work (concurrent requests cannot pass the limits), the size charged
        before the step; a refused charge or a failed step discards the snapshot (nothing is held for it)."""
        budget = self.budget
        budget.reserve(s)

        def work() -> tuple[Any, int, Any]:
            snap, charged = s.env.snapshot(), 0
            try:
                size = deep_size(snap) + native_bytes(s.env.env, snap)
                budget.charge(size, s)
                charged = size
                return snap, size, (s.env.step(step) if step is not None else None)
            except BaseException:
                budget.uncharge(charged, s)
                try:
                    s.env.discard(snap)
                except Exception:  # the first error is the one to report
                    pass
                raise

        try:
            snap, size, out = await self.run(s, work)
        except BaseException:
            budget.release()
            raise
        finally:
            s.pending -= 1
        if s.id not in self.sessions:  # closed meanwhile: its env is closed, which frees the snapshot's state
            budget.release(size, s)
            raise SessionLostError("the session was closed while its snapshot was taken")
        handle = secrets.token_urlsafe(18)
        self.snapshots[handle] = (s.id, snap, size)
        s.snapshots.add(handle)
        return handle, out

    def lookup(self, handle: str) -> tuple[str, Any]:
        if handle not in self.snapshots:
            raise SnapshotError(
                "unknown snapshot handle: it was discarded, its session closed or expired, or the server restarted "
                "(snapshots live in the server's memory)"
            )
        owner, snap, _ = self.snapshots[handle]
        return owner, snap

    async def discard(self, s: Session, handle: str) -> None:
        owner_id, snap = self.lookup(handle)
        if owner_id != s.id:
            raise PermissionError(
                "this snapshot was taken by another session: only the session that took it discards it (it goes "
                "when that session closes or expires); restore it here if you need its state"
            )
        await self.run(s, s.env.discard, snap)
        held = self.snapshots.pop(handle, None)
        if held is not None:
            s.snapshots.discard(handle)
            self.budget.release(held[2], s)

    # ----- lifetime ----------------------------------------------------------------------------------------
    async def close(self, sid: str) -> None:
        """Close session `sid`: it stops taking requests at once, but keeps its slot (`held`) until its env has
        stopped -- the close runs on the session's thread, after any call still running there -- even when the
        caller is cancelled meanwhile."""
        async with self._lock:
            s = self.sessions.pop(sid, None)
            if s is None:
                return
            self.closing[sid] = s
        loop = asyncio.get_running_loop()

        def shut() -> None:
            for h in list(s.snapshots):
                _, snap, size = self.snapshots.pop(h, (None, None, 0))
                if snap is not None:
                    self.budget.release(size, s)
                try:
                    s.env.discard(snap)
                except Exception:  # best effort: the env is closed next
                    pass
            s.env.close()

        def stopped(_: Any) -> None:
            s.thread.shutdown(wait=False)
            try:
                loop.call_soon_threadsafe(self.closing.pop, sid, None)
            except RuntimeError:  # the loop is gone (the server stopped): nothing counts slots any more
                self.closing.pop(sid, None)

        done = s.thread.submit(shut)
        done.add_done_callback(stopped)
        await asyncio.shield(asyncio.wrap_future(done))

    async def reap(self) -> None:
        """Drop idle sessions, forever (run as a background task)."""
        if self.idle_timeout is None:
            return
        while True:
            await asyncio.sleep(max(0.2, min(self.idle_timeout / 4, 5.0)))
            now = time.monotonic()
            for sid, s in list(self.sessions.items()):
                if s.busy == 0 and now - s.last_used > self.idle_timeout:
                    await self.close(sid)
                    self.expired += 1

    async def close_all(self) -> None:
        """Close every session and wait until every env has stopped (those already closing too)."""
        await asyncio.gather(*(self.close(sid) for sid in list(self.sessions)), return_exceptions=True)
        while self.closing:
            await asyncio.sleep(0.05)
