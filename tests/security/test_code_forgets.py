"""A code-sandbox slot forgets: nothing one check leaves is there for the next, and CPU is limited per check.

One slot, so that consecutive checks share it (its uid, its IPC and network namespaces). The first check
tries to leave state everywhere a process can: SysV shared memory / queues / semaphores, POSIX message
queues, kernel keyring keys (user, user-session, session keyrings), files in /tmp, /dev/shm, /var/tmp,
/run/shm, its home; the next check looks for each. Then a check whose forked children each burn under the
per-process RLIMIT_CPU, but together far more than the check's limit, is stopped as a timeout.
Cost: about 6 s (one sandbox start, a few checks, one 2 s CPU check).
"""

from __future__ import annotations

import pytest

from envkit.envs.code.sandbox import CheckJob, Sandbox, SandboxConfig, SandboxUnavailableError

LEAVE = r"""
import ctypes, ctypes.util, os
libc = ctypes.CDLL(None, use_errno=True)
def f(x):
    done = []
    if libc.shmget(0x5eed, 4096, 0o1666) >= 0: done.append("shm")
    if libc.msgget(0x5eed, 0o1666) >= 0: done.append("msg")
    if libc.semget(0x5eed, 1, 0o1666) >= 0: done.append("sem")
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
    rt.mq_open.restype = ctypes.c_int
    if rt.mq_open(b"/envkit-left", 0o100 | 2, 0o666, None) >= 0: done.append("mq")
    for ring in (-4, -5, -3):  # KEY_SPEC_USER_KEYRING, USER_SESSION, SESSION
        kid = libc.syscall(248 if os.uname().machine == "x86_64" else 217, b"user", b"envkit-left%d" % -ring,
                           b"secret", 6, ring)
        if kid > 0: done.append("key%d" % ring)
    for d in ("/tmp", "/dev/shm", "/var/tmp", "/run/shm", "/run", "/dev/mqueue", os.environ.get("HOME", ".")):
        try:
            with open(os.path.join(d, "envkit-left"), "w") as fh:
                fh.write("x")
            done.append(d)
        except OSError:
            pass
    return done
"""
FIND = r"""
import ctypes, ctypes.util, os
libc = ctypes.CDLL(None, use_errno=True)
def f(x):
    found = []
    if libc.shmget(0x5eed, 0, 0) >= 0: found.append("shm")
    if libc.msgget(0x5eed, 0) >= 0: found.append("msg")
    if libc.semget(0x5eed, 0, 0) >= 0: found.append("sem")
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or "librt.so.1", use_errno=True)
    if rt.mq_open(b"/envkit-left", 0) >= 0: found.append("mq")
    for ring in (-4, -5, -3):
        kid = libc.syscall(250 if os.uname().machine == "x86_64" else 219, 10, b"user", b"envkit-left%d" % -ring, 0)
        if kid > 0: found.append("key%d" % ring)  # KEYCTL_SEARCH
    for d in ("/tmp", "/dev/shm", "/var/tmp", "/run/shm", "/run", "/dev/mqueue"):
        if os.path.exists(os.path.join(d, "envkit-left")): found.append(d)
    for root, _, files in os.walk("/tmp"):
        if "envkit-left" in files: found.append(root)
    return found
"""
#: Four children, each burning 0.8 s of CPU: under the per-process RLIMIT_CPU of 1 s, 3.2 s together.
FORKS = r"""
import os, time
def f(x):
    kids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            t = time.process_time()
            while time.process_time() - t < 0.8:
                pass
            os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)
    return "finished"
"""


@pytest.fixture(scope="module")
def one_slot():
    sb = Sandbox(SandboxConfig(slots=1, timeout_s=5, max_processes=8))
    try:
        sb.start()
    except SandboxUnavailableError as exc:
        pytest.skip(str(exc))
    yield sb
    sb.close()


def test_a_slot_forgets_what_a_check_left(one_slot):
    if not one_slot.isolation.get("ipcns"):
        pytest.skip(f"no IPC namespace here: {one_slot.isolation}")
    left = one_slot.run(CheckJob(LEAVE, entry_point="f", calls=(((0,), ()),)))
    assert left.status == "ok", left
    assert not {"mq", "key-4", "key-5", "key-3"} & set(left.outputs[0][1]), left.outputs  # refused outright
    found = one_slot.run(CheckJob(FIND, entry_point="f", calls=(((0,), ()),)))
    assert found.status == "ok", found
    assert found.outputs == (("V", []),), (left.outputs, found.outputs)


def test_cpu_is_limited_for_the_whole_check(one_slot):
    if not one_slot.isolation.get("cgroups", {}).get("cpu"):
        pytest.skip(f"no CPU cgroup here: {one_slot.isolation.get('cgroups')}")
    r = one_slot.run(CheckJob(FORKS, entry_point="f", calls=(((0,), ()),), timeout_s=1, wall_timeout_s=20))
    assert r.status == "timeout", r
    assert r.outputs != (("V", "finished"),)
    ok = one_slot.run(CheckJob("def f(x):\n    return x + 1\n", entry_point="f", calls=(((1,), ()),)))
    assert ok.outputs == (("V", 2),)
