"""Who pays for the SWE layer store's disk: budgets per episode, per owner and per store, and the rule that
admits a layer.

Every layer a work tree freezes (a snapshot, the freeze before grading, a merge of a deep stack, the graded copy
of the agent's changes) is charged to an `Account`: one episode of one *owner* (the tenant: an envkit-serve
owner, or the env itself), at its real disk use (allocated blocks of every file and directory of the layer as
it lies in the store, `envkit.envs.swe.layer_files.usage`) and its inodes. A layer is admitted when

1. the episode's live layers stay within the episode's budget (`Limits.snapshot_mb`, `Limits.snapshot_inodes`);
2. the owner's live layers (all its episodes) stay within the owner's budget (``LayerStore(owner_mb=...,
   owner_inodes=...)``);
3. the store's *commitments* stay within its quota: every owner with an open episode is guaranteed a *floor*
   (``LayerStore(floor_mb=..., floor_inodes=...)``), so the store counts ``max(used, floor)`` for each of them
   (plus what closed owners and the task layers still hold); an owner within its floor is always admitted;
4. the store's file system really has the room: after the layer, its free space and free inodes still cover
   the unused part of every other open owner's floor (the quota cannot promise more than the disk holds).

So no owner can make another's honest episode fail: an episode whose live layers (snapshots plus the copies
grading makes) stay within the floor snapshots and is graded whatever other owners do; a layer that would pass
a budget is refused with `StoreQuotaError` naming the budget, in the episode that asked for it. Task layers
(the repository, the bug, gold and test patches: trusted data) are counted but never refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envkit.errors import EnvkitError


class StoreQuotaError(EnvkitError, OSError):
    """A layer would pass a budget of the layer store (episode, owner or store); the message says which and how
    to free or raise it."""


@dataclass(eq=False)
class Account:
    """One episode of one owner: its budget and what its live layers hold (bytes are allocated disk bytes).

    Created by `envkit.envs.swe.layers.LayerStore.open_account`; `closed` once the episode ended (its layers
    stay charged to it until they are deleted, but its owner's floor is no longer reserved for it).
    """

    owner: str
    max_bytes: int
    max_inodes: int
    bytes: int = 0
    inodes: int = 0
    closed: bool = False


@dataclass
class OwnerUsage:
    """What one owner's live layers hold, and how many of its episodes are open."""

    bytes: int = 0
    inodes: int = 0
    open: int = 0


@dataclass
class Budgets:
    """The store's budgets (bytes are allocated disk bytes).

    Attributes:
        max_bytes, max_inodes: The store's quota (all layers together, task layers included).
        owner_bytes, owner_inodes: Most one owner's live layers may hold.
        floor_bytes, floor_inodes: What the store keeps for every owner with an open episode.
    """

    max_bytes: int
    max_inodes: int
    owner_bytes: int
    owner_inodes: int
    floor_bytes: int
    floor_inodes: int
    owners: dict[str, OwnerUsage] = field(default_factory=dict)
    #: Bytes and inodes of layers charged to nobody (task layers) or to owners no longer tracked.
    other_bytes: int = 0
    other_inodes: int = 0

    def __post_init__(self) -> None:
        values = (self.max_bytes, self.max_inodes, self.owner_bytes, self.owner_inodes)
        if min(values) <= 0 or min(self.floor_bytes, self.floor_inodes) < 0:
            raise ValueError(
                "LayerStore budgets must be positive (max_mb, max_inodes, owner_mb, owner_inodes) and floors >= 0, "
                f"got {values} and floors {(self.floor_bytes, self.floor_inodes)}"
            )

    def committed(self) -> tuple[int, int]:
        """(bytes, inodes) the store has used or promised: ``max(used, floor)`` per owner with an open episode."""
        b, n = self.other_bytes, self.other_inodes
        for o in self.owners.values():
            fb, fi = (self.floor_bytes, self.floor_inodes) if o.open else (0, 0)
            b += max(o.bytes, fb)
            n += max(o.inodes, fi)
        return b, n

    def promised_to_others(self, owner: str) -> tuple[int, int]:
        """The unused part of every other open owner's floor (what the file system must still hold)."""
        b = n = 0
        for name, o in self.owners.items():
            if name != owner and o.open:
                b += max(0, self.floor_bytes - o.bytes)
                n += max(0, self.floor_inodes - o.inodes)
        return b, n

    def refusal(self, account: Account, nbytes: int, inodes: int) -> str | None:
        """Why a layer of `nbytes` / `inodes` charged to `account` is refused (None: admitted). Pure: no change."""
        mib = 1 << 20
        if account.bytes + nbytes > account.max_bytes or account.inodes + inodes > account.max_inodes:
            return (
                f"this episode's snapshots would hold {(account.bytes + nbytes) / mib:.1f} MiB in "
                f"{account.inodes + inodes} files and directories, over its budget of {account.max_bytes / mib:.0f} "
                f"MiB / {account.max_inodes} (Limits.snapshot_mb, Limits.snapshot_inodes); discard snapshots you no "
                "longer need (env.discard) or delete files under /repo"
            )
        o = self.owners.get(account.owner, OwnerUsage())
        if o.bytes + nbytes > self.owner_bytes or o.inodes + inodes > self.owner_inodes:
            return (
                f"owner {account.owner!r}'s snapshots would hold {(o.bytes + nbytes) / mib:.1f} MiB in "
                f"{o.inodes + inodes} files and directories over all its episodes, over its budget of "
                f"{self.owner_bytes / mib:.0f} MiB / {self.owner_inodes} (LayerStore(owner_mb=..., owner_inodes=...), "
                "ENVKIT_SWE_OWNER_MB, ENVKIT_SWE_OWNER_INODES); discard snapshots you no longer need (env.discard)"
            )
        b, n = self.committed()
        fb, fi = (self.floor_bytes, self.floor_inodes) if o.open else (0, 0)
        b += max(o.bytes + nbytes, fb) - max(o.bytes, fb)
        n += max(o.inodes + inodes, fi) - max(o.inodes, fi)
        if b > self.max_bytes or n > self.max_inodes:
            return (
                f"the SWE layer store is full: a new layer of {nbytes / mib:.1f} MiB and {inodes} inodes would take "
                f"what it holds or keeps for other owners to {b / mib:.0f} MiB / {n} inodes, over its quota of "
                f"{self.max_bytes / mib:.0f} MiB / {self.max_inodes} inodes (every open owner is kept "
                f"{self.floor_bytes / mib:.0f} MiB / {self.floor_inodes} inodes); discard snapshots you no longer "
                "need (env.discard), or raise the quota (LayerStore(max_mb=..., max_inodes=...), "
                "ENVKIT_SWE_STORE_MB, ENVKIT_SWE_STORE_INODES)"
            )
        return None

    def disk_refusal(self, owner: str, free_bytes: int, free_inodes: int) -> str | None:
        """Why the file system cannot take a layer already written (`free_*` measured after it), or None."""
        pb, pi = self.promised_to_others(owner)
        if free_bytes < pb or free_inodes < pi:
            return (
                f"the SWE layer store's file system has {free_bytes >> 20} MiB and {free_inodes} inodes left after "
                f"this layer, less than the {pb >> 20} MiB / {pi} inodes kept for other owners' episodes; free disk "
                "space, discard snapshots (env.discard), or move the store (ENVKIT_SWE_STORE) to a larger file system"
            )
        return None

    def charge(self, account: Account | None, nbytes: int, inodes: int) -> None:
        if account is None:
            self.other_bytes += nbytes
            self.other_inodes += inodes
            return
        account.bytes += nbytes
        account.inodes += inodes
        o = self.owners.setdefault(account.owner, OwnerUsage())
        o.bytes += nbytes
        o.inodes += inodes

    def uncharge(self, account: Account | None, nbytes: int, inodes: int) -> None:
        if account is None:
            self.other_bytes -= nbytes
            self.other_inodes -= inodes
            return
        account.bytes -= nbytes
        account.inodes -= inodes
        o = self.owners.get(account.owner)
        if o is not None:
            o.bytes -= nbytes
            o.inodes -= inodes
            if o.bytes <= 0 and o.inodes <= 0 and o.open == 0:
                del self.owners[account.owner]
