"""A seccomp filter for a check's processes: no kernel keyring, no POSIX message queues (stdlib only).

Loaded by path by `envs/code/forkserver.py` like its siblings. Two kinds of state outlive a check's processes
and its namespaces' clean-up: kernel keyring keys (the slot's uid keeps its user keyring from one check to the
next, and keys outlive the trainer) and POSIX message queues (in the slot's IPC namespace, which is reused).
Checks never need either, so `deny_persistent_state` makes the syscalls that create or reach them fail with
EPERM: ``add_key``, ``request_key``, ``keyctl`` and the ``mq_*`` family; on x86-64 the x32 ABI is refused as a
whole (its syscall numbers would bypass the table). The filter is inherited by every child and cannot be
removed. On an architecture without a table here the filter is not installed (`available` is False and the
sandbox's isolation report says so).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
#: (audit arch, denied syscall numbers, lowest syscall number of a foreign ABI or None) per machine.
_TABLES = {
    # mq_open..mq_getsetattr 240-245, add_key 248, request_key 249, keyctl 250; x32 ABI above 0x40000000
    "x86_64": (0xC000003E, (240, 241, 242, 243, 244, 245, 248, 249, 250), 0x40000000),
    # mq_open..mq_getsetattr 180-185, add_key 217, request_key 218, keyctl 219
    "aarch64": (0xC00000B7, (180, 181, 182, 183, 184, 185, 217, 218, 219), None),
}
_libc = ctypes.CDLL(None, use_errno=True)


def available() -> bool:
    """Whether this machine has a syscall table here."""
    return platform.machine() in _TABLES


def _program() -> bytes:
    arch, denied, foreign = _TABLES[platform.machine()]
    ins: list[tuple[int, int, int, int]] = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ_K, 1, 0, arch),
        (_BPF_RET_K, 0, 0, _RET_KILL),  # another ABI (i386 on x86-64): not this table's numbers
        (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]
    if foreign is not None:
        ins += [(_BPF_JGE_K, 0, 1, foreign), (_BPF_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    for k, nr in enumerate(denied):
        # equal: jump to the EPERM return after the remaining comparisons and the allow
        ins.append((_BPF_JEQ_K, len(denied) - k, 0, nr))
    ins += [(_BPF_RET_K, 0, 0, _RET_ALLOW), (_BPF_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    return b"".join(struct.pack("=HBBI", *i) for i in ins)


def deny_persistent_state() -> bool:
    """Install the filter on this process (needs no-new-privs or CAP_SYS_ADMIN); False if not available."""
    if not available():
        return False
    prog = _program()
    buf = ctypes.create_string_buffer(prog, len(prog))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")
    return True
