"""The store of immutable overlay layers the SWE env's work trees are mounted from (its native snapshots).

A *layer* is a directory in overlayfs upper-dir format (whiteouts are 0/0 character devices, opaque
directories carry ``trusted.overlay.opaque=y``; `envkit.envs.swe.layer_files`). Layers never change after they enter the
`LayerStore`, so a stack of layer ids (bottom first) names a file-system state for good; an
`envkit.envs.swe.overlay.OverlayTree` mounts such a stack as a work tree, and its ``freeze()`` is the snapshot.

Layers carry reference counts; a layer whose count drops to zero is deleted. `LayerStore.merge` collapses a
stack into one new layer (whiteouts and opaque directories are applied in order; files are hard links, since
layers are immutable). Needs root (mount(2)); the error says so otherwise.

Example:
    >>> from envkit.envs.swe.overlay import OverlayTree      # doctest: +SKIP
    >>> store = LayerStore.default()                  # doctest: +SKIP
    >>> base = store.import_tree("/path/to/repo")     # doctest: +SKIP
    >>> tree = OverlayTree(store, pinned=1)           # doctest: +SKIP
    >>> tree.mount((base,)); s = tree.freeze()        # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import itertools
import multiprocessing.util
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Protocol

from envkit.envs.swe.layer_files import (
    MNT_DETACH,
    chown_tree,
    libc,
    merge_into,
    remove_tree,
    usage,
)
from envkit.envs.swe.store_quota import Account, Budgets, OwnerUsage, StoreQuotaError


class MountedTree(Protocol):
    """What the store needs of a tree mounted on its layers (`envkit.envs.swe.overlay.OverlayTree`): a way to
    unmount it when the store closes first."""

    def close(self) -> None: ...


__all__ = ["Account", "LayerStore", "StoreQuotaError"]


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


class LayerStore:
    """A directory of immutable layers with reference counts.

    Args:
        root: Where layers live (created; a local file system that can hold overlayfs upper dirs: ext4, xfs,
            tmpfs; not overlayfs itself). Default: a private temporary directory under ``$ENVKIT_SWE_STORE`` (else
            the system temp dir), removed at interpreter exit.
        max_mb: Quota on the disk space all layers together may take (allocated bytes; holes are free).
            Default ``$ENVKIT_SWE_STORE_MB`` or 16384.
        max_inodes: Quota on the files and directories all layers together may hold. Default
            ``$ENVKIT_SWE_STORE_INODES`` or 2,000,000.
        owner_mb, owner_inodes: Most one owner's live layers may hold (all its episodes). Default
            ``$ENVKIT_SWE_OWNER_MB`` / ``$ENVKIT_SWE_OWNER_INODES`` or a quarter of the quota.
        floor_mb, floor_inodes: What the store keeps for every owner with an open episode, whatever the others
            do. Default ``$ENVKIT_SWE_FLOOR_MB`` / ``$ENVKIT_SWE_FLOOR_INODES`` or 64 MiB / 10,000 (at most 1/32
            of the quota).

    Layers are charged to an `Account` (an episode of an owner) at their real disk use; the rule that admits
    them is `envkit.envs.swe.store_quota` (episode, owner, store quota with per-owner floors, free disk). A
    layer past a budget is refused with `StoreQuotaError` (the work tree stays as it was); discarding snapshots
    frees their layers.
    """

    _default: LayerStore | None = None
    _lock = threading.Lock()

    def __init__(
        self,
        root: str | Path | None = None,
        *,
        max_mb: int | None = None,
        max_inodes: int | None = None,
        owner_mb: int | None = None,
        owner_inodes: int | None = None,
        floor_mb: int | None = None,
        floor_inodes: int | None = None,
    ) -> None:
        mb = max_mb if max_mb is not None else _env_int("ENVKIT_SWE_STORE_MB", 16384)
        inodes = max_inodes if max_inodes is not None else _env_int("ENVKIT_SWE_STORE_INODES", 2_000_000)
        self.budgets = Budgets(
            mb << 20,
            inodes,
            (owner_mb if owner_mb is not None else _env_int("ENVKIT_SWE_OWNER_MB", max(1, mb // 4))) << 20,
            owner_inodes if owner_inodes is not None else _env_int("ENVKIT_SWE_OWNER_INODES", max(1, inodes // 4)),
            (floor_mb if floor_mb is not None else _env_int("ENVKIT_SWE_FLOOR_MB", min(64, mb // 32))) << 20,
            floor_inodes
            if floor_inodes is not None
            else _env_int("ENVKIT_SWE_FLOOR_INODES", min(10_000, inodes // 32)),
        )
        self._usage: dict[str, tuple[int, int, Account | None]] = {}
        parent = os.environ.get("ENVKIT_SWE_STORE") or None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="envkit-swe-", dir=parent))
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        (self.root / "l").mkdir(parents=True, exist_ok=True)
        (self.root / "t").mkdir(exist_ok=True)
        (self.root / "x").mkdir(exist_ok=True)
        self._trash: list[str] = []
        self._janitor: threading.Thread | None = None
        self._refs: dict[str, int] = {}
        self._pinned: set[str] = set()
        self._merged: dict[tuple[str, ...], str] = {}
        self._counter = itertools.count()
        self._trees: set[MountedTree] = set()
        self._owned = root is None
        self._pid = os.getpid()
        if self._owned:
            (self.root / "owner.pid").write_text(str(self._pid))
        self._lock = threading.Lock()

    @staticmethod
    def cleanup_stale(parent: str | Path | None = None) -> list[str]:
        """Unmount and delete default stores left by processes that died without cleaning up (e.g. SIGKILL).

        Returns the removed store directories. Called when the process-wide store is created.
        """
        parent = Path(parent or os.environ.get("ENVKIT_SWE_STORE") or tempfile.gettempdir())
        removed: list[str] = []
        for d in parent.glob("envkit-swe-*"):
            try:
                pid = int((d / "owner.pid").read_text())
            except (OSError, ValueError):
                continue
            try:
                os.kill(pid, 0)
                continue  # still alive
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
            prefix = str(d) + "/"
            with open("/proc/self/mountinfo") as f:
                points = [line.split()[4] for line in f if line.split()[4].startswith(prefix)]
            for point in sorted(points, key=len, reverse=True):
                libc.umount2(point.encode(), MNT_DETACH)
            remove_tree(str(d))
            removed.append(str(d))
        return removed

    @classmethod
    def default(cls) -> LayerStore:
        """The process-wide store (all SWE envs of a process share it, so snapshots move between them)."""
        with cls._lock:
            d = cls._default
            if d is None or not d.root.exists() or d._pid != os.getpid():  # a forked child gets its own store
                cls.cleanup_stale()
                d = cls._default = cls()
                atexit.register(d.close)
                # multiprocessing children (fork) leave by os._exit after running these finalizers, not atexit
                multiprocessing.util.Finalize(d, d.close, exitpriority=10)
            return d

    # ----- budgets -------------------------------------------------------------------------------------------
    @property
    def max_bytes(self) -> int:
        return self.budgets.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self.budgets.max_bytes = value

    @property
    def max_inodes(self) -> int:
        return self.budgets.max_inodes

    @max_inodes.setter
    def max_inodes(self, value: int) -> None:
        self.budgets.max_inodes = value

    @property
    def used_bytes(self) -> int:
        """Allocated bytes of every layer in the store."""
        b = self.budgets
        return b.other_bytes + sum(o.bytes for o in b.owners.values())

    @property
    def used_inodes(self) -> int:
        b = self.budgets
        return b.other_inodes + sum(o.inodes for o in b.owners.values())

    def open_account(self, owner: str, max_mb: int, max_inodes: int) -> Account:
        """Start charging an episode of `owner` (budget `max_mb` / `max_inodes`); reserves the owner's floor.

        Raises:
            StoreQuotaError: the store cannot keep the floor for one more owner.
        """
        with self._lock:
            o = self.budgets.owners.setdefault(owner, OwnerUsage())
            if o.open == 0:
                o.open = 1
                b, n = self.budgets.committed()
                if b > self.budgets.max_bytes or n > self.budgets.max_inodes:
                    o.open = 0
                    if o.bytes <= 0 and o.inodes <= 0:
                        del self.budgets.owners[owner]
                    raise StoreQuotaError(
                        f"the SWE layer store cannot keep {self.budgets.floor_bytes >> 20} MiB / "
                        f"{self.budgets.floor_inodes} inodes for one more owner ({owner!r}): its quota of "
                        f"{self.budgets.max_bytes >> 20} MiB / {self.budgets.max_inodes} inodes is used or kept for "
                        f"{len(self.budgets.owners) - 1} others; close envs or discard snapshots, raise the quota, "
                        "or lower the floor (LayerStore(floor_mb=..., floor_inodes=...))"
                    )
            else:
                o.open += 1
        return Account(owner, max_mb << 20, max_inodes)

    def close_account(self, account: Account) -> None:
        """End an episode: its owner's floor is no longer kept for it (its live layers stay charged to it)."""
        with self._lock:
            if account.closed:
                return
            account.closed = True
            o = self.budgets.owners.get(account.owner)
            if o is None:
                return
            o.open -= 1
            if o.open <= 0 and o.bytes <= 0 and o.inodes <= 0:
                del self.budgets.owners[account.owner]

    def usage_of(self, layer: str) -> tuple[int, int]:
        """(allocated bytes, inodes) `layer` was charged (0, 0 for an unknown layer)."""
        got = self._usage.get(layer)
        return (got[0], got[1]) if got else (0, 0)

    # ----- layers --------------------------------------------------------------------------------------------
    def path(self, layer: str) -> str:
        """Absolute path of `layer`."""
        return str(self.root / "l" / layer)

    def exists(self, layer: str) -> bool:
        return os.path.isdir(self.path(layer))

    def new_id(self, prefix: str = "") -> str:
        return f"{prefix}{next(self._counter):x}"

    def staging(self) -> str:
        """A fresh empty directory to build a layer in; `commit` it when done."""
        return tempfile.mkdtemp(dir=self.root / "t", prefix="stage-")

    def commit(
        self,
        directory: str,
        layer: str | None = None,
        *,
        pin: bool = False,
        size: tuple[int, int] | None = None,
        discard_on_error: bool = True,
        account: Account | None = None,
    ) -> str:
        """Move `directory` (on the store's file system) into the store as an immutable layer; returns its id
        (``layer`` or a new one).

        `size` is its (allocated bytes, inodes) as it lies in the store when the caller measured them (else they
        are measured here). It is charged to `account` (None: a task layer, counted but never refused).

        Raises:
            StoreQuotaError: the layer would pass a budget (`envkit.envs.swe.store_quota`; `directory` is
                deleted unless `discard_on_error` is False).
        """
        if size is None:
            size = usage(directory)[1:]
        why = None
        with self._lock:
            if account is not None:
                why = self.budgets.refusal(account, *size)
                if why is None:
                    fs = os.statvfs(self.root)
                    why = self.budgets.disk_refusal(account.owner, fs.f_bavail * fs.f_frsize, fs.f_favail)
            if why is None:
                self.budgets.charge(account, *size)
        if why is not None:
            if discard_on_error:
                remove_tree(directory)
            raise StoreQuotaError(why)
        layer = layer or self.new_id()
        self._usage[layer] = (*size, account)
        os.rename(directory, self.path(layer))
        os.chmod(self.path(layer), 0o755)
        if pin:
            self._pinned.add(layer)
        return layer

    def trash(self, path: str) -> None:
        """Delete `path` off the critical path: rename it into the trash and let a background thread remove it."""
        dst = os.path.join(self.root, "x", f"{os.getpid()}-{next(self._counter):x}")
        os.rename(path, dst)
        with self._lock:
            self._trash.append(dst)
            if self._janitor is None or not self._janitor.is_alive():
                self._janitor = threading.Thread(target=self._empty_trash, name="envkit-swe-trash", daemon=True)
                self._janitor.start()

    def _empty_trash(self) -> None:
        while True:
            with self._lock:
                if not self._trash:
                    self._janitor = None
                    return
                path = self._trash.pop()
            remove_tree(path)

    def pin(self, layer: str) -> None:
        """Keep `layer` until the store closes, whatever its reference count (task base layers)."""
        self._pinned.add(layer)

    def incref(self, stack: tuple[str, ...]) -> None:
        with self._lock:
            for layer in stack:
                self._refs[layer] = self._refs.get(layer, 0) + 1

    def decref(self, stack: tuple[str, ...]) -> None:
        """Drop one reference to each layer of `stack`; delete layers nobody references (unless pinned)."""
        dead: list[str] = []
        with self._lock:
            for layer in stack:
                n = self._refs.get(layer, 0) - 1
                if n > 0:
                    self._refs[layer] = n
                    continue
                self._refs.pop(layer, None)
                if layer not in self._pinned:
                    dead.append(layer)
            for key in [k for k, v in self._merged.items() if v in dead or set(k) & set(dead)]:
                del self._merged[key]
        for layer in dead:
            self.delete(layer)

    def delete(self, layer: str) -> None:
        """Remove `layer` from disk now and give its space back to the quota (callers hold no reference)."""
        remove_tree(self.path(layer))
        with self._lock:
            got = self._usage.pop(layer, None)
            if got is not None:
                self.budgets.uncharge(got[2], got[0], got[1])

    def refcount(self, layer: str) -> int:
        return self._refs.get(layer, 0)

    def layer_count(self) -> int:
        """Layers on disk (for tests and leak checks)."""
        return sum(1 for _ in os.scandir(self.root / "l"))

    def merge(self, layers: tuple[str, ...], account: Account | None = None) -> str:
        """One new layer equal to `layers` applied bottom to top (cached per tuple of ids), charged to `account`
        (its files are hard links into `layers`: each is counted in full, a bound on what it holds)."""
        cached = self._merged.get(layers)
        if cached is not None and self.exists(cached):
            return cached
        out = self.staging()
        for layer in layers:
            merge_into(self.path(layer), out)
        merged = self.commit(out, self.new_id("m"), account=account)
        self._merged[layers] = merged
        return merged

    def import_tree(self, source: str | Path, *, layer: str | None = None, uid: int = 65534, gid: int = 65534) -> str:
        """Copy a directory into a new pinned layer owned by ``uid:gid`` (the sandbox user); returns its id."""
        if layer is not None and self.exists(layer):
            return layer
        out = self.staging()
        shutil.copytree(source, out, symlinks=True, dirs_exist_ok=True)
        chown_tree(out, uid, gid)
        return self.commit(out, layer, pin=True)

    def attach(self, tree: MountedTree) -> None:
        """Register a mounted tree: `close` unmounts it with the store."""
        self._trees.add(tree)

    def detach(self, tree: MountedTree) -> None:
        """Forget a tree that unmounted itself."""
        self._trees.discard(tree)

    def close(self) -> None:
        """Unmount every tree and delete the store (only a store this process created)."""
        if os.getpid() != self._pid:
            return  # inherited by a forked child: the parent owns the mounts and the directory
        for tree in list(self._trees):
            tree.close()
        if self._owned:
            remove_tree(str(self.root))
