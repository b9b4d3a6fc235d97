"""The code sandbox server's event loop: requests in, candidates (and judges) forked into their slots, answers out.

Stdlib only, and loaded by path like its siblings: `envs/code/forkserver.py` (the entry point, which sets up the
isolation once) loads this file and hands `ForkServer` the sibling modules it forks checks with. See the
`forkserver` module docstring for what one check is and how it is confined.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import math
import os
import selectors
import shutil
import signal
import struct
import time
from typing import Any

CLONE_NEWPID = 0x20000000
#: How often the CPU cgroups of running checks are read (a check can overrun its CPU limit by about this much
#: times its process count).
CPU_POLL_S = 0.05
FILES = ("in", "judge", "reply", "out", "err", "verdict")

_libc = ctypes.CDLL(None, use_errno=True)


class RunningCheck:
    """One running check (server side)."""

    def __init__(self, req: dict[str, Any], slot: int, workdir: str, deadline: float, cpu_s: int) -> None:
        self.req, self.slot, self.workdir, self.deadline, self.cpu_s = req, slot, workdir, deadline, cpu_s
        self.start = time.monotonic()
        self.init_pid = 0  # the candidate G: PID 1 of the check's own PID namespace
        self.judge_pid = 0
        self.status: int | None = None
        self.judge_status: int | None = None
        self.cpu = 0.0
        self.cpu0 = 0.0  # the slot's CPU cgroup usage when the check started
        self.tree_cpu = 0.0  # CPU seconds of all the candidate's processes together (with a CPU cgroup)
        self.timed_out = False

    def done(self) -> bool:
        return self.status is not None and (not self.judge_pid or self.judge_status is not None)


def _arrange(fds: list[int]) -> None:
    """Put `fds` at 0, 1, 2, ... (in order) and close every other descriptor."""
    tmp = [fcntl.fcntl(fd, fcntl.F_DUPFD, 256) for fd in fds]  # above every target number first
    for i, fd in enumerate(tmp):
        os.dup2(fd, i)
    os.closerange(len(fds), 1 << 20)


class ForkServer:
    """The fork server's event loop (see the module docstring)."""

    def __init__(
        self,
        args: argparse.Namespace,
        isolation: dict[str, Any],
        io_fd: int,
        cgroups: list[Any],
        *,
        check_process: Any,
        isolation_module: Any,
        slot_ns: list[tuple[int, int]],
        cpu_usage: list[int] | None = None,
    ) -> None:
        #: The sibling modules (loaded by path by the entry point): what a forked check runs, and the namespaces.
        self.check_process = check_process
        self.iso = isolation_module
        #: Per slot: fds of its network and IPC namespaces (empty: checks share the server's).
        self.slot_ns = slot_ns
        self.own_ns: tuple[int, int] | None = None
        if slot_ns:
            self.own_ns = (
                os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC),
                os.open("/proc/self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC),
            )
        self.args = args
        self.isolation = isolation
        self.io_fd = io_fd
        self.cgroups = cgroups
        #: Per slot: an fd of its CPU cgroup's usage file (empty: only the per-process RLIMIT_CPU holds).
        self.cpu_usage = cpu_usage or []
        uid_ok = isolation.get("uid_drop", False)
        n = args.slots
        self.slots: list[dict[str, int | None]] = [
            {
                "uid": args.uid_base + k if uid_ok else None,
                "judge_uid": args.uid_base + n + k if uid_ok else None,
                "index": k,
            }
            for k in range(n)
        ]
        self.free = list(range(n))
        self.queue: list[dict[str, Any]] = []
        self.jobs: dict[int, RunningCheck] = {}  # by id
        self.by_pid: dict[int, tuple[RunningCheck, str]] = {}
        self.sel = selectors.DefaultSelector()
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.counter = 0
        self.eof = False
        self.null = os.open(os.devnull, os.O_RDWR)
        self.pidns_fd: int | None = None
        if isolation.get("pidns"):
            self.pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        os.set_blocking(0, False)
        os.set_blocking(1, False)
        self.sel.register(0, selectors.EVENT_READ, "in")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

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
            self.sel.register(1, selectors.EVENT_WRITE, "out")
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
                chunk = os.read(0, 1 << 16)
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

    def _open(self, rid: int, name: str, write: bool) -> int:
        flags = (os.O_WRONLY | os.O_TRUNC) if write else os.O_RDONLY
        return os.open(f"{rid}.{name}", flags | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=self.io_fd)

    def _start(self, req: dict[str, Any]) -> None:
        k = self.free[-1]
        slot = self.slots[k]
        rid = int(req["id"])
        judge = req.get("mode") == "judge"
        self.counter += 1
        workdir = os.path.join(self.args.work_root, f"c{self.counter}")
        os.mkdir(workdir, 0o700)
        if slot["uid"] is not None:
            os.chown(workdir, slot["uid"], slot["uid"])
        timeout = float(req.get("timeout_s") or self.args.timeout_s)
        wall = float(req.get("wall_timeout_s") or self.args.wall_timeout_s or (3 * timeout + 2))
        cpu_s = max(1, math.ceil(timeout))
        limits = {
            "cpu_s": cpu_s,
            "memory_mb": int(req.get("memory_mb") or self.args.memory_mb),
            "max_processes": self.args.max_processes,
            "max_file_mb": self.args.max_file_mb,
            "max_open_files": self.args.max_open_files,
            "seccomp": bool(self.isolation.get("seccomp")),
        }
        opened: list[int] = []
        try:
            spec = self._open(rid, "in", False)
            opened.append(spec)
            out, err = self._open(rid, "out", True), self._open(rid, "err", True)
            opened += [out, err]
            if judge:
                jspec, verdict = self._open(rid, "judge", False), self._open(rid, "verdict", True)
                opened += [jspec, verdict]
                call_r, call_w = os.pipe2(os.O_CLOEXEC)
                reply_r, reply_w = os.pipe2(os.O_CLOEXEC)
                opened += [call_r, call_w, reply_r, reply_w]
                cand_fds = [self.null, out, err, reply_w, spec, call_r]
            else:
                reply = self._open(rid, "reply", True)
                opened.append(reply)
                cand_fds = [self.null, out, err, reply, spec]
            job = RunningCheck(req, k, workdir, time.monotonic() + wall, cpu_s)
            if self.cpu_usage:
                job.cpu0 = self.iso.cpu_usage_s(self.cpu_usage[k])
            cg = self.cgroups[k] if self.cgroups else []
            job.init_pid = self._fork_candidate(cg, cand_fds, slot, workdir, limits)
            self.by_pid[job.init_pid] = (job, "init")
            if judge:
                job.judge_pid = os.fork()
                if job.judge_pid == 0:
                    try:
                        if self.slot_ns:
                            self.iso.enter_namespaces(*self.slot_ns[k])
                        _arrange([self.null, self.null, self.null, verdict, jspec, call_w, reply_r])
                        self.check_process.run_judge(slot["judge_uid"], slot["judge_uid"], workdir, limits)
                    finally:
                        os._exit(71)
                self.by_pid[job.judge_pid] = (job, "judge")
        finally:
            for fd in opened:
                os.close(fd)
        self.free.pop()  # only now: a failure above leaves the slot free (the request gets an error answer)
        self.jobs[rid] = job

    def _fork_candidate(
        self, cgroups: list[int], fds: list[int], slot: dict[str, Any], workdir: str, limits: Any
    ) -> int:
        """Fork the candidate G as PID 1 of a new PID namespace (unshare, fork, then setns back to ours)."""
        if self.pidns_fd is not None and _libc.unshare(CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
        pid = -1
        try:
            pid = os.fork()
        finally:
            if self.pidns_fd is not None and pid != 0 and _libc.setns(self.pidns_fd, CLONE_NEWPID) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the server's PID namespace")
        if pid == 0:
            try:
                for fd in cgroups:  # join the slot's memory and pids cgroups (still root here)
                    os.write(fd, b"0")
                if self.slot_ns:  # and its network and IPC namespaces
                    self.iso.enter_namespaces(*self.slot_ns[slot["index"]])
                _arrange(fds)
                self.check_process.run_candidate(slot["uid"], slot["uid"], workdir, limits)
            finally:
                os._exit(71)
        return pid

    def _reap(self) -> None:
        while True:
            try:
                pid, status, ru = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.by_pid.pop(pid, None)
            if entry is None:
                continue  # an orphan re-parented to us (we are a child subreaper)
            job, role = entry
            if role == "init":
                job.status = status
                job.cpu = ru.ru_utime + ru.ru_stime
                if job.judge_pid and job.judge_status is None:
                    # the candidate is gone: the judge sees EOF on its replies and finishes on its own
                    pass
            else:
                job.judge_status = status

    def _finish(self, job: RunningCheck) -> None:
        if self.slot_ns and self.own_ns is not None:  # the slot's IPC objects, in the slot's namespace
            self.iso.enter_namespaces(*self.slot_ns[job.slot])
            try:
                self.iso.remove_ipc_objects()
            finally:
                self.iso.enter_namespaces(*self.own_ns)
        elif self.isolation.get("ipcns"):
            self.iso.remove_ipc_objects()
        shutil.rmtree(job.workdir, ignore_errors=True)
        del self.jobs[int(job.req["id"])]
        self.free.append(job.slot)
        self.send(self._response(job))

    def _response(self, job: RunningCheck) -> dict[str, Any]:
        status = job.status or 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        cpu_out = job.cpu >= job.cpu_s - 0.05 and sig in (signal.SIGKILL, signal.SIGXCPU)
        if job.timed_out or cpu_out or sig == signal.SIGXCPU:
            state = "timeout"
        elif code == 0:
            state = "ok"
        elif code in (72, 74):
            state = "error"
        else:
            state = "crashed"
        out: dict[str, Any] = {
            "id": job.req.get("id"),
            "status": state,
            "exit_code": code,
            "signal": sig,
            "cpu_s": round(max(job.cpu, job.tree_cpu), 4),
            "seconds": time.monotonic() - job.start,
        }
        if job.judge_pid:
            js = job.judge_status or 0
            out["judge_exit_code"] = os.WEXITSTATUS(js) if os.WIFEXITED(js) else None
            out["judge_signal"] = os.WTERMSIG(js) if os.WIFSIGNALED(js) else None
        return out

    def _over_cpu(self, job: RunningCheck) -> bool:
        """Whether the candidate's processes together used more CPU than the check's limit (forked children
        each have the whole RLIMIT_CPU; the slot's CPU cgroup counts them all)."""
        try:
            job.tree_cpu = self.iso.cpu_usage_s(self.cpu_usage[job.slot]) - job.cpu0
        except (OSError, ValueError):
            return False
        return job.tree_cpu > job.cpu_s

    def _kill(self, job: RunningCheck) -> None:
        job.timed_out = True
        for pid, done in ((job.init_pid, job.status), (job.judge_pid, job.judge_status)):
            if pid and done is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def loop(self) -> None:
        self.send({"hello": "envkit-code-sandbox", "pid": os.getpid(), "isolation": self.isolation})
        while not (self.eof and not self.jobs and not self.queue):
            while self.queue and self.free:
                req = self.queue.pop(0)
                try:
                    self._start(req)
                except Exception as exc:  # e.g. the tmpfs is full: answer this request, keep serving
                    self.send({"id": req.get("id"), "status": "error", "why": f"{type(exc).__name__}: {exc}"})
            now = time.monotonic()
            deadline = min((j.deadline for j in self.jobs.values() if not j.timed_out), default=now + 3600)
            if self.cpu_usage and self.jobs:  # poll the CPU cgroups of running checks
                deadline = min(deadline, now + CPU_POLL_S)
            for key, _events in self.sel.select(timeout=max(0.0, deadline - now)):
                if key.data == "in":
                    self._read_requests()
                elif key.data == "out":
                    self._flush()
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
            self._reap()
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if self.cpu_usage and not job.timed_out and not job.done() and self._over_cpu(job):
                    self._kill(job)
                    self._reap()
                if not job.timed_out and now >= job.deadline and not job.done():
                    self._kill(job)
                    self._reap()
                if job.done():
                    self._finish(job)
            if self.eof and not self.outbuf and not self.jobs:
                break
        self._flush()
