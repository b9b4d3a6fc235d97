"""The code sandbox server: a warm fork server that runs untrusted Python as unprivileged, isolated processes.

Run by `envs.code.sandbox.Sandbox` as ``python -I forkserver.py --slots N ...`` (stdlib only; it loads its two
siblings by path: `isolation.py`, the namespaces and mounts, and `check_process.py`, what runs in a forked
check). At start, once:

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
import contextlib
import ctypes
import errno
import gc
import importlib
import importlib.util
import json
import os
import secrets
import selectors
import shutil
import signal
import struct
import sys
import time
from typing import Any

PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


def _load(name: str) -> Any:
    """A stdlib-only sibling module, loaded by path: this directory is not on ``sys.path`` (``python -I``) and
    must not be, or checks could import this package's modules."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_envkit_sandbox_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the sandbox module {name!r} from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_isolation = _load("isolation")
isolate = _isolation.isolate
remove_ipc_objects = _isolation.remove_ipc_objects
run_child = _load("check_process").run_child


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
            run_child(req, slot, (pipes[0][1], pipes[1][1], pipes[2][1]), workdir, nonce, limits)
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
