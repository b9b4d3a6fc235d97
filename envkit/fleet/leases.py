"""Leases: an actor keeps a client's sessions and snapshots while the client renews its lease (pure bookkeeping).

A client renews every ``lease_s / 3`` seconds (and with every call); an owner not heard from for ``lease_s``
seconds is expired, and the actor releases what it held for that owner (a trainer that died leaks nothing).

Example:
    >>> t = LeaseTable(10.0)
    >>> t.renew("a", now=0.0); t.renew("b", now=5.0)
    >>> t.expired(now=12.0)
    ['a']
    >>> t.owners()
    ['b']
"""

from __future__ import annotations


class LeaseTable:
    """Last renewal time per owner; `expired(now)` removes and returns the owners past their lease."""

    def __init__(self, lease_s: float):
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self.lease_s = float(lease_s)
        self._seen: dict[str, float] = {}

    def renew(self, owner: str, *, now: float) -> None:
        self._seen[owner] = max(now, self._seen.get(owner, now))

    def deadline(self, owner: str) -> float | None:
        """When `owner`'s lease runs out (None: unknown owner)."""
        seen = self._seen.get(owner)
        return None if seen is None else seen + self.lease_s

    def expired(self, *, now: float) -> list[str]:
        """Owners whose lease ran out before `now` (strictly past the deadline), removed from the table, sorted."""
        gone = sorted(o for o, t in self._seen.items() if now > t + self.lease_s)
        for o in gone:
            del self._seen[o]
        return gone

    def forget(self, owner: str) -> None:
        self._seen.pop(owner, None)

    def owners(self) -> list[str]:
        return sorted(self._seen)
