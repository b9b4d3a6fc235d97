"""`trainers/local` has no import cycle: every import between its modules (module-level, lazy and
``TYPE_CHECKING`` ones alike, read with `ast` as tests/test_import_layers.py does) points one way."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LOCAL = ROOT / "trainers" / "local"
PREFIX = "envkit.trainers.local"


def _module(path: Path) -> str:
    rel = path.relative_to(LOCAL).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PREFIX, *parts])


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in LOCAL.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                if t in modules and t != name and not (t == PREFIX or name.startswith(t + ".")):
                    graph[name].add(t)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (a list of modules, first = last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_trainers_local_has_no_import_cycle():
    graph = _graph()
    assert len(graph) > 20 and f"{PREFIX}.trainer" in graph
    assert graph[f"{PREFIX}.trainer"] >= {f"{PREFIX}.explorers.registry", f"{PREFIX}.config"}  # the parse sees edges
    cycle = _cycle(graph)
    assert cycle is None, "import cycle in trainers/local: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_contracts_import_no_driver():
    graph = _graph()
    for m in (f"{PREFIX}.contracts", f"{PREFIX}.config"):
        assert not {d for d in graph[m] if ".explorers." in d or d.endswith("_source")}, graph[m]
