"""The code sandbox server: a warm fork server that runs untrusted Python as unprivileged, isolated processes.

Run by `envs.code.sandbox.Sandbox` as ``python -I forkserver.py --slots N ...`` (stdlib only). At start, once:

1. (as root) it enters a new network namespace (only a down loopback: no network at all, not even localhost)
   and a new mount namespace in which every mount is remounted read-only and a small tmpfs is mounted on the
   work root (default ``/tmp``, mode 0711): checks can write only inside their own directory. Made once and
   reused by every check (a network namespace costs ~30 ms to create).
2. it imports the modules that checks commonly need (``--preload``), so that forked checks start warm.

Then, per check (a length-prefixed JSON request on stdin): a fresh directory owned by the slot's uid, then a
``fork()``; the child calls ``setsid``, sets rlimits (CPU, address space, processes, file size, open files,
core), drops to the slot's unprivileged uid/gid (one uid per concurrent slot, so cleanup cannot touch other
checks), sets no-new-privs, and runs the program and then each test unit in one namespace, reporting each unit's
outcome on a private pipe. The server enforces a wall-clock deadline (SIGKILL), caps captured stdout/stderr,
then kills every process left with the slot's uid (``kill(-1)`` as that uid), removes the directory and answers
with a JSON response on stdout.

Protocol (both ways): 4-byte big-endian length + UTF-8 JSON. The first message from the server is
``{"hello": ..., "isolation": {...}}``.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import ctypes
import errno
import gc
import importlib
import json
import os
import resource
import secrets
import selectors
import shutil
import signal
import struct
import sys
import time
import traceback
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
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}
RESULT_FD = 3

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = [None if x is None else x.encode() for x in (src, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def isolate(work_root: str, tmpfs_mb: int) -> dict[str, Any]:
    """Enter new network + mount namespaces, make every mount read-only, mount a tmpfs on `work_root`."""
    root = os.geteuid() == 0
    report: dict[str, Any] = {"root": root, "netns": False, "readonly_fs": False, "uid_drop": root, "ipcns": False}
    if not root:
        report["why"] = "not root: cannot create namespaces or switch to unprivileged uids"
        return report
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare(CLONE_NEWNET|CLONE_NEWNS)")
    except OSError as exc:
        report["why"] = str(exc)
        return report
    report["netns"] = True
    try:  # a private SysV IPC namespace with small limits (segments outlive processes: removed after checks)
        _check(_libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        for name, value in IPC_LIMITS.items():
            with open(f"/proc/sys/kernel/{name}", "w") as f:
                f.write(str(value))
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
    report["exposed"] = _expose(sorted(p for p in paths if p and os.path.isabs(p) and os.path.exists(p)), work_root)
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


def _expose(paths: list[str], work_root: str) -> list[str]:
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
            if d not in covered and os.stat(d).st_mode & 0o001:
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


# ----------------------------------------------------------------------------------------------------------
# The child: runs one check. Everything below runs after fork(), in the check's process.
# ----------------------------------------------------------------------------------------------------------
def _emit(line: str) -> None:
    data = (line.replace("\n", " ")[:2000] + "\n").encode("utf-8", "replace")
    with contextlib.suppress(OSError):
        os.write(RESULT_FD, data)


# The harness's own references, taken before any check runs (a program that rebinds ``builtins.exec`` or
# ``builtins.compile`` does not change what the harness calls).
_EXEC, _COMPILE = builtins.exec, builtins.compile


def _run_check(req: dict[str, Any], nonce: str) -> None:
    ns: dict[str, Any] = {"__name__": "__solution__", "__builtins__": builtins}
    units: list[list[Any]] = req.get("units", [])
    try:
        _EXEC(_COMPILE(req["program"], "solution.py", "exec"), ns)
    except BaseException as exc:  # the program itself failed: every test fails
        _emit(f"X {nonce} program {type(exc).__name__}: {exc}")
        return
    if req.get("setup"):
        try:
            _EXEC(_COMPILE(req["setup"], "test_setup.py", "exec"), ns)
        except BaseException as exc:
            _emit(f"X {nonce} setup {type(exc).__name__}: {exc}")
            return
    entry = req.get("entry_point")
    if entry:
        if entry not in ns:
            _emit(f"X {nonce} program NameError: the solution does not define {entry!r}")
            return
        ns["candidate"] = ns[entry]
    for i, (src, _is_test) in enumerate(units):
        try:
            _EXEC(_COMPILE(src, f"test_{i}.py", "exec"), ns)
        except BaseException as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
            line = f" (line {where[0].lineno} of {where[0].filename})" if where else ""
            _emit(f"F {nonce} {i} {type(exc).__name__}: {exc!s:.300}{line}")
            if req.get("stop_on_fail"):
                return
        else:
            _emit(f"P {nonce} {i}")


def _child(
    req: dict[str, Any],
    slot: dict[str, Any],
    fds: tuple[int, int, int],
    workdir: str,
    nonce: str,
    limits: dict[str, Any],
) -> None:
    res_w, out_w, err_w = fds
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, RESULT_FD)
        os.closerange(RESULT_FD + 1, 1 << 16)
        os.chdir(workdir)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        cpu = int(limits["cpu_s"])
        mem = int(limits["memory_mb"]) << 20
        for res, val in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (mem, mem)),
            (resource.RLIMIT_NPROC, (limits["max_processes"],) * 2),
            (resource.RLIMIT_FSIZE, ((int(limits["max_file_mb"]) << 20),) * 2),
            (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            resource.setrlimit(res, val)
        if slot["uid"] is not None:
            os.setgroups([])
            os.setgid(slot["gid"])
            os.setuid(slot["uid"])
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.environ.clear()
        os.environ.update(
            {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": workdir,
                "TMPDIR": workdir,
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        import tempfile

        tempfile.tempdir = workdir
        sys.argv = ["solution.py"]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process ends right after
        sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
        _emit(f"S {nonce} {len(req.get('units', []))}")
        _run_check(req, nonce)
        _emit(f"D {nonce}")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if slot["uid"] is not None:  # kill whatever the check left running (only this slot's uid)
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
    except BaseException:
        with contextlib.suppress(Exception):
            os.write(2, traceback.format_exc().encode()[-4000:])
        os._exit(70)
    os._exit(0)


# ----------------------------------------------------------------------------------------------------------
# The server.
# ----------------------------------------------------------------------------------------------------------
class Job:
    """One running check (server side)."""

    def __init__(
        self, req: dict[str, Any], slot: int, pid: int, fds: dict[int, str], workdir: str, nonce: str, deadline: float
    ) -> None:
        self.req, self.slot, self.pid, self.fds, self.workdir, self.nonce = req, slot, pid, fds, workdir, nonce
        self.deadline = deadline
        self.start = time.monotonic()
        self.bufs: dict[str, bytearray] = {"res": bytearray(), "out": bytearray(), "err": bytearray()}
        self.dropped = {"out": 0, "err": 0, "res": 0}
        self.status: int | None = None
        self.timed_out = False


class Server:
    """The fork server's event loop (see the module docstring)."""

    def __init__(self, args: argparse.Namespace, isolation: dict[str, Any]) -> None:
        self.args = args
        self.isolation = isolation
        uid_ok = isolation.get("uid_drop", False)
        self.slots: list[dict[str, int | None]] = [
            {"uid": args.uid_base + k if uid_ok else None, "gid": args.uid_base + k if uid_ok else None}
            for k in range(args.slots)
        ]
        self.free = list(range(args.slots))
        self.queue: list[dict[str, Any]] = []
        self.jobs: dict[int, Job] = {}
        self.sel = selectors.DefaultSelector()
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.counter = 0
        self.eof = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        os.set_blocking(0, False)
        os.set_blocking(1, False)
        self.sel.register(0, selectors.EVENT_READ, ("in", None))
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))

    def send(self, msg: dict[str, Any]) -> None:
        data = json.dumps(msg).encode()
        self.outbuf += struct.pack("!I", len(data)) + data
        self._flush()

    def _flush(self) -> None:
        while self.outbuf:
            try:
                n = os.write(1, self.outbuf)
            except BlockingIOError:
                break
            except BrokenPipeError:
                self.eof = True
                self.outbuf.clear()
                break
            del self.outbuf[:n]
        if self.outbuf and not self._registered(1):
            self.sel.register(1, selectors.EVENT_WRITE, ("out", None))
        elif not self.outbuf and self._registered(1):
            self.sel.unregister(1)

    def _registered(self, fd: int) -> bool:
        try:
            self.sel.get_key(fd)
            return True
        except KeyError:
            return False

    def _read_requests(self) -> None:
        while True:
            try:
                chunk = os.read(0, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                self.sel.unregister(0)
                break
            self.inbuf += chunk
        while len(self.inbuf) >= 4:
            (n,) = struct.unpack("!I", self.inbuf[:4])
            if len(self.inbuf) < 4 + n:
                break
            self.queue.append(json.loads(self.inbuf[4 : 4 + n]))
            del self.inbuf[: 4 + n]

    def _start(self, req: dict[str, Any]) -> None:
        k = self.free[-1]
        slot = self.slots[k]
        self.counter += 1
        workdir = os.path.join(self.args.work_root, f"c{self.counter}")
        os.mkdir(workdir, 0o700)
        uid, gid = slot["uid"], slot["gid"]
        if uid is not None and gid is not None:
            os.chown(workdir, uid, gid)
        nonce = secrets.token_hex(8)
        pipes = [os.pipe() for _ in range(3)]
        timeout = float(req.get("timeout_s") or self.args.timeout_s)
        limits = {
            "cpu_s": int(timeout) + 1,
            "memory_mb": int(req.get("memory_mb") or self.args.memory_mb),
            "max_processes": self.args.max_processes,
            "max_file_mb": self.args.max_file_mb,
            "max_open_files": self.args.max_open_files,
        }
        pid = os.fork()
        if pid == 0:
            for r, _w in pipes:
                os.close(r)
            os.close(self.wake_r)
            _child(req, slot, (pipes[0][1], pipes[1][1], pipes[2][1]), workdir, nonce, limits)
            os._exit(71)  # not reached
        self.free.pop()  # only now: a failure above leaves the slot free (the request gets an error answer)
        fds: dict[int, str] = {}
        for name, (r, w) in zip(("res", "out", "err"), pipes):
            os.close(w)
            os.set_blocking(r, False)
            fds[r] = name
        job = Job(req, k, pid, fds, workdir, nonce, time.monotonic() + timeout)
        for r, name in fds.items():
            self.sel.register(r, selectors.EVENT_READ, ("pipe", (job, name)))
        self.jobs[pid] = job

    def _drain(self, job: Job, fd: int) -> None:
        name = job.fds[fd]
        cap = self.args.output_limit if name != "res" else 1 << 20
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                self.sel.unregister(fd)
                os.close(fd)
                del job.fds[fd]
                return
            room = cap - len(job.bufs[name])
            job.bufs[name] += chunk[: max(room, 0)]
            job.dropped[name] += max(0, len(chunk) - max(room, 0))

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.get(pid)
            if job is not None:
                job.status = status

    def _cleanup_uid(self, slot: dict[str, Any]) -> None:
        """Kill every process of the slot's uid (as that uid, so nothing else can be hit)."""
        if slot["uid"] is None:
            return
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(slot["gid"])
                os.setuid(slot["uid"])
                # One pass reaches every process of this uid (a fork racing with it fails: its parent has a
                # fatal signal pending); a second pass is cheap insurance. kill(-1) returns success even when
                # there was nothing to kill, so there is no "until ESRCH" loop.
                for _ in range(2):
                    with contextlib.suppress(OSError):
                        os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue

    def _finish(self, job: Job) -> None:
        for fd in list(job.fds):
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(fd)
            os.close(fd)
        job.fds.clear()
        clean_exit = job.status is not None and os.WIFEXITED(job.status) and os.WEXITSTATUS(job.status) == 0
        if not clean_exit:  # a clean exit already ran kill(-1) as the slot's uid itself
            self._cleanup_uid(self.slots[job.slot])
        self._reap()
        if self.isolation.get("ipcns"):
            remove_ipc_objects()
        shutil.rmtree(job.workdir, ignore_errors=True)
        del self.jobs[job.pid]
        self.free.append(job.slot)
        self.send(self._response(job))

    def _response(self, job: Job) -> dict[str, Any]:
        lines = job.bufs["res"].decode("utf-8", "replace").splitlines()
        n_units = len(job.req.get("units", []))
        results: list[bool | None] = [None] * n_units
        errors: list[str] = []
        started = done = False
        program_error = ""
        for line in lines:
            parts = line.split(" ", 3)
            if len(parts) < 2 or parts[1] != job.nonce:
                continue
            tag = parts[0]
            if tag == "S":
                started = True
            elif tag == "D":
                done = True
            elif tag in ("P", "F") and len(parts) >= 3:
                i = int(parts[2]) if parts[2].isdigit() else -1
                if not 0 <= i < n_units:
                    continue  # malformed (the check wrote to the result pipe itself): ignore
                results[i] = tag == "P"
                if tag == "F":
                    src = str(job.req["units"][i][0]).strip().splitlines()
                    errors.append(f"{src[0][:200] if src else f'test {i}'} -> {parts[3] if len(parts) > 3 else ''}")
            elif tag == "X":
                program_error = " ".join(parts[2:])
        status = job.status or 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if job.timed_out or sig == signal.SIGXCPU:
            state = "timeout"
        elif done and code == 0:
            state = "ok"
        elif not started:
            state = "error"
        else:
            state = "crashed"
        return {
            "id": job.req.get("id"),
            "status": state,
            "results": results,
            "program_error": program_error,
            "errors": errors[:20],
            "stdout": job.bufs["out"].decode("utf-8", "replace"),
            "stderr": job.bufs["err"].decode("utf-8", "replace"),
            "dropped": job.dropped,
            "exit_code": code,
            "signal": sig,
            "seconds": time.monotonic() - job.start,
        }

    def loop(self) -> None:
        self.send({"hello": "envkit-code-sandbox", "pid": os.getpid(), "isolation": self.isolation})
        while not (self.eof and not self.jobs and not self.queue):
            while self.queue and self.free:
                req = self.queue.pop(0)
                try:
                    self._start(req)
                except Exception as exc:  # e.g. the tmpfs is full: answer this request, keep serving
                    self.send(
                        {
                            "id": req.get("id"),
                            "status": "error",
                            "results": [None] * len(req.get("units", [])),
                            "errors": [f"sandbox error: {type(exc).__name__}: {exc}"],
                            "seconds": 0.0,
                        }
                    )
            now = time.monotonic()
            deadline = min((j.deadline for j in self.jobs.values() if not j.timed_out), default=now + 3600)
            for key, _events in self.sel.select(timeout=max(0.0, deadline - now)):
                kind, data = key.data
                if kind == "in":
                    self._read_requests()
                elif kind == "out":
                    self._flush()
                elif kind == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif kind == "pipe":
                    job, _name = data
                    if key.fd in job.fds:
                        self._drain(job, key.fd)
            self._reap()
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if not job.timed_out and now >= job.deadline and job.status is None:
                    job.timed_out = True
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(job.pid, signal.SIGKILL)
                    self._cleanup_uid(self.slots[job.slot])
                    self._reap()
                if job.status is not None and (not job.fds or job.timed_out):
                    self._finish(job)
                elif job.status is not None and job.fds:
                    # The check exited but something it started still holds its pipes: kill the slot's uid.
                    self._cleanup_uid(self.slots[job.slot])
                    for fd in list(job.fds):
                        self._drain(job, fd)
                    if not job.fds:
                        self._finish(job)
            if self.eof and not self.outbuf and not self.jobs:
                break
        self._flush()


def main(argv: list[str] | None = None) -> None:
    """Command line entry point (started by `envs.code.sandbox.Sandbox`)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--uid-base", type=int, default=60000)
    p.add_argument("--work-root", default="/tmp")
    p.add_argument("--tmpfs-mb", type=int, default=512)
    p.add_argument("--timeout-s", type=float, default=5.0)
    p.add_argument("--memory-mb", type=int, default=1024)
    p.add_argument("--max-processes", type=int, default=16)
    p.add_argument("--max-file-mb", type=int, default=16)
    p.add_argument("--max-open-files", type=int, default=128)
    p.add_argument("--output-limit", type=int, default=65536)
    p.add_argument("--preload", default="")
    p.add_argument("--no-isolation", action="store_true")
    args = p.parse_args(argv)
    if args.no_isolation:
        isolation: dict[str, Any] = {
            "root": os.geteuid() == 0,
            "netns": False,
            "readonly_fs": False,
            "uid_drop": False,
            "why": "--no-isolation",
        }
        args.work_root = os.path.join(args.work_root, f"envkit-sandbox-{os.getpid()}")
        os.makedirs(args.work_root, exist_ok=True)
    else:
        isolation = isolate(args.work_root, args.tmpfs_mb)
        if not isolation["netns"]:
            args.work_root = os.path.join(args.work_root, f"envkit-sandbox-{os.getpid()}")
            os.makedirs(args.work_root, exist_ok=True)
    # Checks must not import this directory's modules (``data``, ``env``...) by accident.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    # No parent-death signal here: it fires when the *thread* that started us exits. The server ends at EOF on
    # stdin instead (when the client closes it or dies), after its running checks' deadlines at the latest.
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    preloaded = []
    for name in filter(None, args.preload.split(",")):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
            preloaded.append(name)
    isolation["preloaded"] = preloaded
    gc.freeze()  # keep the preloaded objects out of the children's garbage collections (fewer copied pages)
    Server(args, isolation).loop()
    if not isolation["netns"]:
        shutil.rmtree(args.work_root, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
