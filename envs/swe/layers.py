"""Immutable overlay layers and work trees mounted from stacks of them (the SWE env's native snapshots).

A *layer* is a directory in overlayfs upper-dir format (whiteouts are 0/0 character devices, opaque
directories carry ``trusted.overlay.opaque=y``). Layers never change after they enter the `LayerStore`, so a
stack of layer ids (bottom first) names a file-system state for good.

An `OverlayTree` mounts such a stack read-only with a fresh, empty upper dir on top. Edits land in the upper
dir. `OverlayTree.freeze()` unmounts, moves the upper dir into the store as a new layer and remounts with it on
the stack: the returned stack *is* the snapshot. `OverlayTree.mount(stack)` is the restore. Both are two mount
syscalls plus a rename (volatile overlay mounts: no sync on unmount), about a millisecond on any repository size.

Stacks deeper than ``max_layers`` (or whose mount option string would not fit a page) are collapsed: every
layer above the pinned base layers is merged into one new layer (whiteouts and opaque directories are applied
in order; files are hard links, since layers are immutable). Layers carry reference counts; a layer whose count
drops to zero is deleted. Needs root (mount(2)); the error says so otherwise.

Example:
    >>> store = LayerStore.default()                  # doctest: +SKIP
    >>> base = store.import_tree("/path/to/repo")     # doctest: +SKIP
    >>> tree = OverlayTree(store, pinned=1)           # doctest: +SKIP
    >>> tree.mount((base,)); s = tree.freeze()        # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import itertools
import multiprocessing.util
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from envkit.errors import EnvkitError

OPAQUE_XATTR = "trusted.overlay.opaque"
_MAX_OPTIONS = 4000  # the kernel copies mount options into one page
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4
_TMPFS_INODES = 1_000_000  # files a work tree's edits may hold


class OverlayError(EnvkitError, OSError):
    """An overlay mount or layer operation failed."""


def _mount_overlay(lower: list[str], upper: str, work: str, target: str) -> None:
    opts = f"lowerdir={':'.join(lower)},upperdir={upper},workdir={work},redirect_dir=off,index=off,metacopy=off"
    opts += ",xino=off,volatile"
    if _libc.mount(b"overlay", target.encode(), b"overlay", 0, opts.encode()) != 0:
        err = ctypes.get_errno()
        hint = (
            " The SWE env's local backend mounts overlayfs and needs root (CAP_SYS_ADMIN): run as root, or use "
            "backend='docker'."
            if err == errno.EPERM
            else " If the store sits on a file system overlayfs cannot use as upper dir (e.g. overlayfs itself), "
            "set ENVKIT_SWE_STORE to a directory on ext4/xfs/tmpfs (e.g. /dev/shm)."
            if err == errno.EINVAL
            else ""
        )
        raise OverlayError(err, f"mounting overlay on {target} failed: {os.strerror(err)}.{hint}")


def _umount(target: str) -> None:
    if _libc.umount2(target.encode(), 0) != 0:
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # not mounted
            return
        if _libc.umount2(target.encode(), _MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OverlayError(err, f"unmounting {target} failed: {os.strerror(err)}")


def _mount_tmpfs(target: str, size_mb: int) -> None:
    opts = f"size={size_mb}m,nr_inodes={_TMPFS_INODES},mode=0711"
    if _libc.mount(b"tmpfs", target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts.encode()) != 0:
        err = ctypes.get_errno()
        raise OverlayError(
            err, f"mounting the work tree's {size_mb} MiB scratch tmpfs on {target} failed: {os.strerror(err)}"
        )


def copy_layer(src: str, dst: str) -> None:
    """Copy overlay upper dir `src` into the empty directory `dst` (another file system): whiteouts, opaque
    directories, modes, owners and times kept; FIFOs recreated; sockets and devices dropped."""
    with os.scandir(src) as it:
        entries = list(it)
    for e in entries:
        d = os.path.join(dst, e.name)
        st = e.stat(follow_symlinks=False)
        mode = st.st_mode
        if is_whiteout(st):
            os.mknod(d, stat.S_IFCHR | 0o600, 0)
        elif stat.S_ISDIR(mode):
            os.mkdir(d)
            if is_opaque(e.path):
                os.setxattr(d, OPAQUE_XATTR, b"y", follow_symlinks=False)
            copy_layer(e.path, d)
            os.chmod(d, stat.S_IMODE(mode))
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif stat.S_ISREG(mode):  # data, mode and times; not overlay's own xattrs (origin, impure)
            shutil.copyfile(e.path, d, follow_symlinks=False)
            os.chmod(d, stat.S_IMODE(mode))
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
        elif stat.S_ISLNK(mode):
            os.symlink(os.readlink(e.path), d)
        elif stat.S_ISFIFO(mode):
            os.mkfifo(d, stat.S_IMODE(mode))
        else:
            continue
        os.lchown(d, st.st_uid, st.st_gid)
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(d, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))


def is_whiteout(st: os.stat_result) -> bool:
    """True for an overlayfs whiteout (a 0/0 character device)."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def is_opaque(path: str | Path) -> bool:
    """True when directory `path` is an opaque overlay directory (hides everything below it)."""
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _remove(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _merge_into(src: str, dst: str) -> None:
    """Apply layer `src` on top of the merged layer `dst` (overlay semantics, recursive)."""
    with os.scandir(src) as it:
        entries = list(it)
    for e in entries:
        d = os.path.join(dst, e.name)
        st = e.stat(follow_symlinks=False)
        if is_whiteout(st):
            _remove(d)
            os.mknod(d, stat.S_IFCHR | 0o600, 0)
        elif stat.S_ISDIR(st.st_mode):
            if is_opaque(e.path):
                _remove(d)
                os.mkdir(d)
                os.setxattr(d, OPAQUE_XATTR, b"y", follow_symlinks=False)
            elif not (os.path.isdir(d) and not os.path.islink(d)):
                _remove(d)
                os.mkdir(d)
            os.chmod(d, stat.S_IMODE(st.st_mode))
            os.chown(d, st.st_uid, st.st_gid)
            _merge_into(e.path, d)
        else:
            _remove(d)
            try:
                os.link(e.path, d, follow_symlinks=False)
            except OSError:
                shutil.copy2(e.path, d, follow_symlinks=False)


class LayerStore:
    """A directory of immutable layers with reference counts.

    Args:
        root: Where layers live (created; a local file system that can hold overlayfs upper dirs: ext4, xfs,
            tmpfs; not overlayfs itself). Default: a private temporary directory under ``$ENVKIT_SWE_STORE`` (else
            the system temp dir), removed at interpreter exit.
    """

    _default: LayerStore | None = None
    _lock = threading.Lock()

    def __init__(self, root: str | Path | None = None) -> None:
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
        self._trees: set[OverlayTree] = set()
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
                _libc.umount2(point.encode(), _MNT_DETACH)
            shutil.rmtree(d, ignore_errors=True)
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

    def commit(self, directory: str, layer: str | None = None, *, pin: bool = False) -> str:
        """Move `directory` into the store as an immutable layer; returns its id (``layer`` or a new one)."""
        layer = layer or self.new_id()
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
            shutil.rmtree(path, ignore_errors=True)

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
            shutil.rmtree(self.path(layer), ignore_errors=True)

    def refcount(self, layer: str) -> int:
        return self._refs.get(layer, 0)

    def layer_count(self) -> int:
        """Layers on disk (for tests and leak checks)."""
        return sum(1 for _ in os.scandir(self.root / "l"))

    def merge(self, layers: tuple[str, ...]) -> str:
        """One new layer equal to `layers` applied bottom to top (cached per tuple of ids)."""
        cached = self._merged.get(layers)
        if cached is not None and self.exists(cached):
            return cached
        out = self.staging()
        for layer in layers:
            _merge_into(self.path(layer), out)
        merged = self.commit(out, self.new_id("m"))
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

    def close(self) -> None:
        """Unmount every tree and delete the store (only a store this process created)."""
        if os.getpid() != self._pid:
            return  # inherited by a forked child: the parent owns the mounts and the directory
        for tree in list(self._trees):
            tree.close()
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)


def chown_tree(root: str | Path, uid: int, gid: int) -> None:
    """``chown -R uid:gid root`` without following symlinks."""
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


class OverlayTree:
    """A work tree mounted from a stack of layers plus a private upper dir.

    Args:
        store: The layer store.
        pinned: How many bottom layers of every stack are never merged (the task's base layers).
        max_layers: Collapse stacks deeper than this (the kernel refuses ~500 and a page of options).
        uid: Owner of the work tree's root directory (the sandbox user).
        size_mb: Cap on what may be written into the tree between snapshots: the upper dir lives on a tmpfs of
            this size (writes beyond it fail with ENOSPC), and `freeze` copies it into the store instead of
            renaming it. None: the upper dir sits in the store (no cap; freeze is a rename).
    """

    _ids = itertools.count()

    def __init__(
        self, store: LayerStore, *, pinned: int = 1, max_layers: int = 48, uid: int = 65534, size_mb: int | None = None
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
        store._trees.add(self)

    def _fresh_dirs(self) -> None:
        if self._scratch:  # a new tmpfs: the old edits are freed at once, the cap starts over
            if self._scratch_mounted:
                _umount(self._scratch)
            assert self.size_mb is not None
            _mount_tmpfs(self._scratch, self.size_mb)
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
        _mount_overlay(lower, self._upper, self._work, self.merged)
        self.mounted = True

    def _unmount(self) -> None:
        if self.mounted:
            _umount(self.merged)
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
        """
        if self.dirty():
            self._unmount()
            if self._scratch:
                staged = self.store.staging()
                copy_layer(self._upper, staged)
                st = os.stat(self._upper)
                os.chmod(staged, stat.S_IMODE(st.st_mode))
                os.chown(staged, st.st_uid, st.st_gid)
                layer = self.store.commit(staged)
            else:
                layer = self.store.commit(self._upper)
            stack = (*self.stack, layer)
            if len(stack) > self.max_layers or self._options_len(stack) > _MAX_OPTIONS:
                merged = self.store.merge(stack[self.pinned :])
                collapsed = (*stack[: self.pinned], merged)
                self.store.incref(collapsed)
                self.store.decref(self.stack)
                self.store.decref((layer,))  # unreferenced: deleted, the merged layer holds its content
                self.stack = collapsed
            else:
                self.store.incref((layer,))
                self.stack = stack
            self._do_mount()
        self.store.incref(self.stack)
        return self.stack

    def _options_len(self, stack: tuple[str, ...]) -> int:
        return sum(len(self.store.path(layer)) + 1 for layer in stack) + 3 * len(str(self.dir)) + 120

    def close(self) -> None:
        """Unmount and delete the tree's private dirs; release its layers."""
        try:
            self._unmount()
            if self._scratch_mounted and self._scratch:
                _umount(self._scratch)
                self._scratch_mounted = False
        finally:
            self.store.decref(self.stack)
            self.stack = ()
            shutil.rmtree(self.dir, ignore_errors=True)
            self.store._trees.discard(self)
