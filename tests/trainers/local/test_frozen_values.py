"""Values that cross modules in the local trainer are frozen (ARCHITECTURE.md, "House rules"): an explorer's credit
is a value it returns (`RolloutCredit`, `EpisodeCredit`), never a write into the rollouts or episodes it was given.

Read with `ast`: no module of ``trainers/`` (the OpenRLHF wing aside: its hooks fill OpenRLHF's own ``Experience``
and copies of vLLM's ``SamplingParams``, as OpenRLHF's API asks) assigns an attribute of, or an item inside an
attribute of, an object other than ``self`` / ``cls``, except where `ALLOWED` says why.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: module -> why it may write into another object.
ALLOWED = {
    "trainers/local/multi_turn.py": "play_specs builds its episodes turn by turn (the episode's builder)",
    "trainers/local/word_tasks.py": "sets up a third-party tokenizer / generation config it has just made",
    "trainers/explorers/anchors.py": "marks its own numpy arrays read-only (arr.flags.writeable)",
    "trainers/explorers/icl.py": "IclCorpus.from_state_dict fills the corpus it has just made",
}


def _writes(source: str) -> list[tuple[int, str]]:
    """(line, code) of each assignment to ``x.attr`` or ``x.attr[...]`` with `x` not ``self`` / ``cls``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                base = t.value if isinstance(t, ast.Subscript) and isinstance(t.ctx, ast.Store) else None
                if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store):
                    base = t
                if not isinstance(base, ast.Attribute):
                    continue
                root = base.value
                while isinstance(root, ast.Attribute | ast.Subscript):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id in ("self", "cls")):
                    out.append((node.lineno, ast.unparse(node).splitlines()[0][:100]))
    return out


def test_no_module_writes_into_a_value_it_was_given():
    found = [
        f"{p.relative_to(ROOT)}:{line}: {code}"
        for p in sorted((ROOT / "trainers").rglob("*.py"))
        if "openrlhf" not in p.relative_to(ROOT).parts and str(p.relative_to(ROOT)) not in ALLOWED
        for line, code in _writes(p.read_text())
    ]
    assert not found, (
        "in-place writes into values that cross modules:\n" + "\n".join(found) + "\nreturn a new value instead "
        "(dataclasses.replace, or a credit value such as RolloutCredit / EpisodeCredit that the caller reads)"
    )


def test_the_finder_sees_attribute_and_item_writes():
    src = "r.advantage = a\nrow.advantages[0:2] = [1, 1]\ne.context += x\nself.x = 1\nd['k'] = 1\nx = r.y\n"
    assert [line for line, _ in _writes(src)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("envkit.trainers.local.single_turn", "Rollout"),
        ("envkit.trainers.local.contracts", "RolloutCredit"),
        ("envkit.trainers.local.contracts", "EpisodeCredit"),
        ("envkit.trainers.local.multi_turn", "EpisodeSpec"),
        ("envkit.trainers.local.sero", "OracleRow"),
        ("envkit.trainers.local.sero", "SeroResult"),
    ],
)
def test_the_values_are_frozen_dataclasses(module, name):
    pytest.importorskip("torch")
    import importlib

    cls = getattr(importlib.import_module(module), name)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, f"{module}.{name} must be frozen"
