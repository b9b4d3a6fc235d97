"""Client of the code sandbox (`envs.code.forkserver`): run untrusted Python with tests, many at a time.

Example:
    >>> with Sandbox(SandboxConfig(slots=2)) as sb:
    ...     r = sb.run(Job("def f(x):\\n    return 2 * x", units=(("assert candidate(2) == 4", True),),
    ...                    entry_point="f"))
    >>> r.status, r.results
    ('ok', (True,))

The server starts once (about 0.1-0.3 s) and stays warm; each check is a fork of it (milliseconds). See the
forkserver module for the isolation it sets up. `Sandbox.isolation` reports what is in force; with
``require_isolation=True`` (default) the sandbox refuses to start without a network namespace, a read-only
filesystem and unprivileged uids (which need root, or a root-equivalent container).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envkit.errors import EnvkitError, WorkerCrashedError

SERVER = Path(__file__).with_name("forkserver.py")

#: Modules imported once in the server so that checks start warm (missing ones are skipped).
DEFAULT_PRELOAD = (
    "abc,array,bisect,builtins,collections,copy,dataclasses,datetime,decimal,enum,fractions,functools,hashlib,"
    "heapq,io,itertools,json,math,operator,random,re,statistics,string,sys,textwrap,time,typing,unicodedata"
)


class SandboxUnavailableError(EnvkitError, RuntimeError):
    """The sandbox cannot provide the isolation it was asked for."""


@dataclass(frozen=True)
class SandboxConfig:
    """Settings of the code sandbox (per-check limits can be overridden per `Job`).

    Attributes:
        slots: Checks run at the same time (each with its own unprivileged uid).
        timeout_s: Wall-clock limit of one check (SIGKILL at the deadline; the CPU rlimit is ``int(t) + 1`` s).
        memory_mb: Address-space limit (RLIMIT_AS) of each process of a check.
        max_processes: RLIMIT_NPROC of a check's uid (bounds fork bombs).
        max_file_mb: Largest file a check may write (RLIMIT_FSIZE).
        max_open_files: RLIMIT_NOFILE.
        output_limit: Bytes of stdout and of stderr kept per check (the rest is read and dropped).
        uid_base: Slot k runs as uid/gid ``uid_base + k`` (uids with no account, like ``nobody``).
        tmpfs_mb: Size of the tmpfs that holds the checks' directories.
        work_root: Where that tmpfs is mounted inside the sandbox's mount namespace.
        preload: Comma-separated modules imported once in the server.
        require_isolation: Refuse to run without netns + read-only fs + uid drop (else run with what is possible
            and say so in `Sandbox.isolation`).
        python: Interpreter of the server (and so of the checks).
    """

    slots: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    timeout_s: float = 5.0
    memory_mb: int = 1024
    max_processes: int = 16
    max_file_mb: int = 16
    max_open_files: int = 128
    output_limit: int = 65536
    uid_base: int = 60000
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
        if not 1000 <= self.uid_base < 2**31 - self.slots:
            raise ValueError(f"SandboxConfig.uid_base must be an unused unprivileged uid >= 1000, got {self.uid_base}")


@dataclass(frozen=True)
class Job:
    """One check: a program, then test units run in the program's namespace.

    Attributes:
        program: The code under test (run as module ``__solution__``).
        units: ``(source, is_test)`` pairs run in order in the same namespace; a unit passes when it raises
            nothing. Units with ``is_test=False`` are setup (they count in no score).
        setup: Code run after the program and before the units (test imports and helpers).
        entry_point: Name bound to ``candidate`` before the units run (HumanEval's ``check(candidate)``).
        timeout_s: Overrides the config's wall-clock limit.
        memory_mb: Overrides the config's memory limit.
        stop_on_fail: Skip the remaining units after the first failure.
    """

    program: str
    units: tuple[tuple[str, bool], ...] = ()
    setup: str = ""
    entry_point: str | None = None
    timeout_s: float | None = None
    memory_mb: int | None = None
    stop_on_fail: bool = False


@dataclass(frozen=True)
class RunResult:
    """What happened to one `Job`.

    Attributes:
        status: ``"ok"`` (ran to the end), ``"timeout"`` (killed at the deadline or by the CPU limit),
            ``"crashed"`` (died early: a signal, ``os._exit``, memory), ``"error"`` (the sandbox failed).
        results: Per unit: True passed, False failed, None never ran.
        program_error: Why the program (or setup) itself failed, "" if it did not.
        errors: The failing units' messages (at most 20).
        stdout: Captured stdout (at most ``output_limit`` bytes).
        stderr: Captured stderr (at most ``output_limit`` bytes).
        exit_code: Exit code of the check process, if it exited.
        signal: Signal that killed it, if any.
        seconds: Wall time inside the sandbox.
        output_dropped: Bytes of stdout + stderr dropped by the output cap.
    """

    status: str
    results: tuple[bool | None, ...]
    program_error: str = ""
    errors: tuple[str, ...] = ()
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    signal: int | None = None
    seconds: float = 0.0
    output_dropped: int = 0


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
        self.isolation: dict[str, Any] = {}
        self.restarts = 0

    # ----- server lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the server (done automatically on first use)."""
        c = self.config
        self._log = tempfile.TemporaryFile(prefix="envkit-sandbox-log-")  # noqa: SIM115 - closed in close()
        args = [
            c.python, "-I", str(SERVER), "--slots", str(c.slots), "--uid-base", str(c.uid_base),
            "--work-root", c.work_root, "--tmpfs-mb", str(c.tmpfs_mb), "--timeout-s", str(c.timeout_s),
            "--memory-mb", str(c.memory_mb), "--max-processes", str(c.max_processes),
            "--max-file-mb", str(c.max_file_mb), "--max-open-files", str(c.max_open_files),
            "--output-limit", str(c.output_limit), "--preload", c.preload,
        ]  # fmt: skip
        self._proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        self._pid = os.getpid()
        try:
            hello = self._recv()
        except WorkerCrashedError as exc:
            raise SandboxUnavailableError(f"the code sandbox server did not start: {exc}") from exc
        self.isolation = dict(hello.get("isolation", {}))
        missing = [k for k in ("netns", "readonly_fs", "uid_drop") if not self.isolation.get(k)]
        if missing and c.require_isolation:
            self.close()
            raise SandboxUnavailableError(
                f"the code sandbox cannot isolate checks (missing: {', '.join(missing)}; "
                f"{self.isolation.get('why', '')}). It needs root (or a container with CAP_SYS_ADMIN) to create a "
                "network and mount namespace and to run checks as unprivileged uids. Run as root, or pass "
                "SandboxConfig(require_isolation=False) to run untrusted code WITHOUT that isolation."
            )

    def close(self) -> None:
        """Stop the server (idempotent; in a forked child it only forgets the parent's server)."""
        proc, self._proc = self._proc, None
        if self._pid != os.getpid():
            self._log = None
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
    def run(self, job: Job) -> RunResult:
        """Run one job (see `run_many`)."""
        return self.run_many([job])[0]

    def run_many(self, jobs: Sequence[Job]) -> list[RunResult]:
        """Run jobs ``config.slots`` at a time; results in input order. Restarts a crashed server once."""
        with self._lock:
            try:
                return self._run_many(jobs)
            except (WorkerCrashedError, BrokenPipeError, OSError):
                self.close()
                self.restarts += 1
                return self._run_many(jobs)

    def _run_many(self, jobs: Sequence[Job]) -> list[RunResult]:
        if self._proc is not None and self._pid != os.getpid():
            # This process was forked from the one that started the server: the pipes belong to the parent.
            self._proc, self._log = None, None
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self.start()
        window = 2 * self.config.slots + 2
        out: list[RunResult | None] = [None] * len(jobs)
        ids: dict[int, int] = {}
        nxt = 0
        done = 0
        while done < len(jobs):
            while nxt < len(jobs) and len(ids) < window:
                self._counter += 1
                ids[self._counter] = nxt
                self._send(_request(self._counter, jobs[nxt]))
                nxt += 1
            msg = self._recv()
            i = ids.pop(int(msg["id"]))
            out[i] = _result(msg)
            done += 1
        return [r for r in out if r is not None]


def _request(rid: int, job: Job) -> dict[str, Any]:
    return {
        "id": rid,
        "program": job.program,
        "units": [[src, bool(is_test)] for src, is_test in job.units],
        "setup": job.setup,
        "entry_point": job.entry_point,
        "timeout_s": job.timeout_s,
        "memory_mb": job.memory_mb,
        "stop_on_fail": job.stop_on_fail,
    }


def _result(msg: dict[str, Any]) -> RunResult:
    dropped = msg.get("dropped", {})
    return RunResult(
        status=str(msg["status"]),
        results=tuple(msg.get("results", ())),
        program_error=str(msg.get("program_error", "")),
        errors=tuple(msg.get("errors", ())),
        stdout=str(msg.get("stdout", "")),
        stderr=str(msg.get("stderr", "")),
        exit_code=msg.get("exit_code"),
        signal=msg.get("signal"),
        seconds=float(msg.get("seconds", 0.0)),
        output_dropped=int(dropped.get("out", 0)) + int(dropped.get("err", 0)),
    )
