"""Runs inside the sandbox at grading time (copied there read-only; never imported by envkit).

Usage: ``python -I -B grade_runner.py REPORT REPO [pytest args...]``.

``-I``: no PYTHON* variables, no user site, no script or cwd directory on ``sys.path``. pytest, pluggy and the
standard library are imported *before* ``REPO`` joins ``sys.path``, so no file in the repository can shadow
them. Per-test verdicts come from pytest's report hooks (every phase, subtests included: one failed report fails
the test) and are written as JSON to ``REPORT`` (opened before any repository code runs) after the
processes the tests left behind are killed; then the runner leaves by ``os._exit`` (no atexit hooks). stdout
is not read.
"""

import json
import os
import signal
import sys

sys.dont_write_bytecode = True
import _pytest.runner  # noqa: E402,F401  (loaded from site-packages before the repository joins sys.path)
import pytest  # noqa: E402

_RANK = {"passed": 0, "xpass": 1, "xfail": 1, "skipped": 2, "error": 3, "failed": 3}


class Verdicts:
    """A pytest plugin: test id -> worst outcome over all its reports."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.collect_errors: list[str] = []

    def _set(self, nodeid: str, outcome: str) -> None:
        old = self.status.get(nodeid)
        if old is None or _RANK[outcome] >= _RANK[old]:
            self.status[nodeid] = outcome

    def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.failed:
            self._set(report.nodeid, "failed" if report.when == "call" else "error")
        elif report.skipped:
            self._set(report.nodeid, "xfail" if hasattr(report, "wasxfail") else "skipped")
        elif report.when == "call":
            self._set(report.nodeid, "xpass" if hasattr(report, "wasxfail") else "passed")

    def pytest_collectreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.failed:
            self.collect_errors.append(report.nodeid)


def _kill_strays() -> None:
    """SIGKILL every other process of the sandbox but its init and our shell (children the tests left behind)."""
    keep = {1, os.getpid(), os.getppid()}
    for _ in range(3):
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in keep:
                try:
                    os.kill(int(name), signal.SIGKILL)
                except OSError:
                    pass


def main() -> int:
    report, repo, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    sys.path.insert(0, repo)
    plugin = Verdicts()
    code = pytest.main(args, plugins=[plugin])
    _kill_strays()
    data = json.dumps({"exit": int(code), "status": plugin.status, "collect_errors": plugin.collect_errors})
    os.ftruncate(fd, 0)
    os.pwrite(fd, data.encode(), 0)
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))  # no atexit hooks (the code under test may have registered some)


if __name__ == "__main__":
    sys.exit(main())
