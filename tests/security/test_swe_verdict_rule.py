"""The SWE grading rule and allow-list as pure functions (exact values; fast, no sandbox): `verdict` counts only a
clean ``passed`` triple per required id, and `gradable` keeps only source files inside the package directories."""

from __future__ import annotations

import pytest

from envkit.envs.swe.allow_list import gradable, package_dirs
from envkit.envs.swe.grading import verdict

IDS = ("t.py::a", "t.py::b")


def counts(setup=1, call=1, teardown=1, bad=0):
    return {"setup": setup, "call": call, "teardown": teardown, "bad": bad}


def report(**over):
    base = {"reports": {i: counts() for i in IDS}, "void": [], "exit": 0}
    base.update(over)
    return base


def test_clean_passes_count():
    assert verdict(report(), IDS) == ((), ())
    r = report()
    r["reports"]["t.py::a"] = counts(call=7777)  # every subtest passed (a shipped task has 7,776)
    assert verdict(r, IDS) == ((), ())


@pytest.mark.parametrize(
    "bad_id",
    [
        counts(bad=1),  # xfail, xpass, skip or a failure of any phase or subtest
        counts(setup=2),  # collected twice, or a forged extra report next to the genuine one
        counts(teardown=0),
        counts(call=0),
        {"setup": 1, "call": 1, "teardown": 1},  # malformed
        [["call", "passed", False]],
    ],
    ids=["not-a-plain-pass", "setup-twice", "no-teardown", "no-call", "malformed", "wrong-type"],
)
def test_only_one_clean_pass_per_id_counts(bad_id):
    r = report()
    r["reports"]["t.py::b"] = bad_id
    assert verdict(r, IDS) == (("t.py::b",), ())
    del r["reports"]["t.py::b"]  # missing
    assert verdict(r, IDS) == (("t.py::b",), ())


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
