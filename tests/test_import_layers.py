"""Layers only point down: envkit <- runtime <- envs <- oracles <- trainers, serve <- interop <- scripts (ARCHITECTURE.md).

Every module's imports are read with `ast` (module-level and lazy ones inside functions alike), so an upward
import fails here even when it only runs on some code path. Inside `envs`, the shared modules (directly under
``envs/``) import no domain, and a domain imports no other domain. `envkit` imports only the standard library,
numpy and gymnasium at module level (anything heavier is imported lazily where it is used).

No two modules of any layer import each other, directly or round a longer loop (every import counts: module-level,
lazy and ``TYPE_CHECKING`` ones), and no module imports another module's private (``_``) name.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# runtime (models, tokenizers, KV-cache argument, command lines) sits on envkit core, below every domain layer;
# serve (the env server) and trainers both sit on oracles; interop (adapters to other frameworks) on both.
RANK = {"envkit": 0, "runtime": 1, "envs": 2, "oracles": 3, "trainers": 4, "serve": 4, "interop": 5, "scripts": 6}
#: Layers whose folders sit at the repository's root and install under envkit (envkit/envs -> ../envs, ...).
UNDER_ENVKIT = ("runtime", "envs", "oracles", "trainers", "serve", "interop")
ENVKIT_THIRD_PARTY = {"numpy", "gymnasium"}
#: Import circles still standing, each as the sorted set of its modules (none: issue 36 removed the last ones).
ALLOWED_CIRCLES: set[frozenset[str]] = set()
#: Private names still imported from another module, as (importing file, module, name) (none, as above).
ALLOWED_PRIVATE: set[tuple[str, str, str]] = set()


def _layer_parts(module: str) -> tuple[str, ...]:
    """A dotted module's parts with the install prefix taken off the layers under envkit
    (``envkit.envs.swe.env`` -> ``("envs", "swe", "env")``; ``envkit.snapshot`` stays ``("envkit", "snapshot")``)."""
    parts = tuple(module.split("."))
    return parts[1:] if len(parts) > 1 and parts[0] == "envkit" and parts[1] in UNDER_ENVKIT else parts


def _import_nodes(path: Path) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    """Every import statement of the file with whether it is at module level; parsed once for all the checks
    (keyed by the file's size and time: the tests below write files)."""
    st = path.stat()
    return _parse_imports(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _parse_imports(path: Path, _mtime: int, _size: int) -> tuple[tuple[ast.Import | ast.ImportFrom, bool], ...]:
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(n) for n in tree.body}
    return tuple((n, id(n) in top) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom))


def _imports(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, imported module, at module level) of every absolute import in the file."""
    for node, module_level in _import_nodes(path):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, module_level
        elif node.level == 0 and node.module:
            yield node.lineno, node.module, module_level


def _modules() -> list[Path]:
    # envkit/envs, envkit/oracles, ... are links to the root folders: each file is read once, under its folder
    return sorted(p for pkg in RANK for p in (ROOT / pkg).rglob("*.py") if not _under_a_link(p))


def _under_a_link(path: Path) -> bool:
    return any(parent.is_symlink() for parent in path.relative_to(ROOT).parents if parent != Path("."))


def _envs_domain(parts: tuple[str, ...]) -> str | None:
    """The domain subpackage (``envs/<domain>/``) of a file path's or a dotted module's parts; None for a shared
    module directly under ``envs/``."""
    if len(parts) > 2:
        return parts[1]
    return parts[1] if len(parts) == 2 and (ROOT / "envs" / parts[1]).is_dir() else None


def _violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT)
    pkg = rel.parts[0]
    out = []
    for line, module, module_level in _imports(path):
        parts = _layer_parts(module)
        top = parts[0]
        where = f"{rel}:{line}: import {module}"
        if module.split(".")[0] in UNDER_ENVKIT:
            out.append(f"{where}: envkit installs it as envkit.{module} (import that name)")
        if top in RANK and RANK[top] > RANK[pkg]:
            out.append(f"{where} points up ({pkg} -> {top})")
        if pkg == "envs" and top == "envs" and len(parts) > 1:
            mine, theirs = _envs_domain(rel.parts), _envs_domain(parts)
            if theirs is not None and theirs != mine:
                kind = "a shared envs module imports a domain" if mine is None else "one domain imports another"
                out.append(f"{where}: {kind} (move what both need to envs/ or envkit/)")
        if pkg == "envkit" and module_level and top not in RANK and top not in sys.stdlib_module_names:
            if top not in ENVKIT_THIRD_PARTY and top != "__future__":
                out.append(f"{where}: envkit imports only stdlib, numpy and gymnasium at module level (import lazily)")
    return out


def test_every_module_imports_only_downward():
    bad = [v for path in _modules() for v in _violations(path)]
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("pkg", "source", "expected"),
    [
        ("oracles", "def f():\n    from envkit.trainers.models import load_model\n", "points up (oracles -> trainers)"),
        ("oracles", "import envs.swe\n", "installs it as envkit.envs.swe"),
        ("envs", "import envkit.oracles.base\n", "points up (envs -> oracles)"),
        ("envkit", "import torch\n", "import lazily"),
        ("envkit", "def f():\n    import torch\n", None),
        ("trainers", "from envkit.credit.sero import select_roots\n", None),
        ("runtime", "def f():\n    from envkit.envs.swe.env import SweEnv\n", "points up (runtime -> envs)"),
        ("runtime", "from envkit.oracles.base import Oracle\n", "points up (runtime -> oracles)"),
        ("runtime", "import runtime.models\n", "installs it as envkit.runtime.models"),
        ("envs", "from envkit.runtime.models import load_model\n", None),
        ("envkit", "from envkit.runtime.command_line import cli\n", "points up (envkit -> runtime)"),
    ],
)
def test_the_check_sees_lazy_and_module_level_imports(tmp_path, monkeypatch, pkg, source, expected):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    path = tmp_path / pkg / "m.py"
    path.parent.mkdir()
    path.write_text(source)
    found = _violations(path)
    assert (found == []) if expected is None else (len(found) == 1 and expected in found[0])


def test_envs_domains_do_not_import_each_other(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    shared = tmp_path / "envs" / "shared.py"
    domain = tmp_path / "envs" / "code" / "env.py"
    domain.parent.mkdir(parents=True)
    shared.write_text("from envkit.envs.math.verdict import Verdict\n")
    domain.write_text(
        "from envkit.envs.math.verdict import Verdict\nfrom envkit.envs.code.x import y\nfrom envkit.envs.verdict import V\n"
    )
    assert ["a shared envs module imports a domain" in v for v in _violations(shared)] == [True]
    assert ["one domain imports another" in v for v in _violations(domain)] == [True]


def _module_name(path: Path) -> str:
    """The dotted name a file installs under (``envs/swe/env.py`` -> ``envkit.envs.swe.env``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["envkit", *parts] if parts[0] in UNDER_ENVKIT else parts)


def _import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module -> the modules of `paths` it imports (``from pkg import sub`` counts as importing ``pkg.sub``; an
    import of one's own package, which Python runs first anyway, is not an edge)."""
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node, _ in _import_nodes(path):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            graph[name] |= {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles of `graph`: its strongly connected components of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]  # iterative: no recursion limit on deep graphs
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = {stack.pop()}
                while node not in members:
                    members.add(stack.pop())
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


def _private_imports(path: Path) -> list[tuple[str, str, str]]:
    rel = str(path.relative_to(ROOT))
    return [
        (rel, node.module, alias.name)
        for node, _ in _import_nodes(path)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in RANK
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def test_no_import_circle_in_any_layer():
    graph = _import_graph(_modules())
    assert {"envkit.envs.swe.env", "envkit.trainers.local.trainer", "envkit.pool"} <= set(graph)  # the names map
    assert "envkit.envs.swe.backend" in graph["envkit.envs.swe.env"]  # the parse sees edges
    circles = _circles(graph)
    new = [sorted(c) for c in circles if c not in ALLOWED_CIRCLES]
    assert not new, "import circles (move what both need into a module below them both):\n" + "\n".join(
        " <-> ".join(c) for c in new
    )
    gone = ALLOWED_CIRCLES - set(circles)
    assert not gone, f"allowed circles that no longer exist (remove them from ALLOWED_CIRCLES): {gone}"


def test_no_module_imports_another_modules_private_name():
    found = {imp for path in _modules() for imp in _private_imports(path)}
    new = sorted(found - ALLOWED_PRIVATE)
    assert not new, "private names imported from another module (make them public or move them):\n" + "\n".join(
        f"{f}: from {m} import {n}" for f, m, n in new
    )
    gone = ALLOWED_PRIVATE - found
    assert not gone, f"allowed private imports that no longer exist (remove them from ALLOWED_PRIVATE): {gone}"


def test_the_circle_finder_sees_direct_long_and_lazy_circles(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    files = {
        "envs/a.py": "from envkit.envs import b\n",
        "envs/b.py": "def f():\n    from envkit.envs.c import x\n",
        "envs/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from envkit.envs.a import A\n",
        "envs/d.py": "import envkit.envs.a\n",
        "trainers/p.py": "from envkit.trainers.q import _hidden\n",
        "trainers/q.py": "import envkit.trainers.p\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    paths = [tmp_path / rel for rel in files]
    circles = _circles(_import_graph(paths))
    assert sorted(map(sorted, circles)) == [
        ["envkit.envs.a", "envkit.envs.b", "envkit.envs.c"],
        ["envkit.trainers.p", "envkit.trainers.q"],
    ]
    assert _private_imports(tmp_path / "trainers/p.py") == [("trainers/p.py", "envkit.trainers.q", "_hidden")]
    assert _circles({"a": {"b"}, "b": set()}) == []
