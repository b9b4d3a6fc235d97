"""House rules that a reader relies on: no two public classes share a name, and modules stay small (ARCHITECTURE.md, "House rules")."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("envkit", "runtime", "envs", "oracles", "trainers", "serve", "interop")
#: ARCHITECTURE.md, "House rules": "about 400 lines per module at most"; a little slack for "about".
MAX_LINES = 420
#: Modules allowed past it, each with its reason (debt to pay, listed so that it stays visible).
OVER_LIMIT = {
    # the SWE grading supervisor: one stdlib-only script copied into the sandbox and run as `python -I -B
    # grade_session.py`, which puts no sibling module on sys.path; splitting it means shipping and path-loading
    # several files inside the grader (issue 33, round three); left whole, 584 lines
    "envs/swe/grade_session.py": 600,
}


def _modules() -> list[Path]:
    # envkit/envs, ... link to the root folders: read each file once, under its own folder
    links = [REPO / "envkit" / pkg for pkg in PACKAGES[1:]]
    return sorted(
        p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if not any(p.is_relative_to(x) for x in links)
    )


def test_no_two_public_classes_share_a_name():
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(str(path.relative_to(REPO)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, (
        f"public classes defined in more than one module: {shared}; name each for what it holds "
        "(e.g. SweTask, WebShopGoal), or import the one definition instead of defining it again"
    )


def test_no_module_is_much_over_400_lines():
    long = {
        rel: n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > OVER_LIMIT.get(rel := str(p.relative_to(REPO)), MAX_LINES)
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}; split them into modules named for what they do"
