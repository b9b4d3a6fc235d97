"""A work tree mounted from a stack of immutable layers plus a private upper dir (the SWE env's native snapshots).

An `OverlayTree` mounts a stack of `envkit.envs.swe.layers.LayerStore` layers read-only with a fresh, empty upper dir on
top. Edits land in the upper dir. `OverlayTree.freeze()` unmounts, moves the upper dir into the store as a new
layer and remounts with it on the stack: the returned stack *is* the snapshot. `OverlayTree.mount(stack)` is the
restore. Both are two mount syscalls plus a rename (volatile overlay mounts: no sync on unmount), about a
millisecond on any repository size. Stacks deeper than ``max_layers`` (or whose mount option string would not
fit a page) are collapsed into one merged layer above the pinned base layers (`LayerStore.merge`).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import tempfile
from pathlib import Path

from envkit.envs.swe.layer_files import (
    MAX_MOUNT_OPTIONS,
    OverlayError,
    WorkTreeLimitError,
    copy_layer,
    mount_overlay,
    mount_tmpfs,
    remove_tree,
    umount,
    usage,
)
from envkit.envs.swe.layers import Account, LayerStore
from envkit.errors import EnvkitError


class OverlayTree:
    """A work tree mounted from a stack of layers plus a private upper dir.

    Args:
        store: The layer store.
        pinned: How many bottom layers of every stack are never merged (the task's base layers).
        max_layers: Collapse stacks deeper than this (the kernel refuses ~500 and a page of options).
        uid: Owner of the work tree's root directory (the sandbox user).
        size_mb: Cap on what may be written into the tree between snapshots: the upper dir lives on a tmpfs of
            this size (writes beyond it fail with ENOSPC), and `freeze` copies it into the store instead of
            renaming it (keeping holes); `freeze` also refuses edits whose *apparent* size (sparse files count
            in full) is over it. None: the upper dir sits in the store (no cap; freeze is a rename).
        max_inodes: Files and directories the edits between two snapshots may hold (the scratch tmpfs has as
            many inodes; `freeze` refuses more).
        account: Whom the layers `freeze` makes are charged to (`LayerStore.open_account`; an attribute, so an
            env gives each episode its own). None: counted in the store's quota only.

    `freeze` that refuses or fails raises an `envkit.errors.EnvkitError` (`WorkTreeLimitError`,
    `envkit.envs.swe.layers.StoreQuotaError`, `OverlayError`) and leaves the tree mounted with its edits.
    """

    _ids = itertools.count()

    def __init__(
        self,
        store: LayerStore,
        *,
        pinned: int = 1,
        max_layers: int = 48,
        uid: int = 65534,
        size_mb: int | None = None,
        max_inodes: int = 200_000,
        account: Account | None = None,
    ) -> None:
        if max_layers < pinned + 1:
            raise ValueError(f"max_layers must be > pinned ({pinned}), got {max_layers}")
        self.store = store
        self.pinned = pinned
        self.max_layers = max_layers
        self.uid = uid
        self.dir = Path(tempfile.mkdtemp(dir=store.root / "t", prefix=f"tree{next(self._ids)}-"))
        os.chmod(self.dir, 0o711)
        self.merged = str(self.dir / "m")
        self.size_mb = size_mb
        self.max_inodes = max_inodes
        self.account = account
        self._scratch = str(self.dir / "s") if size_mb else None
        base = self._scratch or str(self.dir)
        self._upper = os.path.join(base, "u")
        self._work = os.path.join(base, "w")
        os.mkdir(self.merged)
        if self._scratch:
            os.mkdir(self._scratch)
        self._scratch_mounted = False
        self.stack: tuple[str, ...] = ()
        self.mounted = False
        store.attach(self)

    def _fresh_dirs(self) -> None:
        if self._scratch:  # a new tmpfs: the old edits are freed at once, the cap starts over
            if self._scratch_mounted:
                umount(self._scratch)
            assert self.size_mb is not None
            mount_tmpfs(self._scratch, self.size_mb, self.max_inodes + 16)
            self._scratch_mounted = True
        for d in (self._upper, self._work):
            if os.path.lexists(d):
                self.store.trash(d)
            os.mkdir(d)
        os.chown(self._upper, self.uid, self.uid)  # the merged root takes the upper dir's owner and mode
        os.chmod(self._upper, 0o755)

    def _do_mount(self) -> None:
        self._fresh_dirs()
        lower = [self.store.path(layer) for layer in reversed(self.stack)]
        mount_overlay(lower, self._upper, self._work, self.merged)
        self.mounted = True

    def _unmount(self) -> None:
        if self.mounted:
            umount(self.merged)
            self.mounted = False

    def mount(self, stack: tuple[str, ...]) -> None:
        """Show exactly the state `stack` (discarding unsnapshotted edits): this is restore."""
        missing = [layer for layer in stack if not self.store.exists(layer)]
        if missing:
            raise OverlayError(errno.ENOENT, f"layers {missing} are gone (discarded, or from another machine)")
        self._unmount()
        self.store.incref(stack)
        old, self.stack = self.stack, tuple(stack)
        self.store.decref(old)
        self._do_mount()

    def dirty(self) -> bool:
        """True when the upper dir holds edits not yet frozen into a layer."""
        with os.scandir(self._upper) as it:
            return any(True for _ in it)

    def freeze(self) -> tuple[str, ...]:
        """Make the current state an immutable stack and keep working on top of it; returns the stack.

        The caller owns one reference to the returned stack (release it with ``store.decref(stack)``).

        Raises:
            WorkTreeLimitError: the edits are over `size_mb` (apparent size) or `max_inodes`.
            StoreQuotaError: the store is full. On any error the tree stays mounted with its edits.
        """
        if self.dirty():
            apparent, allocated, inodes = usage(self._upper)
            limit = (self.size_mb or 0) << 20
            if (limit and apparent > limit) or inodes > self.max_inodes:
                raise WorkTreeLimitError(
                    f"the work tree's edits since the last snapshot are too large to snapshot: {apparent >> 20} MiB "
                    f"(apparent size: sparse files count in full) in {inodes} files and directories; the limits are "
                    f"{self.size_mb} MiB (Limits.repo_mb) and {self.max_inodes} (Limits.repo_inodes). Delete files "
                    "under /repo and snapshot again"
                )
            self._unmount()
            try:
                self._freeze_edits(None if self._scratch else (allocated, inodes))
            except BaseException as exc:
                self._remount_after_failure()
                if isinstance(exc, OSError) and not isinstance(exc, EnvkitError):  # e.g. ENAMETOOLONG deep down
                    raise OverlayError(
                        exc.errno or errno.EIO, f"the work tree could not be snapshotted: {exc}"
                    ) from exc
                raise
        self.store.incref(self.stack)
        return self.stack

    def _freeze_edits(self, size: tuple[int, int] | None) -> None:
        """`size`: the edits' (allocated bytes, inodes) where the upper dir lies in the store (None: the copy's
        real disk use is measured in the store)."""
        if self._scratch:
            staged = self.store.staging()
            try:
                real = copy_layer(self._upper, staged)  # its disk use in the store, measured while copying
                st = os.stat(self._upper)
                os.chmod(staged, stat.S_IMODE(st.st_mode))
                os.chown(staged, st.st_uid, st.st_gid)
            except BaseException:
                remove_tree(staged)
                raise
            layer = self.store.commit(staged, size=real, account=self.account)
        else:
            layer = self.store.commit(self._upper, size=size, discard_on_error=False, account=self.account)
        stack = (*self.stack, layer)
        if len(stack) > self.max_layers or self._options_len(stack) > MAX_MOUNT_OPTIONS:
            try:
                merged = self.store.merge(stack[self.pinned :], self.account)
            except BaseException:
                self.store.delete(layer)
                raise
            collapsed = (*stack[: self.pinned], merged)
            self.store.incref(collapsed)
            self.store.decref(self.stack)
            self.store.decref((layer,))  # unreferenced: deleted, the merged layer holds its content
            self.stack = collapsed
        else:
            self.store.incref((layer,))
            self.stack = stack
        self._do_mount()

    def _remount_after_failure(self) -> None:
        """Mount the tree again after a failed freeze: with its edits when the upper dir is still there."""
        if self.mounted:
            return
        if not os.path.isdir(self._upper):  # renamed into a layer that is gone: the snapshot's state is all left
            self._do_mount()
            return
        if os.path.lexists(self._work):  # a volatile mount's work dir cannot be mounted again
            if self._scratch:
                remove_tree(self._work)  # on the scratch tmpfs: the trash is another file system
            else:
                self.store.trash(self._work)
        os.mkdir(self._work)
        lower = [self.store.path(layer) for layer in reversed(self.stack)]
        mount_overlay(lower, self._upper, self._work, self.merged)
        self.mounted = True

    def _options_len(self, stack: tuple[str, ...]) -> int:
        return sum(len(self.store.path(layer)) + 1 for layer in stack) + 3 * len(str(self.dir)) + 120

    @property
    def upper(self) -> str:
        """Host path of the private upper dir (what the episode wrote since the last freeze)."""
        return self._upper

    def close(self) -> None:
        """Unmount and delete the tree's private dirs; release its layers."""
        try:
            self._unmount()
            if self._scratch_mounted and self._scratch:
                umount(self._scratch)
                self._scratch_mounted = False
        finally:
            self.store.decref(self.stack)
            self.stack = ()
            remove_tree(str(self.dir))
            self.store.detach(self)
