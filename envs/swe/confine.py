"""The privileged half of the local sandbox: what root does before bubblewrap runs as the sandbox user.

`LocalBackend` starts each command like this (nothing the agent controls reaches a process with privileges):

1. The env process (root) forks. In the child, `drop_privileges` moves it into the sandbox's cgroups (when the
   kernel offers them), sets rlimits, drops every group, sets real/effective/saved uid and gid to the sandbox uid
   (all capabilities go with uid 0) and sets no-new-privs. It then execs ``/usr/bin/bwrap`` by absolute path
   with a fixed environment.
2. bubblewrap, now unprivileged, makes a new user namespace (sandbox uid mapped to itself, no other ids), in
   which it cannot create another (``--disable-userns``), plus new mount, PID, network, IPC, UTS and cgroup
   namespaces, drops every capability (``--cap-drop ALL``, bounding set included) and runs bash.

An unprivileged bubblewrap can only bind directories the sandbox uid can reach. `HostViews` makes the ones it
cannot (the host Python under ``/root/.pyenv``, a test's private temp dir) reachable: root bind-mounts them
read-only under a world-traversable directory, and bubblewrap binds that view to the original path inside.

`Cgroups` gives each backend its own pids and memory cgroup (v1 or v2, where the kernel offers and lets root
write them); where it cannot, the reason is recorded in `Cgroups.reason` and the per-namespace RLIMIT_NPROC
(counted per user namespace) and per-process RLIMIT_AS remain the limits.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import resource
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 2, 4, 32, 4096, 16384
_MNT_DETACH = 2
_PR_SET_NO_NEW_PRIVS = 38
TRUSTED_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"  # how helpers are found: never the agent's PATH


def traversable(path: str, uid: int, gid: int) -> bool:
    """True when `uid`/`gid` (no supplementary groups) can search every directory down to and including `path`."""
    cur = "/"
    for part in [p for p in path.split("/") if p] + [""]:
        try:
            st = os.stat(cur)
        except OSError:
            return False
        bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
        if not st.st_mode & bit:
            return False
        cur = os.path.join(cur, part)
    return True


def _mount(src: str, dst: str, flags: int) -> None:
    if _libc.mount(src.encode(), dst.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bind-mounting {src} on {dst} failed: {os.strerror(err)}")


def bind_readonly(src: str, dst: str) -> None:
    """``mount --rbind -o ro,nosuid,nodev src dst`` (two syscalls: bind, then remount read-only)."""
    _mount(src, dst, _MS_BIND | _MS_REC)
    _mount("none", dst, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def bind(src: str, dst: str) -> None:
    """``mount --bind src dst`` (read-write, as the source is)."""
    _mount(src, dst, _MS_BIND)


def umount(dst: str) -> None:
    _libc.umount2(dst.encode(), _MNT_DETACH)


class HostViews:
    """World-traversable read-only bind mounts of host directories the sandbox uid cannot reach (one per process).

    `source(path)` returns what bubblewrap should bind: `path` itself when the sandbox uid can reach it, else a
    view of it. Views are unmounted at interpreter exit; those of dead processes are removed on first use.
    """

    _lock = threading.Lock()
    _by_pid: dict[int, HostViews] = {}

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix=f"envkit-swe-views-{os.getpid()}-")
        os.chmod(self.root, 0o755)
        self._views: dict[str, str] = {}
        self._ids = itertools.count()
        atexit.register(self.close)

    @classmethod
    def get(cls) -> HostViews:
        with cls._lock:
            views = cls._by_pid.get(os.getpid())
            if views is None:
                cls.cleanup_stale()
                views = cls._by_pid[os.getpid()] = cls()
            return views

    @staticmethod
    def cleanup_stale() -> None:
        for d in Path(tempfile.gettempdir()).glob("envkit-swe-views-*"):
            try:
                pid = int(d.name.split("-")[3])
                os.kill(pid, 0)
                continue
            except ProcessLookupError:
                pass
            except (ValueError, IndexError, PermissionError):
                continue
            _remove_views(d)

    def temporary(self, path: str) -> str:
        """A fresh read-write bind of `path` (a work tree) for one command; `release` it afterwards."""
        dst = os.path.join(self.root, f"t{next(self._ids)}")
        os.mkdir(dst)
        try:
            bind(path, dst)
        except OSError:
            os.rmdir(dst)
            raise
        return dst

    def release(self, view: str) -> None:
        umount(view)
        os.rmdir(view)

    def source(self, path: str, uid: int, gid: int) -> str:
        """`path` if `uid` can reach it, else a read-only view of it (made once)."""
        if traversable(path, uid, gid):
            return path
        with self._lock:
            view = self._views.get(path)
            if view is None:
                view = os.path.join(self.root, f"v{next(self._ids)}")
                os.mkdir(view)
                bind_readonly(path, view)
                self._views[path] = view
            return view

    def close(self) -> None:
        if self._by_pid.get(os.getpid()) is not self:
            return
        self._views.clear()
        _remove_views(Path(self.root))


def _remove_views(root: Path) -> None:
    """Detach every view under `root` and remove the (then empty) directories; never deletes through a mount."""
    if not root.is_dir():
        return
    for sub in root.iterdir():
        umount(str(sub))
        try:
            sub.rmdir()
        except OSError:
            pass
    try:
        root.rmdir()
    except OSError:
        pass


def _remove_stale_cgroups(parent: Path) -> None:
    """Remove empty ``envkit-swe-<pid>-<n>`` cgroups of processes that are gone (killed before `close`)."""
    try:
        entries = list(parent.glob("envkit-swe-*"))
    except OSError:
        return
    for d in entries:
        try:
            os.kill(int(d.name.split("-")[2]), 0)
            continue
        except ProcessLookupError:
            pass
        except (ValueError, IndexError, PermissionError):
            continue
        try:
            d.rmdir()
        except OSError:
            pass


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for `controller` (v1) or of the unified hierarchy (controller="")."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and names == ""):
            return path
    return None


class Cgroups:
    """A pids + memory cgroup for one backend (each command's processes join it; see the module docstring).

    Args:
        pids_max: ``pids.max``.
        memory_bytes: Memory limit of everything in the sandbox together (page cache and /tmp included).

    Attributes:
        dirs: The cgroup directories made ({} when none).
        reason: Why a controller is missing ("" when both are on).
    """

    _ids = itertools.count()

    def __init__(self, pids_max: int, memory_bytes: int) -> None:
        self.dirs: dict[str, str] = {}
        reasons: list[str] = []
        name = f"envkit-swe-{os.getpid()}-{next(self._ids)}"
        base = Path("/sys/fs/cgroup")
        if (base / "cgroup.controllers").exists():  # cgroup v2
            own = _own_cgroup("") or "/"
            parent = base / own.lstrip("/")
            enabled = (parent / "cgroup.subtree_control").read_text().split() if parent.exists() else []
            for ctl, limit_file, value in (("pids", "pids.max", pids_max), ("memory", "memory.max", memory_bytes)):
                if ctl not in enabled:
                    reasons.append(f"{ctl}: not enabled in {parent}/cgroup.subtree_control (cgroup v2)")
                    continue
                self._make(ctl, parent / name, {limit_file: value}, reasons)
        else:
            for ctl, files in (
                ("pids", {"pids.max": pids_max}),
                ("memory", {"memory.limit_in_bytes": memory_bytes, "memory.memsw.limit_in_bytes": memory_bytes}),
            ):
                mine = _own_cgroup(ctl)
                root = base / ctl
                if mine is None or not root.is_dir():
                    reasons.append(f"{ctl}: no cgroup v1 hierarchy mounted at {root}")
                    continue
                self._make(ctl, root / mine.lstrip("/") / name, files, reasons)
        self.reason = "; ".join(reasons)
        atexit.register(self.close)

    def _make(self, ctl: str, d: Path, files: dict[str, int], reasons: list[str]) -> None:
        _remove_stale_cgroups(d.parent)
        if str(d) in self.dirs.values():  # v2: one directory for both controllers
            self.dirs[ctl] = str(d)
            self._limit(d, files, reasons, ctl)
            return
        try:
            d.mkdir()
        except OSError as exc:
            reasons.append(f"{ctl}: cannot create {d}: {exc.strerror}")
            return
        self.dirs[ctl] = str(d)
        self._limit(d, files, reasons, ctl)

    @staticmethod
    def _limit(d: Path, files: dict[str, int], reasons: list[str], ctl: str) -> None:
        for fname, value in files.items():
            try:
                (d / fname).write_text(str(value))
            except OSError as exc:
                if not fname.startswith("memory.memsw"):  # swap accounting is often off; RAM limit still holds
                    reasons.append(f"{ctl}: cannot set {fname}: {exc.strerror}")

    def procs_files(self) -> list[bytes]:
        """Paths of the ``cgroup.procs`` files a child writes itself into (encoded, for the fork child)."""
        return [os.path.join(d, "cgroup.procs").encode() for d in dict.fromkeys(self.dirs.values())]

    def kill_all(self, wait_s: float = 5.0) -> None:
        """SIGKILL whatever is left in the cgroups (a command's strays), until they are empty or ``wait_s`` passed.

        One pass is not enough: a process can fork between the listing and its kill (a fork bomb does), and a killed
        process stays listed until the scheduler lets it exit (seconds on a loaded machine). So the listing is read
        again and killed again until nothing is left."""
        deadline = time.monotonic() + wait_s
        while True:
            left = 0
            for d in dict.fromkeys(self.dirs.values()):
                try:
                    pids = Path(d, "cgroup.procs").read_text().split()
                except OSError:
                    continue
                left += len(pids)
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
            if not left or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def close(self) -> None:
        self.kill_all()
        for d in dict.fromkeys(self.dirs.values()):
            try:
                os.rmdir(d)
            except OSError:
                pass
        self.dirs = {}


def drop_privileges(uid: int, rlimits: dict[int, int], cgroup_procs: list[bytes]) -> None:
    """In a forked child of root: join cgroups, set rlimits, become `uid` with no groups or capabilities, no-new-privs.

    Runs between fork and exec (`subprocess.Popen(preexec_fn=...)`): no allocation-heavy work, no locks.
    """
    pid = str(os.getpid()).encode()
    for path in cgroup_procs:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)
    for which, value in rlimits.items():
        resource.setrlimit(which, (value, value))
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
