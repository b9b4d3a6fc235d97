"""Runs inside the sandbox at grading time (copied there read-only; never imported by envkit): the supervisor.

Usage: ``exec python -I -B grade_runner.py`` with ``ENVKIT_GRADE`` (JSON: the output key, repository, pytest
arguments, required ids, changed files, the pytest process's environment) in the environment, which it removes
at once. It never imports the repository's code. It makes itself non-dumpable (``PR_SET_DUMPABLE`` 0: no
process of the sandbox uid can ptrace it or open its ``/proc/<pid>/{mem,environ,fd}``) and the subreaper of
what the tests start, then runs `envkit.envs.swe.grade_session` (pytest) as a child on one end of a socket pair
and a clean environment. The child streams its per-test reports (it cannot silence or replace that socket: a
seccomp filter denies ``dup2``/``dup3``/``close``/``dup`` on it); the supervisor reads until the socket is
closed or the child has exited, keeps every report of each required id, and voids the run when:

- the child reported a void (one of its detectors fired: audit hook, fingerprint, plugin registrations);
- the completion handshake failed: no session-finished message, or no completion message carrying the nonce the
  supervisor sent only after the session finished, or any message after it;
- pytest's exit status (as the kernel reports it for the child), the status the child reported and pytest's own
  session counts (tests collected, failures) disagree with the reports.

It reports facts, never a verdict: the last line of its own stdout is ``ENVKIT-VERDICT <key> <json>`` with, per
required id, how many setup, call and teardown reports arrived and how many of them were not a plain pass, the void reasons and the child's exit status; the rule is applied on the host
(`envkit.envs.swe.grading.verdict`). The key exists only in the supervisor (never in the child's memory or
environment), so the child's output (relayed above it, capped) cannot carry a report. Leftover descendants are
killed first. Safe outside a sandbox: it only signals its own descendants.
"""

import ctypes
import json
import marshal
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading

_PHASES = ("setup", "call", "teardown")
_MSG_MAX = 1 << 20
_RELAY_MAX = 256 << 10


def _descendants() -> list[int]:
    me = os.getpid()
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            parent[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out = []
    for pid in parent:
        cur, seen = pid, 0
        while cur in parent and cur != me and seen < 4096:
            cur, seen = parent[cur], seen + 1
        if cur == me and pid != me:
            out.append(pid)
    return out


def _kill_descendants() -> None:
    for _ in range(3):
        pids = _descendants()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


def _relay(src, dst) -> None:  # type: ignore[no-untyped-def]
    """Copy the child's output to ours (for people), at most _RELAY_MAX bytes; drain the rest."""
    sent = dropped = 0
    while True:
        chunk = src.read1(1 << 16)
        if not chunk:
            break
        take = chunk[: max(0, _RELAY_MAX - sent)]
        if take:
            dst.write(take)
            sent += len(take)
        dropped += len(chunk) - len(take)
    if dropped:
        dst.write(f"\n[... {dropped} bytes of test output dropped ...]\n".encode())
    dst.flush()


class _Run:
    """What the child reported, and why the run is void."""

    def __init__(self, ids: list[str]) -> None:
        self.required = frozenset(ids)
        self.reports: dict[str, dict[str, int]] = {}
        self.items: set[str] = set()
        self.collect_errors: list[str] = []
        self.void: list[str] = []
        self.failed_reports = 0
        self.finished: tuple[int, int, int] | None = None
        self.done: tuple[bytes, int] | None = None

    def take(self, msg: object, sock: socket.socket, nonce: bytes) -> None:
        if not isinstance(msg, tuple) or not msg or self.done is not None:
            self.void.append("a malformed message, or a message after the completion message")
            return
        kind = msg[0]
        if kind == "R" and len(msg) == 5 and self.finished is None:
            _, nodeid, when, outcome, wasxfail = msg
            if not (
                isinstance(nodeid, str)
                and when in _PHASES
                and outcome in ("passed", "failed", "skipped")
                and isinstance(wasxfail, bool)
            ):
                self.void.append("a malformed test report")
                return
            self.items.add(nodeid)
            if nodeid in self.required:  # per phase how many reports, and how many not a plain pass
                counts = self.reports.setdefault(nodeid, {"setup": 0, "call": 0, "teardown": 0, "bad": 0})
                counts[when] += 1
                counts["bad"] += 0 if outcome == "passed" and not wasxfail else 1
            if outcome == "failed":
                self.failed_reports += 0 if wasxfail else 1
        elif kind == "C" and len(msg) == 2 and self.finished is None:
            self.collect_errors.append(str(msg[1]))
        elif kind == "V" and len(msg) == 2:
            self.void.append(str(msg[1])[:500])
        elif kind == "F" and len(msg) == 4 and self.finished is None and all(isinstance(x, int) for x in msg[1:]):
            self.finished = (msg[1], msg[2], msg[3])
            sock.sendall(nonce)  # the nonce exists from here on, and only for the child
        elif kind == "D" and len(msg) == 3 and self.finished is not None:
            self.done = (msg[1], msg[2]) if isinstance(msg[1], bytes) and isinstance(msg[2], int) else (b"", -1)
        else:
            self.void.append(f"an unexpected message {str(kind)[:20]!r}")

    def check(self, rc: int, nonce: bytes) -> None:
        if self.finished is None:
            self.void.append(f"the test session never finished (pytest process exit status {rc})")
            return
        if self.done is None or not secrets.compare_digest(self.done[0], nonce):
            self.void.append("no completion message carrying the run's nonce")
            return
        code, collected, failed = self.finished
        if not rc == code == self.done[1]:
            self.void.append(f"exit status {rc} differs from the reported {code}/{self.done[1]}")
        if failed != self.failed_reports + len(self.collect_errors):
            self.void.append(f"pytest counted {failed} failures, the reports {self.failed_reports}")
        if collected != len(self.items):
            self.void.append(f"pytest collected {collected} tests, {len(self.items)} reported")
        if (rc == 0) != (failed == 0 and collected > 0):
            self.void.append(f"pytest exit status {rc} with {failed} failures among {collected} tests")


def main() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: 0
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    cfg = json.loads(os.environ.pop("ENVKIT_GRADE"))
    key, ids = str(cfg["key"]), [str(t) for t in cfg["ids"]]
    ours, theirs = socket.socketpair()
    if ours.fileno() == 3:  # the child's end goes to fd 3
        ours, old = ours.dup(), ours
        old.close()
    if theirs.fileno() != 3:
        os.dup2(theirs.fileno(), 3)
        theirs.close()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grade_session.py")
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", script],
        pass_fds=(3,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=cfg["env"],
        cwd=cfg["repo"],
    )
    os.close(3)
    relay = threading.Thread(target=_relay, args=(proc.stdout, sys.stdout.buffer), daemon=True)
    relay.start()
    data = marshal.dumps({"repo": cfg["repo"], "args": [*cfg["args"], *ids], "changed": list(cfg["changed"])})
    ours.sendall(len(data).to_bytes(4, "big") + data)
    run, nonce, buf = _Run(ids), secrets.token_bytes(16), b""
    while True:  # until EOF or the child is gone: a message after the completion message voids the run
        ready, _, _ = select.select([ours], [], [], 0.2)
        if not ready:
            if proc.poll() is not None:  # the child is gone; a descendant holding the channel is not waited for
                break
            continue
        try:
            chunk = ours.recv(1 << 16)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if size > _MSG_MAX:
                run.void.append("an oversized message")
                buf = b""
                break
            if len(buf) < 4 + size:
                break
            raw, buf = buf[4 : 4 + size], buf[4 + size :]
            try:
                msg = marshal.loads(raw)
            except (ValueError, EOFError, TypeError):
                msg = None
            try:
                run.take(msg, ours, nonce)
            except OSError:
                run.void.append("the pytest process closed the channel")
    if buf:
        run.void.append("a truncated message, or a message after the completion message")
    rc = proc.wait()
    _kill_descendants()
    relay.join(timeout=5)
    run.check(rc, nonce)
    verdict = {
        "reports": {t: run.reports[t] for t in ids if t in run.reports},
        "collect_errors": run.collect_errors[:100],
        "void": run.void[:20],
        "exit": rc,
    }
    sys.stdout.flush()
    line = f"\nENVKIT-VERDICT {key} {json.dumps(verdict)}\n".encode()
    while line:
        line = line[os.write(1, line) :]
    return 0


if __name__ == "__main__":
    sys.exit(main())
