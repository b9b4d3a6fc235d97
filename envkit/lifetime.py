"""Snapshot lifetimes (snapshot contract, rule 6): who discards a snapshot, and where.

A snapshot whose env declares ``SnapshotCapability(holds_resources=True)`` (SWE overlay layers, ALFWorld engine
states) keeps its resource until ``env.discard(s)`` runs in the env that made it. The rule for every caller that
takes snapshots (the oracle pipeline, the local trainer, the OpenRLHF executor): discard each one once it is no
longer needed (for SERO: once its group is credited). `discard_many` does it in one env; `OwnerTrackingPool`
remembers which pool worker made each snapshot and `release()` sends every worker its own.

Example:
    >>> import gymnasium, envkit
    >>> env = gymnasium.make("envkit/Toy-v0")
    >>> _ = env.reset(seed=0)
    >>> snaps = [env.snapshot(), env.snapshot()]
    >>> discard_many(env, [*snaps, None])
    2
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from envkit.capability import snapshot_capability
from envkit.errors import EnvkitError
from envkit.pool import EnvPool, Request, Result

__all__ = ["OwnerTrackingPool", "discard_many", "holds_resources", "instance_scoped", "taken_snapshots"]


def holds_resources(env: Any) -> bool:
    """Whether `env`'s snapshots hold resources to release (``SnapshotCapability.holds_resources``); False for an
    env without snapshots."""
    try:
        return snapshot_capability(env).holds_resources
    except EnvkitError:
        return False


def instance_scoped(env: Any) -> bool:
    """Whether `env`'s snapshots restore natively only in the instance that took them
    (``SnapshotCapability.scope == "instance"``): a fork of such a snapshot must stay in that env. False for an env
    without snapshots."""
    try:
        return snapshot_capability(env).scope == "instance"
    except EnvkitError:
        return False


def taken_snapshots(steps: Iterable[Any], final_snapshot: Any = None) -> list[Any]:
    """The snapshots an episode took: each step's (``Step.snapshot``, before its action) and the final one."""
    out = [s.snapshot for s in steps if getattr(s, "snapshot", None) is not None]
    return out if final_snapshot is None else [*out, final_snapshot]


def discard_many(env: Any, snapshots: Iterable[Any]) -> int:
    """Discard snapshots in the env that made them; returns how many were discarded.

    None entries are skipped. Errors are ignored (best effort): a snapshot already discarded, or one whose worker
    was restarted, is gone already.
    """
    n = 0
    for s in snapshots:
        if s is None:
            continue
        try:
            env.discard(s)
            n += 1
        except Exception:  # best effort: see the docstring
            pass
    return n


class OwnerTrackingPool(EnvPool):
    """Wraps a pool and remembers which worker made each snapshot (``snapshot_step`` / ``snapshot`` answers).

    `owner_of(s)` gives (worker, sequence number) of a tracked snapshot (SERO's `run_continuations` sends each
    root to its owner); `release()` sends every worker its own snapshots to discard (``discard=False``: only
    forget them).
    """

    def __init__(self, pool: EnvPool):
        self.pool = pool
        self.size = pool.size
        self.factory = getattr(pool, "factory", None)
        self.owned: dict[int, list[Any]] = defaultdict(list)
        self._owner: dict[int, tuple[int, int]] = {}
        self._seq = 0

    def _track(self, w: int, snap: Any) -> None:
        if snap is not None:
            self.owned[w].append(snap)  # keeps the object alive, so its id stays unique
            self._owner[id(snap)] = (w, self._seq)
            self._seq += 1

    def owner_of(self, snapshot: Any) -> tuple[int, int] | None:
        return self._owner.get(id(snapshot)) if snapshot is not None else None

    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        results = self.pool.call_many(requests)
        for (w, method, *_), res in zip(requests, results, strict=True):
            if res.ok and method == "snapshot_step":
                self._track(w, res.value[0])
            elif res.ok and method == "snapshot":
                self._track(w, res.value)
        return results

    def release(self, discard: bool = True) -> int:
        """Discard the tracked snapshots in their workers and forget them; returns how many were released."""
        reqs: list[Request] = [(w, "call", (discard_many, snaps), {}) for w, snaps in self.owned.items() if snaps]
        self.owned = defaultdict(list)
        self._owner = {}
        if not discard or not reqs:
            return 0
        return sum(r.value for r in self.pool.call_many(reqs) if r.ok)

    def close(self) -> None:
        self.pool.close()
