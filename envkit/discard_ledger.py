"""Which snapshots an env has discarded, in memory that does not grow with the number of snapshots it takes.

`envkit.snapshot.SnapshotEnvBase` names its snapshots ``"<origin>:<n>"``: `origin` is drawn once per env instance
and `n` counts up from 0. The ids of one origin that were discarded are kept as disjoint half-open ranges
``[lo, hi)``, so an env that discards its snapshots roughly in the order it took them (the usual: a group's
snapshots are discarded once the group is credited) holds a handful of numbers however long it lives, where a set
of ids grew by one entry (~80 B) per snapshot. An id that is not of that form (a snapshot made elsewhere) counts
as its own origin with ``n = 0``.

Example:
    >>> ledger = DiscardLedger()
    >>> for n in (0, 2, 1):
    ...     ledger.add(f"env:{n}")
    >>> "env:1" in ledger, "env:3" in ledger, ledger.size()
    (True, False, 2)
"""

from __future__ import annotations

import bisect

__all__ = ["DiscardLedger", "split_id"]


def split_id(snapshot_id: str) -> tuple[str, int]:
    """``(origin, n)`` of a snapshot id ``"<origin>:<n>"``; any other id is ``(id, 0)``."""
    origin, sep, n = snapshot_id.rpartition(":")
    if sep and n.isdigit():
        return origin, int(n)
    return snapshot_id, 0


class DiscardLedger:
    """A set of snapshot ids stored as ranges of counters per origin (see the module docstring)."""

    def __init__(self) -> None:
        #: origin -> sorted bounds ``[lo0, hi0, lo1, hi1, ...]`` of the discarded counters.
        self._bounds: dict[str, list[int]] = {}

    def add(self, snapshot_id: str) -> None:
        """Record `snapshot_id` as discarded (recording it again changes nothing)."""
        origin, n = split_id(snapshot_id)
        b = self._bounds.setdefault(origin, [])
        i = bisect.bisect_right(b, n)
        if i % 2:  # inside a range already
            return
        joins_left = i > 0 and b[i - 1] == n
        joins_right = i < len(b) and b[i] == n + 1
        if joins_left and joins_right:
            del b[i - 1 : i + 1]
        elif joins_left:
            b[i - 1] = n + 1
        elif joins_right:
            b[i] = n
        else:
            b[i:i] = [n, n + 1]

    def __contains__(self, snapshot_id: object) -> bool:
        if not isinstance(snapshot_id, str):
            return False
        origin, n = split_id(snapshot_id)
        b = self._bounds.get(origin)
        return b is not None and bisect.bisect_right(b, n) % 2 == 1

    def size(self) -> int:
        """How many numbers the ledger holds (two per range): what its memory grows with."""
        return sum(len(b) for b in self._bounds.values())
