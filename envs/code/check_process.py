"""What runs inside a check's process, after the code sandbox server forks it.

Stdlib only; `envs/code/forkserver.py` loads this file by path before it forks anything (see
`envs/code/isolation.py` for why). `run_child` sets the process up (session, rlimits, unprivileged uid,
no-new-privs, a clean environment), runs the program and then each test unit in one namespace, and reports each
unit's outcome as a line on the private result pipe (fd 3): ``S <nonce> <n units>``, ``P``/``F <nonce> <i>``,
``X <nonce> program|setup <error>``, ``D <nonce>``.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import os
import resource
import signal
import sys
import traceback
from typing import Any

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
RESULT_FD = 3

_libc = ctypes.CDLL(None, use_errno=True)


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


def run_child(
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
