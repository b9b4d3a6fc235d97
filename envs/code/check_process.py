"""What runs inside a check's processes, after the code sandbox server forks them (stdlib only).

`envs/code/forkserver.py` loads this file (and `plain.py`) by path before it forks anything (see
`envs/code/isolation.py` for why). Two kinds of process:

- `run_candidate` -- the untrusted program, as the slot's candidate uid, PID 1 of its own PID namespace. Its
  file descriptors: 0 ``/dev/null``, 1/2 its stdout/stderr files, 3 the *reply* channel, 4 its *spec* (read-only
  file: its program, the entry point, and -- mode ``calls`` -- the arguments of every call), 5 (mode ``judge``)
  the pipe the judge sends calls on. It loads the program, calls the entry point on each argument tuple and
  writes one record per call on fd 3: ``("V", output)`` (the output as plain data, `envkit.envs.code.plain`) or
  ``("E", exception class name)``. Nothing it writes is trusted: the records are decoded strictly and judged
  by the trusted side. Mode ``units`` (sandbox tests only) runs test units in the program's own namespace and
  *self-reports* ``("P"|"F", i)``: containment tests use it; rewards never do.
- `run_judge` -- the problem's own check code (HumanEval's ``check`` body with loops, helpers, random inputs),
  as the slot's *judge* uid (the candidate cannot signal or trace it, and never shares its memory), with
  ``candidate`` bound to a proxy that sends the arguments to the candidate process and returns its reply
  decoded as plain data. It writes ``("P", i)`` / ``("F", i, reason)`` per unit on its verdict file (fd 3),
  which the candidate cannot reach.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import os
import resource
import signal
import struct
import sys
import tempfile
import traceback
from typing import Any

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
REPLY_FD, SPEC_FD, CALL_FD = 3, 4, 5
_U32 = struct.Struct("!I")
#: Exception classes whose *name* may be reported (nothing else about an exception leaves the sandbox).
BUILTIN_EXCEPTIONS = frozenset(
    name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)
)

_libc = ctypes.CDLL(None, use_errno=True)
# The harness's own references, taken before any check runs.
_EXEC, _COMPILE = builtins.exec, builtins.compile
plain: Any = None  # `envs/code/plain.py`, set by the fork server (loaded by path)
seccomp: Any = None  # `envs/code/seccomp.py`, likewise


def _exc_name(exc: BaseException) -> str:
    t = type(exc)
    return t.__name__ if getattr(builtins, t.__name__, None) is t else "Exception"


def _read_all(fd: int, cap: int) -> bytes:
    chunks, n = [], 0
    while n <= cap:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> bytes | None:
    head = _read_exact(fd, 4)
    if head is None:
        return None
    n = _U32.unpack(head)[0]
    if n > plain.MAX_BYTES + 16:
        return None  # a frame over the cap: treated like the end of the channel
    return _read_exact(fd, n)


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _write_frame(fd: int, data: bytes) -> None:
    data = _U32.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _enter(uid: int | None, gid: int | None, workdir: str, limits: dict[str, Any], nproc: bool) -> None:
    """Session, signals, rlimits, unprivileged uid, no-new-privs, parent-death signal, a clean environment."""
    os.setsid()
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    os.chdir(workdir)
    cpu = int(limits["cpu_s"])
    mem = int(limits["memory_mb"]) << 20
    rl = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_FSIZE, ((int(limits["max_file_mb"]) << 20),) * 2),
        (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if nproc:
        rl.append((resource.RLIMIT_NPROC, (limits["max_processes"],) * 2))
    for res, val in rl:
        resource.setrlimit(res, val)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if uid is not None and gid is not None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # cleared by the uid change: set again
    if seccomp is not None and limits.get("seccomp", True):
        seccomp.deny_persistent_state()  # no keyring keys, no POSIX message queues: nothing outlives the check
    os.environ.clear()
    os.environ.update(
        {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
         "PYTHONDONTWRITEBYTECODE": "1"}
    )  # fmt: skip
    tempfile.tempdir = workdir
    sys.argv = ["solution.py"]
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process ends right after
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115


def _finish(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


# ----- the candidate ---------------------------------------------------------------------------------------
def _reply(kind: str, payload: Any) -> None:
    try:
        plain.write_record(REPLY_FD, kind, payload)
    except plain.PlainError as exc:
        plain.write_record(REPLY_FD, "E", "NotPlainData" if "not plain" in str(exc) else "OutputTooLarge")
    except OSError:
        pass


def _call(fn: Any, args: Any, kwargs: Any) -> None:
    try:
        out = fn(*args, **dict(kwargs))
    except BaseException as exc:
        _reply("E", _exc_name(exc))
    else:
        _reply("V", out)


def _candidate(spec: dict[str, Any]) -> None:
    mode = spec["mode"]
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    try:
        code = _COMPILE(spec["program"], "solution.py", "exec", dont_inherit=True)
    except BaseException as exc:
        _reply("X", ["compile", _exc_name(exc)])
        return
    try:
        _EXEC(code, ns)
    except BaseException as exc:
        _reply("X", ["load", _exc_name(exc)])
        return
    if mode == "units":
        _self_reported_units(spec, ns)
        return
    fn = ns.get(spec["entry"] or "")
    if not callable(fn):
        _reply("X", ["missing", ""])
        return
    _reply("R", 0)
    if mode == "calls":
        calls = spec["calls"]
        spec.clear()
        for args, kwargs in calls:
            _call(fn, args, kwargs)
        return
    while True:  # mode "judge": one call per frame from the judge, until it closes the pipe
        frame = _read_frame(CALL_FD)
        if frame is None:
            return
        try:
            args, kwargs = plain.decode(frame, plain.MAX_BYTES + 16, plain.MAX_BYTES)
        except (plain.PlainError, ValueError, TypeError):
            return
        _call(fn, args, kwargs)


def _self_reported_units(spec: dict[str, Any], ns: dict[str, Any]) -> None:
    if spec.get("setup"):
        try:
            _EXEC(_COMPILE(spec["setup"], "test_setup.py", "exec"), ns)
        except BaseException as exc:
            _reply("X", ["setup", _exc_name(exc)])
            return
    if spec.get("entry"):
        if spec["entry"] not in ns:
            _reply("X", ["missing", ""])
            return
        ns["candidate"] = ns[spec["entry"]]
    for i, (src, _is_test) in enumerate(spec.get("units", [])):
        try:
            _EXEC(_COMPILE(src, f"test_{i}.py", "exec"), ns)
        except BaseException as exc:
            _reply("F", [i, f"{_exc_name(exc)}: {exc!s:.300}"])
            if spec.get("stop_on_fail"):
                return
        else:
            _reply("P", [i, ""])


def run_candidate(uid: int | None, gid: int | None, workdir: str, limits: dict[str, Any]) -> None:
    """The candidate process (its fds are already in place, see the module docstring); never returns."""
    try:
        _enter(uid, gid, workdir, limits, nproc=True)
        spec = plain.decode(_read_all(SPEC_FD, plain.MAX_BYTES), plain.MAX_BYTES, plain.MAX_BYTES)
        os.close(SPEC_FD)
        _reply("S", 0)
        _candidate(spec)
        del spec
        _reply("D", 0)
    except BaseException:
        with contextlib.suppress(Exception):
            os.write(2, traceback.format_exc().encode()[-4000:])
        _finish(70)
    _finish(0)


# ----- the judge -------------------------------------------------------------------------------------------
class CandidateFailed(AssertionError):
    """The candidate's call did not return plain data (it raised, died or sent garbage)."""


def _proxy(call_w: int, reply_r: int) -> Any:
    state = {"dead": False}

    def candidate(*args: Any, **kwargs: Any) -> Any:
        if state["dead"]:
            raise CandidateFailed("died")
        _write_frame(call_w, plain.encode((args, tuple(sorted(kwargs.items())))))
        frame = _read_frame(reply_r)
        if frame is None:
            state["dead"] = True
            raise CandidateFailed("died")
        try:
            kind, payload = plain.decode(frame)
        except (plain.PlainError, ValueError, TypeError) as exc:
            state["dead"] = True
            raise CandidateFailed("garbled") from exc
        if kind == "V":
            return payload
        if kind == "E":
            name = payload if type(payload) is str and payload in BUILTIN_EXCEPTIONS else "Exception"
            raise CandidateFailed(f"raised:{name}")
        state["dead"] = True
        raise CandidateFailed("garbled")

    return candidate


def _skip_prologue(reply_r: int) -> str:
    """Read the candidate's records up to ``R`` (ready); returns "" or why the program did not load."""
    while True:
        frame = _read_frame(reply_r)
        if frame is None:
            return "died"
        try:
            kind, payload = plain.decode(frame)
        except (plain.PlainError, ValueError, TypeError):
            return "garbled"
        if kind == "R":
            return ""
        if kind == "X":
            return "program"


def run_judge(uid: int | None, gid: int | None, workdir: str, limits: dict[str, Any]) -> None:
    """The judge process: fd 3 verdict file, 4 its spec, 5 calls to the candidate, 6 the candidate's replies."""
    verdict_fd, call_w, reply_r = 3, 5, 6
    try:
        _enter(uid, gid, workdir, limits, nproc=False)
        spec = plain.decode(_read_all(SPEC_FD, plain.MAX_BYTES), plain.MAX_BYTES, plain.MAX_BYTES)
        os.close(SPEC_FD)
        why = _skip_prologue(reply_r)
        if why:
            plain.write_record(verdict_fd, "X", why)
            _finish(0)
        ns: dict[str, Any] = {"__name__": "__check__", "__builtins__": builtins}
        if spec.get("context"):  # trusted helpers of the problem statement (HumanEval/38's encode_cyclic)
            with contextlib.suppress(Exception):
                _EXEC(_COMPILE(spec["context"], "problem.py", "exec"), ns)
        proxy = _proxy(call_w, reply_r)
        for name in spec.get("names", []):
            ns[name] = proxy
        if spec.get("setup"):
            _EXEC(_COMPILE(spec["setup"], "test_setup.py", "exec"), ns)
        for name in spec.get("names", []):
            ns[name] = proxy
        for i, (src, _is_test) in enumerate(spec.get("units", [])):
            try:
                _EXEC(_COMPILE(src, f"test_{i}.py", "exec"), ns)
            except CandidateFailed as exc:
                plain.write_record(verdict_fd, "F", [i, str(exc)])
            except AssertionError:
                plain.write_record(verdict_fd, "F", [i, "wrong"])
            except Exception as exc:  # the check code itself failed on the candidate's (plain) outputs
                plain.write_record(verdict_fd, "F", [i, f"check:{_exc_name(exc)}"])
            else:
                plain.write_record(verdict_fd, "P", [i, ""])
                continue
            if spec.get("stop_on_fail"):
                break
        plain.write_record(verdict_fd, "D", 0)
    except BaseException:
        with contextlib.suppress(Exception):
            os.write(2, traceback.format_exc().encode()[-4000:])
        _finish(70)
    _finish(0)
