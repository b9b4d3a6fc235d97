"""The code sandbox server: a warm fork server that runs untrusted Python as unprivileged, isolated processes.

Run by `envkit.envs.code.sandbox.Sandbox` as ``python -I forkserver.py --slots N --io-dir D ...`` (stdlib only; it
loads its siblings by path: `isolation.py`, the namespaces, mounts and cgroups; `check_server.py`, the event
loop; `check_process.py`, what runs in a forked check; `plain.py`, the plain-data encoding). At start, once:

1. (as root) it opens the client's private I/O directory and the slots' cgroups, then enters a new network
   namespace (only a down loopback), a new mount namespace in which every mount is remounted read-only, the
   data sets and the directories the checks need not see are hidden (`isolation.isolate`), ``/proc`` is
   remounted with ``hidepid=invisible``, and a small tmpfs is mounted on the work root (default ``/tmp``).
2. it makes every slot its own network and SysV IPC namespace (`isolation.slot_namespaces`): a check joins its
   slot's (``setns``), so checks running at the same time share neither sockets nor IPC objects.
3. it imports the modules that checks commonly need (``--preload``), so that forked checks start warm.

Per check (a length-prefixed JSON request on stdin naming a job id and a mode) the server never reads the
check's content: the client wrote the candidate's spec (program and inputs) and, on the judge path, the judge's
spec (the check code) into files of the I/O directory, and the server only opens them and hands the descriptors
down (so no test, input or other candidate's output is ever in the memory that a candidate is forked from). It
forks the candidate G as PID 1 of a fresh PID namespace (``unshare(CLONE_NEWPID)``, ``fork``, ``setns`` back to
its own): ``kill(-1)`` in it reaches only its own processes, and when it exits the kernel kills everything it
left. G joins the slot's cgroups and drops to the slot's candidate uid (`check_process.run_candidate`). On the
judge path the server also forks the judge J as the slot's judge uid (`check_process.run_judge`), joined to G
by two pipes. Limits: the check's time limit in CPU seconds (timing does not change verdicts on a loaded
machine) for the candidate's processes *together* -- the slot's CPU-accounting cgroup, read every
``CPU_POLL_S``, kills the check when their sum passes it -- and RLIMIT_CPU per process (the only CPU bound
where there is no cgroup: then each forked child has the whole limit), plus a generous wall-clock backstop
(SIGKILL), RLIMIT_AS, RLIMIT_FSIZE (the output files), the slot's memory and pids cgroups, and a seccomp filter
(`seccomp.py`: no kernel keyring keys, no POSIX message queues -- state that would outlive the check). When G (and J) have exited, the server removes the check's directory and
answers ``{"id", "status", "exit_code", "signal", "cpu_s", "seconds", ...}``; the client reads the result files.

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
import os
import shutil
import sys
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
_check_process = _load("check_process")
_check_process.plain = _load("plain")
_check_process.seccomp = _load("seccomp")
_check_server = _load("check_server")


def main(argv: list[str] | None = None) -> None:
    """Command line entry point (started by `envkit.envs.code.sandbox.Sandbox`)."""
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
    p.add_argument("--no-seccomp", action="store_true", help="no keyring/mqueue seccomp filter (to measure its cost)")
    p.add_argument("--no-cpu-cgroup", action="store_true", help="do not poll the CPU cgroups (to measure the cost)")
    p.add_argument("--no-pidns", action="store_true", help="no PID namespace per check (to measure its cost)")
    p.add_argument("--io-dir", required=True, help="the client's private directory of check files")
    p.add_argument("--hide", action="append", default=[], help="a path checks must not see (repeatable)")
    p.add_argument("--wall-timeout-s", type=float, default=0.0, help="wall-clock backstop (0: 3 x timeout + 2)")
    p.add_argument("--cgroup-memory-mb", type=int, default=0, help="memory cgroup per slot (0: no cgroups)")
    args = p.parse_args(argv)
    io_fd = os.open(args.io_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # before the mount namespace
    cgroups: list[list[int]] = []
    cpu_usage: list[int] = []
    made: list[Any] = []
    cg_report: dict[str, Any] = {}
    slot_ns: list[tuple[int, int]] = []
    if args.cgroup_memory_mb and os.geteuid() == 0 and not args.no_isolation:
        cgroups, cpu_usage, made, cg_report = _isolation.slot_cgroups(
            f"{os.getpid()}", args.slots, args.cgroup_memory_mb, args.max_processes + 2
        )
    if args.no_isolation:
        isolation: dict[str, Any] = {
            "root": os.geteuid() == 0,
            "netns": False,
            "readonly_fs": False,
            "uid_drop": False,
            "pidns": False,
            "why": "--no-isolation",
        }
        args.work_root = os.path.join(args.work_root, f"envkit-sandbox-{os.getpid()}")
        os.makedirs(args.work_root, exist_ok=True)
    else:
        isolation = isolate(args.work_root, args.tmpfs_mb, args.hide)
        isolation["slot_ns"] = False
        if isolation["netns"]:
            try:
                slot_ns = _isolation.slot_namespaces(args.slots)
                isolation["slot_ns"] = True
            except OSError as exc:
                isolation["slot_ns_why"] = str(exc)
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
    if args.no_cpu_cgroup:
        cpu_usage, cg_report["cpu"] = [], False
    isolation["cgroups"] = cg_report
    isolation["seccomp"] = bool(_check_process.seccomp.available()) and not args.no_seccomp
    if args.no_pidns:
        isolation["pidns"] = False
    gc.freeze()  # keep the preloaded objects out of the children's garbage collections (fewer copied pages)
    try:
        _check_server.ForkServer(
            args, isolation, io_fd, cgroups, check_process=_check_process, isolation_module=_isolation,
            slot_ns=slot_ns, cpu_usage=cpu_usage,
        ).loop()  # fmt: skip
    finally:
        _isolation.remove_cgroups(made)
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
