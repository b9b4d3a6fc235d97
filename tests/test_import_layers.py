"""Layers only point down: envkit <- runtime <- envs <- oracles <- trainers, serve <- interop <- scripts (ARCHITECTURE.md).

Every module's imports are read with `ast` (module-level and lazy ones inside functions alike), so an upward
import fails here even when it only runs on some code path. Inside `envs`, the shared modules (directly under
``envs/``) import no domain, and a domain imports no other domain. `envkit` imports only the standard library,
numpy and gymnasium at module level (anything heavier is imported lazily where it is used).
"""

from __future__ import annotations

import ast
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


def _layer_parts(module: str) -> tuple[str, ...]:
    """A dotted module's parts with the install prefix taken off the layers under envkit
    (``envkit.envs.swe.env`` -> ``("envs", "swe", "env")``; ``envkit.snapshot`` stays ``("envkit", "snapshot")``)."""
    parts = tuple(module.split("."))
    return parts[1:] if len(parts) > 1 and parts[0] == "envkit" and parts[1] in UNDER_ENVKIT else parts


def _imports(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, imported module, at module level) of every absolute import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, id(node) in top


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
