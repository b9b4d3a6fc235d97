"""Runs inside the sandbox at grading time (copied there read-only; never imported by envkit).

Usage: ``python -I -B grade_runner.py REPORT REPO [pytest args...]``.

``-I``: no PYTHON* variables, no user site, no script or cwd directory on ``sys.path``. pytest, pluggy and the
standard library are imported *before* ``REPO`` joins ``sys.path``, so no file in the repository can shadow
them. Per-test verdicts come from pytest's report hooks (every phase, subtests included: one failed report fails
the test). The test machinery's functions are checked for monkeypatching after every test's teardown and at the
end; any change voids the run. The verdicts are written as JSON to ``REPORT`` (opened before any repository code
runs) after the processes the tests left behind are killed (only the runner's own descendants: it is their
subreaper); then the runner leaves by ``os._exit`` (no atexit hooks). stdout is not read.

Safe to run outside a sandbox: it never signals a process that is not its own descendant.
"""

import json
import os
import signal
import sys

sys.dont_write_bytecode = True
import _pytest.runner  # noqa: E402,F401  (loaded from site-packages before the repository joins sys.path)
import pytest  # noqa: E402

_RANK = {"passed": 0, "xpass": 1, "xfail": 1, "skipped": 2, "error": 3, "failed": 3}
WATCHED = (
    "builtins",
    "operator",
    "unittest.case",
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.python",
    "_pytest.python_api",
    "_pytest.outcomes",
    "_pytest.main",
    "_pytest.unittest",
    "_pytest.skipping",
    "_pytest.fixtures",
    "pluggy._hooks",
    "pluggy._callers",
    "pluggy._manager",
    "pytest",
)
for _name in WATCHED:
    try:
        __import__(_name)
    except ImportError:
        pass


def fingerprint() -> dict[tuple[str, ...], object]:
    """The functions and classes of the test machinery (and their methods), held by reference.

    Code under test that monkeypatches them (``TestCase.assertEqual = lambda *a: None``, a forged
    ``TestReport``, a lying builtin) changes an entry; tests' own ``monkeypatch``/``mock.patch`` are undone by
    teardown, where the check runs.
    """
    out: dict[tuple[str, ...], object] = {}
    for mname in WATCHED:
        mod = sys.modules.get(mname)
        if mod is None:
            continue
        for key, value in list(vars(mod).items()):
            if not (callable(value) or isinstance(value, type)):
                continue
            out[(mname, key)] = value
            if isinstance(value, type) and mname != "builtins" and getattr(value, "__module__", "") == mname:
                for ckey, cvalue in list(vars(value).items()):
                    if callable(cvalue) or isinstance(cvalue, (staticmethod, classmethod, property)):
                        out[(mname, key, ckey)] = cvalue
    return out


def _changed(base: dict[tuple[str, ...], object]) -> list[tuple[str, ...]]:
    now = fingerprint()
    return [k for k, v in base.items() if now.get(k) is not v]


def _code_file(value: object) -> str:
    """Where a callable's code lives ("" when it has none: builtins, C functions)."""
    for attr in ("__func__", "fget", "func", "__wrapped__"):
        value = getattr(value, attr, value)
    code = getattr(value, "__code__", None)
    return str(getattr(code, "co_filename", ""))


def _from_tests(value: object, repo: str) -> bool:
    """True for code in the repository's test files (pristine at grading: the tests' own patches are theirs)."""
    path = _code_file(value)
    prefix = repo.rstrip("/") + "/"
    if not path.startswith(prefix):
        return False
    parts = path[len(prefix) :].split("/")
    name = parts[-1]
    return (
        any(p in ("test", "tests", "testing") for p in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def _installed(value: object, repo: str) -> bool:
    """True for code from an installed package (a pytest plugin), never from the repository or exec'd text."""
    path = _code_file(value)
    return bool(path) and path.startswith("/") and not path.startswith(repo.rstrip("/") + "/")


class Verdicts:
    """A pytest plugin: test id -> worst outcome over all its reports."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.collect_errors: list[str] = []
        self.tampered: list[str] = []
        self._base = fingerprint()
        self.repo = "/repo"

    def pytest_sessionstart(self, session) -> None:  # type: ignore[no-untyped-def]
        """Plugins from site-packages (hypothesis, ...) may have patched pytest while loading: accept those."""
        now = fingerprint()
        for key in _changed(self._base):
            if key in now and _installed(now[key], self.repo):
                self._base[key] = now[key]
        self.check("session start")

    def check(self, where: str) -> None:
        if not self.tampered:
            now = fingerprint()
            changed = [k for k in _changed(self._base) if not _from_tests(now.get(k), self.repo)]
            if changed:
                self.tampered = [f"{where}: {'.'.join(c)}" for c in changed[:20]]

    def _set(self, nodeid: str, outcome: str) -> None:
        old = self.status.get(nodeid)
        if old is None or _RANK[outcome] >= _RANK[old]:
            self.status[nodeid] = outcome

    def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.when == "teardown":
            self.check(report.nodeid)
        if report.failed:
            self._set(report.nodeid, "failed" if report.when == "call" else "error")
        elif report.skipped:
            self._set(report.nodeid, "xfail" if hasattr(report, "wasxfail") else "skipped")
        elif report.when == "call":
            self._set(report.nodeid, "xpass" if hasattr(report, "wasxfail") else "passed")

    def pytest_collectreport(self, report) -> None:  # type: ignore[no-untyped-def]
        if report.failed:
            self.collect_errors.append(report.nodeid)


def _become_subreaper() -> None:
    """Orphaned descendants are reparented to us (not to init), so `_kill_descendants` finds all of them."""
    import ctypes

    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


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
    """SIGKILL the processes the tests left behind: only this process's own descendants, never anything else."""
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


def main() -> int:
    report, repo, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    _become_subreaper()
    sys.path.insert(0, repo)
    plugin = Verdicts()
    plugin.repo = repo
    code = pytest.main(args, plugins=[plugin])
    _kill_descendants()
    plugin.check("session end")
    data = json.dumps(
        {
            "exit": int(code),
            "status": plugin.status,
            "collect_errors": plugin.collect_errors,
            "tampered": plugin.tampered,
        }
    )
    os.ftruncate(fd, 0)
    os.pwrite(fd, data.encode(), 0)
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))  # no atexit hooks (the code under test may have registered some)


if __name__ == "__main__":
    sys.exit(main())
