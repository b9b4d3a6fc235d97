"""Isolation of the code sandbox server: network, mount and SysV IPC namespaces, read-only mounts, hidden
paths, ``/proc`` with ``hidepid``, per-slot cgroups.

Stdlib only. `envs/code/forkserver.py` loads this file by path (it runs as ``python -I forkserver.py``, and its
directory must stay off ``sys.path`` so that checks cannot import this package's modules). `slot_cgroups` and
`isolate` run once, as root, before the server forks any check; `slot_namespaces` then makes each slot its own
network and IPC namespace (a check joins its slot's with two ``setns`` calls, microseconds, where creating a
namespace per check would cost milliseconds); `remove_ipc_objects` runs in a slot's IPC namespace after each of
its checks.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
IPC_RMID = 0
#: Per-namespace SysV IPC limits: at most 64 MiB per shm segment, 256 MiB in all, few queues.
IPC_LIMITS = {"shmmax": 64 << 20, "shmall": (256 << 20) // 4096, "shmmni": 64, "msgmni": 16, "msgmnb": 16384}
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
CLONE_NEWPID = 0x20000000
#: Directories that checks never need (hidden unless the interpreter lives under one: then only its subtree shows).
HIDE_ROOTS = ("/opt", "/work", "/home", "/srv", "/mnt", "/media", "/var/cache", "/var/lib", "/var/tmp", "/var/log")
_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if x is None else x.encode() for x in (src, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def pidns_works() -> bool:
    """Whether this process may create PID namespaces (probed in a throw-away child)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if _libc.unshare(CLONE_NEWPID) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def isolate(work_root: str, tmpfs_mb: int, hide: list[str] | None = None) -> dict[str, Any]:
    """Enter new network + mount namespaces, make every mount read-only, hide `hide` and `HIDE_ROOTS`, remount
    ``/proc`` with ``hidepid``, mount a tmpfs on `work_root`."""
    root = os.geteuid() == 0
    report: dict[str, Any] = {
        "root": root, "netns": False, "readonly_fs": False, "uid_drop": root, "ipcns": False, "pidns": False,
    }  # fmt: skip
    if not root:
        report["why"] = "not root: cannot create namespaces or switch to unprivileged uids"
        return report
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare(CLONE_NEWNET|CLONE_NEWNS)")
    except OSError as exc:
        report["why"] = str(exc)
        return report
    report["netns"] = True
    report["pidns"] = pidns_works()
    try:  # a private SysV IPC namespace with small limits (segments outlive processes: removed after checks)
        _check(_libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        _write_ipc_limits()
        report["ipcns"] = True
    except OSError as exc:
        report["ipc_why"] = str(exc)
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    failed = []
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        target = fields[4].encode().decode("unicode_escape")
        opts = fields[5].split(",")
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for o in opts:
            flags |= _MOUNT_FLAGS.get(o, 0)
        try:
            _mount(None, target, None, flags, None)
        except OSError as exc:
            failed.append(f"{target}: {exc.strerror}")
    os.makedirs(work_root, exist_ok=True)
    _mount("tmpfs", work_root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,mode=0711")
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
    needed = sorted(p for p in paths if p and os.path.isabs(p) and os.path.exists(p))
    roots = [r for r in HIDE_ROOTS if os.path.isdir(r) and not os.path.islink(r)]
    private = {r for r in roots if any(n == r or n.startswith(r + "/") for n in needed)}
    report["exposed"] = _expose(needed, work_root, private)
    report["hidden"] = _hide([r for r in roots if r not in private] + list(hide or ()))
    try:  # a /proc of our own: checks see only their own processes (not the server, the judge, the host's)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible")
        report["hidepid"] = True
    except OSError as exc:
        report["hidepid"] = False
        report["hidepid_why"] = str(exc)
    probe = os.path.join("/", ".envkit_ro_probe")
    try:
        with open(probe, "w"):
            pass
        os.unlink(probe)
        report["why"] = "remounting / read-only failed: " + "; ".join(failed[:5])
    except OSError:
        report["readonly_fs"] = True
    report["ro_failures"] = failed[:10]
    return report


def _write_ipc_limits() -> None:
    for name, value in IPC_LIMITS.items():
        with open(f"/proc/sys/kernel/{name}", "w") as f:
            f.write(str(value))


def slot_namespaces(slots: int) -> list[tuple[int, int]]:
    """A network namespace (only a down loopback) and a SysV IPC namespace (with `IPC_LIMITS`) per slot.

    Returns ``(net fd, ipc fd)`` per slot (O_CLOEXEC; holding them keeps the namespaces alive); this process
    stays in its own namespaces. Checks run one at a time per slot, so no two running checks share a
    namespace: one cannot reach another's abstract unix sockets, nor lose its IPC objects to another's
    clean-up. A slot's sockets die with its check's processes (its PID namespace ends them all), and its IPC
    objects are removed after each check (`remove_ipc_objects` in the slot's namespace).
    """
    own_net = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    own_ipc = os.open("/proc/self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
    out: list[tuple[int, int]] = []
    try:
        for _ in range(slots):
            _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC), "unshare(CLONE_NEWNET|CLONE_NEWIPC) for a slot")
            try:
                _write_ipc_limits()
                net = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                ipc = os.open("/proc/self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
                out.append((net, ipc))
            finally:
                enter_namespaces(own_net, own_ipc)
    except OSError:
        for fds in out:
            for fd in fds:
                os.close(fd)
        raise
    finally:
        os.close(own_net)
        os.close(own_ipc)
    return out


def enter_namespaces(net_fd: int, ipc_fd: int) -> None:
    """Join the network and IPC namespaces behind these fds (``setns``; needs CAP_SYS_ADMIN)."""
    _check(_libc.setns(net_fd, CLONE_NEWNET), "setns(CLONE_NEWNET)")
    _check(_libc.setns(ipc_fd, CLONE_NEWIPC), "setns(CLONE_NEWIPC)")


def remove_ipc_objects() -> int:
    """Remove every SysV shared memory segment, message queue and semaphore set of this IPC namespace."""
    removed = 0
    for kind, ctl in (("shm", _libc.shmctl), ("msg", _libc.msgctl), ("sem", _libc.semctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ipc_id = int(row.split()[1])
            ok = ctl(ipc_id, 0, IPC_RMID) == 0 if kind == "sem" else ctl(ipc_id, IPC_RMID, None) == 0
            removed += ok
    return removed


def _hide(paths: list[str]) -> list[str]:
    """Cover each existing path: a directory with an empty read-only tmpfs, a file with ``/dev/null``."""
    done = []
    for p in paths:
        try:
            if os.path.isdir(p):
                _mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0755")
            elif os.path.exists(p):
                _mount("/dev/null", p, None, MS_BIND, None)
                _mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
            else:
                continue
        except OSError:
            continue
        done.append(p)
    return done


def slot_cgroups(
    tag: str, slots: int, memory_mb: int, pids_max: int
) -> tuple[list[list[int]], list[int], list[Any], dict[str, Any]]:
    """Make a memory, a pids and a CPU-accounting cgroup per slot (cgroup v1 controllers, else v2) under this
    process's own cgroups.

    Returns ``(per slot: fds of the cgroups' process files, opened for writing -- a check's init writes "0" to
    join; per slot: an fd of its CPU usage file (`cpu_usage_s` reads it; empty without one); what
    `remove_cgroups` needs; a report)``. Missing controllers are skipped (the report says why).
    """
    fds: list[list[int]] = [[] for _ in range(slots)]
    usage: list[int] = []
    made: list[Any] = []
    report: dict[str, Any] = {"memory": False, "pids": False, "cpu": False}
    try:
        with open("/proc/self/cgroup") as f:
            lines = [ln.strip().split(":", 2) for ln in f if ln.strip()]
    except OSError as exc:
        report["why"] = str(exc)
        return fds, usage, made, report
    own = {c: path for _, ctrls, path in lines for c in ctrls.split(",") if c}
    v2 = next((path for h, ctrls, path in lines if h == "0" and ctrls == ""), None)
    mine: set[str] = set()
    for ctrl, files in (
        ("memory", {"memory.limit_in_bytes": memory_mb << 20, "memory.memsw.limit_in_bytes": memory_mb << 20}),
        ("pids", {"pids.max": pids_max}),
        ("cpuacct", {}),
    ):
        stat_file = "cpuacct.usage"
        if ctrl in own:
            base = f"/sys/fs/cgroup/{ctrl}{own[ctrl]}"
            if ctrl == "cpuacct" and not os.path.isdir(base):  # mounted as cpu,cpuacct
                base = next((f"/sys/fs/cgroup/{d}{own[ctrl]}" for d in ("cpu,cpuacct", "cpuacct,cpu")), base)
        elif v2 is not None and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            base = f"/sys/fs/cgroup{v2}"
            files = {"memory.max": memory_mb << 20, "memory.swap.max": 0} if ctrl == "memory" else files
            stat_file = "cpu.stat"
        else:
            report[f"{ctrl}_why"] = "no such cgroup controller"
            continue
        try:
            parent = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            report[f"{ctrl}_why"] = str(exc)
            continue
        try:
            slot_fds = []
            for k in range(slots):
                name = f"envkit-{tag}-{k}"
                if f"{base}/{name}" not in mine:  # cgroup v2: one directory serves every controller
                    os.mkdir(name, 0o755, dir_fd=parent)
                    made.append((parent, name))
                    mine.add(f"{base}/{name}")
                for fname, value in files.items():
                    try:
                        fd = os.open(f"{name}/{fname}", os.O_WRONLY, dir_fd=parent)
                    except FileNotFoundError:
                        continue
                    try:
                        os.write(fd, str(value).encode())
                    finally:
                        os.close(fd)
                slot_fds.append(os.open(f"{name}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=parent))
                if ctrl == "cpuacct":
                    usage.append(os.open(f"{name}/{stat_file}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=parent))
        except OSError as exc:
            report[f"{ctrl}_why"] = str(exc)
            if ctrl == "cpuacct":
                usage.clear()
            continue
        for k, fd in enumerate(slot_fds):
            fds[k].append(fd)
        report["cpu" if ctrl == "cpuacct" else ctrl] = True
    return fds, usage, made, report


def cpu_usage_s(fd: int) -> float:
    """CPU seconds used so far by every process that ever joined the cgroup behind `fd` (its usage file)."""
    raw = os.pread(fd, 4096, 0).decode()
    if raw.startswith("usage_usec"):  # cgroup v2 cpu.stat
        return int(raw.split("\n", 1)[0].split()[1]) / 1e6
    return int(raw.strip() or 0) / 1e9


def remove_cgroups(made: list[Any]) -> None:
    """Remove the slots' cgroups (their processes are gone by then)."""
    for parent, name in reversed(made):
        try:
            os.rmdir(name, dir_fd=parent)
        except OSError:
            pass


def _expose(paths: list[str], work_root: str, private: set[str] | None = None) -> list[str]:
    """Let unprivileged checks reach the Python installation when it sits under a private directory.

    Python is often installed under ``/root`` (mode 0700, e.g. pyenv), which the checks' uids cannot traverse.
    For each such directory D on the way to a needed path (in this mount namespace only): keep the original D
    at a root-only place, mount a read-only tmpfs (mode 0711) on D, and bind back only the needed child of D.
    Nothing else of D becomes visible.
    """
    hidden = os.path.join(work_root, ".orig")
    os.makedirs(hidden, mode=0o700, exist_ok=True)
    covered: dict[str, str] = {}
    done: list[str] = []
    for path in paths:
        parts = path.rstrip("/").split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i]) or "/"
            if d not in covered and d not in (private or ()) and os.stat(d).st_mode & 0o001:
                continue
            if d not in covered:
                keep = os.path.join(hidden, str(len(covered)))
                os.mkdir(keep, 0o700)
                _mount(d, keep, None, MS_BIND | MS_REC, None)
                _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0711")
                covered[d] = keep
            child = parts[i]
            target, src = os.path.join(d, child), os.path.join(covered[d], child)
            if os.path.exists(target) or not os.path.exists(src):
                continue
            _mount(d, d, None, MS_REMOUNT | MS_NOSUID | MS_NODEV, "mode=0711")  # writable again while adding
            if os.path.isdir(src):
                os.mkdir(target, 0o755)
            else:
                open(target, "w").close()
            _mount(src, target, None, MS_BIND | MS_REC, None)
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
            _mount(None, d, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0711")
            done.append(target)
    return done
