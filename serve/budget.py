"""The server-wide snapshot budget of ``envkit-serve``: a count and a byte total, reserved before work starts.

Every snapshot a session takes is *reserved* first (one slot of the session's ``--max-snapshots`` and one of the
server's ``--max-snapshots-total``, under one lock, so that concurrent requests cannot overshoot either), then
taken, then *charged* its estimated size against ``--max-snapshot-mb`` (refused, and discarded at once, when
the total would pass it). `deep_size` estimates a snapshot's memory: it walks containers and envkit's own
objects and counts foreign objects (an engine's shared, immutable parts) shallowly, so a snapshot pays for the
data it holds, not for the game it points into; shared parts between snapshots are counted in each, and every
object is charged what ``sys.getsizeof`` leaves out (GC header, allocator rounding), so the estimate errs high;
a snapshot of more than ``max_nodes`` objects is refused (`SnapshotTooLargeError`, 409) rather than estimated
(doubling a cut-short walk charged 35 MiB for 234 MiB held). What a snapshot holds outside Python (the SWE
env's overlay layers on disk: `envkit.snapshot.SnapshotEnvBase.native_bytes`) is added to its charge. Bytes
are limited per session, per owner (``--owner-tokens``) and per server.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from envkit.errors import ServerCapacityError, SnapshotError

_LEAVES = (str, bytes, bytearray, int, float, bool, complex, type(None))
_MAX_NODES = 200_000
#: Bytes per object that ``sys.getsizeof`` leaves out: the GC header of containers (16), the allocator's
#: rounding and free-list slack (~16 on average). 8 MiB of ``{}`` is 64 B each by getsizeof, ~100 B in RSS.
_OVERHEAD = 40


class SnapshotTooLargeError(SnapshotError):
    """A snapshot holds more objects than the server accounts for."""


def native_bytes(env: Any, snap: Any) -> int:
    """What `snap` holds outside Python objects, as its env reports it (0 for envs that do not say)."""
    report = getattr(getattr(env, "unwrapped", env), "native_bytes", None)
    return int(report(snap)) if callable(report) else 0


def deep_size(obj: Any, max_nodes: int = _MAX_NODES) -> int:
    """Bytes held by `obj` (see the module docstring), a bound for containers and envkit's objects.

    Raises:
        SnapshotTooLargeError: `obj` holds more than `max_nodes` objects.
    """
    seen: set[int] = set()
    stack = [obj]
    total = 0
    while stack and len(seen) < max_nodes:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o) + _OVERHEAD
        if isinstance(o, _LEAVES):
            continue
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif (type(o).__module__ or "").startswith("envkit."):
            d = getattr(o, "__dict__", None)
            if d is not None:
                stack.append(d)
            for cls in type(o).__mro__:
                for name in getattr(cls, "__slots__", ()):
                    if hasattr(o, name):
                        stack.append(getattr(o, name))
    if stack:
        raise SnapshotTooLargeError(
            f"this snapshot holds more than {max_nodes} Python objects, more than the server accounts for (its "
            "memory would be estimated, not bounded); snapshot smaller states (e.g. reset with smaller options)"
        )
    return total


class SnapshotBudget:
    """Counts and bytes of the snapshots a server holds (thread-safe: sizes are charged on session threads).

    Args:
        per_session: Most snapshots one session may hold (`SnapshotError`, 409, beyond).
        total: Most snapshots the server holds over all sessions (`ServerCapacityError`, 503, beyond).
        max_bytes: Most estimated bytes they may hold together (`ServerCapacityError`, 503, beyond).
        per_session_bytes: Most estimated bytes one session's snapshots may hold (`SnapshotError`, 409, beyond;
            None: ``max_bytes``). ``max_bytes / max_sessions`` (what ``envkit-serve`` sets by default) is each
            session's guaranteed share: no session can take the bytes another's honest episode needs.
        per_owner_bytes: Most bytes the snapshots of all sessions of one owner (`Session.owner`, the holder of
            one of ``--owner-tokens``) may hold (`SnapshotError`, 409, beyond; None: ``max_bytes``).
    """

    def __init__(
        self,
        per_session: int,
        total: int,
        max_bytes: int,
        per_session_bytes: int | None = None,
        per_owner_bytes: int | None = None,
    ):
        for name, v in (
            ("max_snapshots", per_session),
            ("max_snapshots_total", total),
            ("max_snapshot_bytes", max_bytes),
        ):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        self.per_session, self.total, self.max_bytes = per_session, total, max_bytes
        self.per_session_bytes = max_bytes if per_session_bytes is None else max(1, per_session_bytes)
        self.per_owner_bytes = max_bytes if per_owner_bytes is None else max(1, per_owner_bytes)
        self.owner_bytes: dict[str, int] = {}
        self.count = 0  # reserved or held
        self.bytes = 0
        self._lock = threading.Lock()

    def reserve(self, session: Any) -> None:
        """Take one slot for `session` (its ``snapshots`` held plus its ``pending`` reservations), or refuse."""
        with self._lock:
            held = len(session.snapshots) + session.pending
            if held >= self.per_session:
                raise SnapshotError(
                    f"this session holds {held} snapshots, the server's limit per session (--max-snapshots); "
                    "discard the ones you no longer need with env.discard(s)"
                )
            if self.count >= self.total:
                raise ServerCapacityError(
                    f"the server holds its maximum of {self.total} snapshots over all sessions "
                    "(--max-snapshots-total); discard snapshots or retry later"
                )
            self.count += 1
            session.pending += 1

    def charge(self, nbytes: int, session: Any = None) -> None:
        """Charge a reserved snapshot its size (to the server and to `session`), or refuse (the caller discards
        it and calls `release`)."""
        with self._lock:
            mine = getattr(session, "snapshot_bytes", 0)
            if self.bytes + nbytes > self.max_bytes:
                raise ServerCapacityError(
                    f"the server's snapshots would hold {(self.bytes + nbytes) >> 20} MiB, over its budget of "
                    f"{self.max_bytes >> 20} MiB (--max-snapshot-mb); discard snapshots or retry later"
                )
            if session is not None and mine + nbytes > self.per_session_bytes:
                raise SnapshotError(
                    f"this session's snapshots would hold {(mine + nbytes) / (1 << 20):.1f} MiB, over its share of "
                    f"{self.per_session_bytes / (1 << 20):.1f} MiB (--max-snapshot-mb-per-session); discard "
                    "snapshots you no longer need with env.discard(s)"
                )
            owner = getattr(session, "owner", None)
            theirs = self.owner_bytes.get(owner, 0) if owner is not None else 0
            if owner is not None and theirs + nbytes > self.per_owner_bytes:
                raise SnapshotError(
                    f"owner {owner!r}'s snapshots would hold {(theirs + nbytes) / (1 << 20):.1f} MiB over all its "
                    f"sessions, over its share of {self.per_owner_bytes / (1 << 20):.1f} MiB "
                    "(--max-snapshot-mb-per-owner); discard snapshots you no longer need with env.discard(s)"
                )
            self.bytes += nbytes
            if session is not None:
                session.snapshot_bytes = mine + nbytes
            if owner is not None:
                self.owner_bytes[owner] = theirs + nbytes

    def _give_back(self, nbytes: int, session: Any) -> None:
        self.bytes -= nbytes
        if session is not None:
            session.snapshot_bytes -= nbytes
            owner = getattr(session, "owner", None)
            if owner is not None and owner in self.owner_bytes:
                self.owner_bytes[owner] -= nbytes
                if self.owner_bytes[owner] <= 0:
                    del self.owner_bytes[owner]

    def uncharge(self, nbytes: int, session: Any = None) -> None:
        with self._lock:
            self._give_back(nbytes, session)

    def release(self, nbytes: int = 0, session: Any = None) -> None:
        """Give back one slot (and the bytes it was charged, to the server, to `session` and its owner)."""
        with self._lock:
            self.count -= 1
            self._give_back(nbytes, session)
