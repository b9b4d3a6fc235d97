"""The file-system side of overlay layers: mount syscalls, whiteouts and opaque directories, copying and merging layer directories, and handing a tree to the sandbox user.

A layer is a directory in overlayfs upper-dir format (whiteouts are 0/0 character devices, opaque directories
carry ``trusted.overlay.opaque=y``); `envkit.envs.swe.layers.LayerStore` keeps them and `envkit.envs.swe.overlay.OverlayTree`
mounts stacks of them. Mounting needs root (mount(2)); the error says so otherwise.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from envkit.errors import EnvkitError

OPAQUE_XATTR = "trusted.overlay.opaque"
MAX_MOUNT_OPTIONS = 4000  # the kernel copies mount options into one page
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
MNT_DETACH = 2
_MS_NOSUID, _MS_NODEV = 2, 4
_TMPFS_INODES = 1_000_000  # files a work tree's edits may hold


class OverlayError(EnvkitError, OSError):
    """An overlay mount or layer operation failed."""


class WorkTreeLimitError(EnvkitError, OSError):
    """A work tree's edits are over its size or inode budget and cannot be snapshotted (the message says which)."""


def mount_overlay(lower: list[str], upper: str, work: str, target: str) -> None:
    opts = f"lowerdir={':'.join(lower)},upperdir={upper},workdir={work},redirect_dir=off,index=off,metacopy=off"
    opts += ",xino=off,volatile"
    if libc.mount(b"overlay", target.encode(), b"overlay", 0, opts.encode()) != 0:
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


def umount(target: str) -> None:
    if libc.umount2(target.encode(), 0) != 0:
        err = ctypes.get_errno()
        if err == errno.EINVAL:  # not mounted
            return
        if libc.umount2(target.encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OverlayError(err, f"unmounting {target} failed: {os.strerror(err)}")


def mount_tmpfs(target: str, size_mb: int, inodes: int = _TMPFS_INODES) -> None:
    opts = f"size={size_mb}m,nr_inodes={inodes},mode=0711"
    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, opts.encode()) != 0:
        err = ctypes.get_errno()
        raise OverlayError(
            err, f"mounting the work tree's {size_mb} MiB scratch tmpfs on {target} failed: {os.strerror(err)}"
        )


def walk(root: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)`` top-down without recursion (a 100,000-level tree cannot raise RecursionError). Unlike
    os.walk, dirnames holds only real directories: every symlink is in filenames. Unreadable directories are
    skipped."""
    stack = [root]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        dirs = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        files = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
        yield top, dirs, files
        stack.extend(os.path.join(top, d) for d in reversed(dirs))


def remove_tree(path: str) -> None:
    """``rm -rf path`` without recursion and without following symlinks (errors ignored, like ignore_errors)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
    except OSError:
        return
    order = [d for d, _, _ in walk(path)]
    for top in reversed(order):
        try:
            with os.scandir(top) as it:
                names = [e.name for e in it if not e.is_dir(follow_symlinks=False)]
        except OSError:
            names = []
        for name in names:
            try:
                os.unlink(os.path.join(top, name))
            except OSError:
                pass
        try:
            os.rmdir(top)
        except OSError:
            pass


def usage(root: str) -> tuple[int, int, int]:
    """(apparent bytes, allocated bytes, inodes) of the tree under `root` (the root itself included).

    Allocated bytes are the real disk use, ``st_blocks * 512`` of every file *and directory* (a directory of
    20,000 entries takes megabytes on ext4; sparse files count only their data; a hard-linked file counts in
    full at each of its names, so the sum is a bound)."""
    apparent = allocated = inodes = 0
    for top, _, files in walk(root):
        inodes += 1
        try:
            allocated += os.lstat(top).st_blocks * 512
        except OSError:
            pass
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            inodes += 1
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated, inodes


def copy_sparse(src: str, dst: str) -> int:
    """Copy regular file `src` to new file `dst` keeping its holes (SEEK_DATA/SEEK_HOLE: a 500 MB ``truncate``
    costs nothing to copy); returns the disk `dst` takes (``st_blocks * 512``)."""
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            size = os.fstat(fin).st_size
            pos = 0
            while pos < size:
                try:
                    start = os.lseek(fin, pos, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # only a hole is left
                        break
                    raise
                end = os.lseek(fin, start, os.SEEK_HOLE)
                os.lseek(fin, start, os.SEEK_SET)
                os.lseek(fout, start, os.SEEK_SET)
                left = end - start
                while left > 0:
                    chunk = os.read(fin, min(left, 1 << 20))
                    if not chunk:
                        break
                    os.write(fout, chunk)
                    left -= len(chunk)
                pos = end
            os.ftruncate(fout, size)
            return os.fstat(fout).st_blocks * 512
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def copy_layer(src: str, dst: str) -> tuple[int, int]:
    """Copy overlay upper dir `src` into the empty directory `dst` (another file system), without recursion:
    whiteouts, opaque directories, modes, owners and times kept; holes of sparse files kept; FIFOs recreated;
    sockets and devices dropped. Returns the copy's real disk use, ``(allocated bytes, inodes)`` of everything
    under `dst` and `dst` itself, as `usage` would measure it (taken while copying: no second walk)."""
    dirs: list[tuple[str, os.stat_result]] = []  # directories whose mode and times are set last (bottom-up)
    allocated, inodes = 0, 1
    for top, dirnames, filenames in walk(src):
        rel = os.path.relpath(top, src)
        out_top = dst if rel == "." else os.path.join(dst, rel)
        for name in [*dirnames, *filenames]:
            s_path, d = os.path.join(top, name), os.path.join(out_top, name)
            st = os.lstat(s_path)
            mode = st.st_mode
            if is_whiteout(st):
                os.mknod(d, stat.S_IFCHR | 0o600, 0)
            elif stat.S_ISDIR(mode):
                os.mkdir(d, 0o700)
                if is_opaque(s_path):
                    os.setxattr(d, OPAQUE_XATTR, b"y", follow_symlinks=False)
                dirs.append((d, st))
            elif stat.S_ISREG(mode):  # data, mode and times; not overlay's own xattrs (origin, impure)
                allocated += copy_sparse(s_path, d)
                os.chmod(d, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
            elif stat.S_ISLNK(mode):
                os.symlink(os.readlink(s_path), d)
            elif stat.S_ISFIFO(mode):
                os.mkfifo(d, stat.S_IMODE(mode))
            else:
                continue
            inodes += 1
            if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # whiteouts, symlinks, FIFOs
                allocated += os.lstat(d).st_blocks * 512
            os.lchown(d, st.st_uid, st.st_gid)
            if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(d, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
    for d, st in reversed(dirs):
        os.chmod(d, stat.S_IMODE(st.st_mode))
        os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
        allocated += os.lstat(d).st_blocks * 512
    return allocated + os.lstat(dst).st_blocks * 512, inodes


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
        remove_tree(path)
    else:
        os.unlink(path)


def merge_into(src: str, dst: str) -> None:
    """Apply layer `src` on top of the merged layer `dst` (overlay semantics), without recursion."""
    pending = [(src, dst)]
    while pending:
        s_dir, d_dir = pending.pop()
        with os.scandir(s_dir) as it:
            entries = list(it)
        for e in entries:
            d = os.path.join(d_dir, e.name)
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
                pending.append((e.path, d))
            else:
                _remove(d)
                try:
                    os.link(e.path, d, follow_symlinks=False)
                except OSError:
                    shutil.copy2(e.path, d, follow_symlinks=False)


def chown_tree(root: str | Path, uid: int, gid: int) -> None:
    """``chown -R uid:gid root`` without following symlinks (or recursion)."""
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in walk(str(root)):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)
