"""The SWE grading rule and allow-list as pure functions (exact values; fast, no sandbox): `verdict` counts only a
clean ``passed`` triple per required id, and `gradable` keeps only source files inside the package directories."""

from __future__ import annotations

import pytest

from envkit.envs.swe.allow_list import gradable, package_dirs
from envkit.envs.swe.grading import verdict

IDS = ("t.py::a", "t.py::b")
PASS = [["setup", "passed", False], ["call", "passed", False], ["teardown", "passed", False]]


def report(**over):
    base = {"reports": {i: [list(r) for r in PASS] for i in IDS}, "void": [], "exit": 0}
    base.update(over)
    return base


def test_clean_passes_count():
    assert verdict(report(), IDS) == ((), ())


@pytest.mark.parametrize(
    "call",
    [
        ["call", "skipped", True],  # xfail
        ["call", "passed", True],  # xpass
        ["call", "skipped", False],  # skip
        ["call", "failed", False],
    ],
    ids=["xfail", "xpass", "skip", "failed"],
)
def test_only_plain_passes_count(call):
    r = report()
    r["reports"]["t.py::b"][1] = call
    assert verdict(r, IDS) == (("t.py::b",), ())


def test_setup_error_missing_and_duplicate_reports_fail():
    r = report()
    r["reports"]["t.py::a"][0] = ["setup", "failed", False]
    assert verdict(r, IDS)[0] == ("t.py::a",)
    r = report()
    del r["reports"]["t.py::a"]
    assert verdict(r, IDS)[0] == ("t.py::a",)
    r = report()
    r["reports"]["t.py::a"].append(["setup", "passed", False])  # collected twice
    assert verdict(r, IDS)[0] == ("t.py::a",)
    r = report()
    r["reports"]["t.py::a"][1:1] = [["call", "passed", False], ["call", "failed", False]]  # subtests: one failed
    assert verdict(r, IDS)[0] == ("t.py::a",)
    r["reports"]["t.py::a"][2] = ["call", "passed", False]  # every subtest passed
    assert verdict(r, IDS)[0] == ()
    r["reports"]["t.py::a"].append(["overflow", "failed", False])  # more reports than the runner keeps
    assert verdict(r, IDS)[0] == ("t.py::a",)
    r = report()
    r["reports"]["t.py::a"][2] = ["call", "passed", False]  # two calls, no teardown
    assert verdict(r, IDS)[0] == ("t.py::a",)


def test_exit_status_and_void_fail_everything():
    assert verdict(report(exit=-9), IDS)[0] == IDS  # killed: whatever the reports say
    assert verdict(report(exit=5), IDS)[0] == IDS
    failed, void = verdict(report(exit=1), IDS)  # pytest saw a failure the reports do not show
    assert failed == IDS and "status 1" in void[0]
    assert verdict(report(void=["audit hook"]), IDS) == (IDS, ("audit hook",))
    failed, void = verdict(None, IDS)
    assert failed == IDS and "no report" in void[0]
    assert verdict(report(), (*IDS, IDS[0]))[1] == ("the task lists a required test id twice",)


def test_allow_list_is_the_package_source():
    packages = package_dirs(
        frozenset({"pkg", "tests", "docs", "pkg.egg-info", "src", "src/other", "setup.py", "conftest.py", "ns"}),
        frozenset({"pkg", "tests", "src/other", "pkg.egg-info"}),
        ("ns/mod.py", "setup.py"),
    )
    assert packages == frozenset({"pkg", "src/other", "ns"})
    keep = ["pkg/__init__.py", "pkg/sub/mod.py", "pkg/data.json", "src/other/a.py", "ns/mod.py", "pkg/a.pyi"]
    drop = [
        "pkg.egg-info/entry_points.txt",
        "pkg/x.egg-info/entry_points.txt",
        "pkg/conftest.py",
        "pkg/evil.pth",
        "pkg/__pycache__/mod.cpython-311.pyc",
        "pkg/.hidden.py",
        "pkg/tests/test_a.py",
        "pkg/test_a.py",
        "pkg/pytest.py",
        "pkg/setup.cfg",
        "pkg/pyproject.toml",
        "setup.py",
        "conftest.py",
        "newmod.py",
        "docs/conf.py",
        "tests/test_x.py",
        "pkg/mod.so",
        "sitecustomize.py",
    ]
    assert [p for p in keep if gradable(p, packages)] == keep
    assert [p for p in drop if gradable(p, packages)] == []
