"""OpenRLHF chooses its explorer once: the registry builds one object per method, and no module of the backend
compares the explorer's name (the hooks decide); EDEN's turn credit is the call the local trainer makes."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from envkit.trainers.explorers.eden import EdenConfig, eden_turn_credit
from envkit.trainers.openrlhf.config import EXPLORERS, BackendConfig
from envkit.trainers.openrlhf.explorers.branch import BranchExplorer
from envkit.trainers.openrlhf.explorers.eden import EdenExplorer
from envkit.trainers.openrlhf.explorers.plain import PlainExplorer
from envkit.trainers.openrlhf.explorers.registry import EXPLORERS as REGISTRY
from envkit.trainers.openrlhf.explorers.registry import explorer_class, make_explorer
from envkit.trainers.openrlhf.explorers.xrpo import XrpoExplorer
from envkit.trainers.openrlhf.rollout_records import RolloutSpec
from envkit.trainers.openrlhf.turn_advantages import SampleRow, compute_turn_advantages
from tests.trainers.openrlhf.records import T, record

OPENRLHF = Path(__file__).resolve().parents[3] / "trainers" / "openrlhf"
CONFIGS = {
    "none": BackendConfig(n_samples_per_prompt=4),
    "eden": BackendConfig(explorer="eden", n_samples_per_prompt=4, eden_anchors=(5,)),
    "xrpo": BackendConfig(explorer="xrpo", n_samples_per_prompt=4),
    "branch": BackendConfig(explorer="branch", n_samples_per_prompt=4, max_turns=3),
}


@pytest.mark.parametrize(
    ("name", "cls"),
    [("none", PlainExplorer), ("eden", EdenExplorer), ("xrpo", XrpoExplorer), ("branch", BranchExplorer)],
)
def test_registry_builds_each_explorer_with_its_hooks(name, cls):
    explorer = make_explorer(CONFIGS[name])
    assert type(explorer) is cls and explorer.name == name and explorer.config is CONFIGS[name]
    rng = np.random.default_rng(0)
    plan = explorer.plan("g0", 4, 0, rng)
    assert [s.index for s in plan] == [0, 1, 2, 3] and {s.group for s in plan} == {"g0"}
    assert [s.noisy for s in plan] == ([False] * 3 + [True] if name == "eden" else [False] * 4)  # n_noisy 4 // 4
    assert [s.fork for s in plan] == ([False, False, True, True] if name == "branch" else [False] * 4)
    assert explorer.engine_kwargs({"a": 1}) == ({"a": 1, "enable_prompt_embeds": True} if name == "eden" else {"a": 1})
    assert explorer.keeps_episodes is (name == "branch") and explorer.variable_groups is (name == "xrpo")
    assert ("branch" in explorer.episode_extra([0.5])) is (name == "branch")
    assert explorer.section == (None if name == "none" else name)


def test_registry_names_are_the_configs_and_an_unknown_name_is_refused_with_the_known_ones():
    assert sorted(REGISTRY) == sorted(EXPLORERS)
    with pytest.raises(ValueError, match=r"'edne'.*did you mean 'eden'.*known: branch, eden, none, xrpo"):
        explorer_class("edne")
    bad = BackendConfig(n_samples_per_prompt=4)
    object.__setattr__(bad, "explorer", "novelty")  # past the config's own check (e.g. a hand-made config)
    with pytest.raises(ValueError, match=r"--explorer 'novelty'.*known: branch, eden, none, xrpo"):
        make_explorer(bad)


def _name_compares(tree: ast.AST) -> list[int]:
    """Lines comparing an explorer's name: ``x.explorer`` / ``explorer`` against anything but the names' list (or
    None: ``explorer is None`` asks whether one was given)."""
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(
            (isinstance(s, ast.Attribute) and s.attr == "explorer") or (isinstance(s, ast.Name) and s.id == "explorer")
            for s in sides
        )
        names_list = any(
            (isinstance(s, ast.Name) and s.id == "EXPLORERS") or (isinstance(s, ast.Constant) and s.value is None)
            for s in sides
        )
        if named and not names_list:
            hits.append(node.lineno)
    return hits


def test_no_openrlhf_module_compares_the_explorer_name():
    assert _name_compares(ast.parse('if cfg.explorer == "eden": pass\nif explorer in ("a", "b"): pass')) == [1, 2]
    assert _name_compares(ast.parse("if cfg.explorer not in EXPLORERS: pass")) == []
    found = {
        str(p.relative_to(OPENRLHF)): lines
        for p in sorted(OPENRLHF.rglob("*.py"))
        if (lines := _name_compares(ast.parse(p.read_text())))
    }
    assert found == {}, f"explorer name compared at {found}: call the explorer's hook (trainers/openrlhf/explorers)"


def _row(i: int, group: str, noisy: bool, success: bool, states: list[str]) -> SampleRow:
    turns = tuple(T(s, "a", 0.0, False, 2 * k, 2 * k + 1, next_state=f"{s}'") for k, s in enumerate(states))
    spec = RolloutSpec(group=group, index=i % 4, noisy=noisy, anchor=5 if noisy else -1)
    return SampleRow(i, float(success), record(spec, turns, success))


def test_edens_turn_credit_on_openrlhf_is_the_shared_composition():
    """GiGPO + EDEN on OpenRLHF = the plain explorer's GiGPO values through `eden_turn_credit`, the call the local
    trainer's `AgentEdenDriver.postprocess` makes."""
    ecfg = EdenConfig(n_noisy=2, top_p=0.5, gamma=0.5)
    eden = BackendConfig(explorer="eden", advantage="gigpo", n_samples_per_prompt=4, eden_anchors=(5,), eden=ecfg)
    plain = BackendConfig(advantage="gigpo", n_samples_per_prompt=4)
    rows = [
        _row(i, f"g{i // 4}", i % 4 >= 2, success, states)
        for i, (success, states) in enumerate(
            [(True, ["s", "t"]), (False, ["s", "u", "v"]), (True, ["s", "t"]), (False, ["s", "u"]),
             (False, ["x"]), (True, ["x", "y"]), (False, ["x", "z"]), (True, ["x", "y"])]
        )
    ]  # fmt: skip
    base = compute_turn_advantages(rows, plain)
    got = compute_turn_advantages(rows, eden)
    want = eden_turn_credit(base.per_turn, [r.noisy for r in rows], [r.success for r in rows], ecfg)
    for g, w in zip(got.per_turn, want.per_turn, strict=True):
        np.testing.assert_allclose(g, w)
    np.testing.assert_array_equal(got.keep, want.loss_mask)
    assert {k: got.stats[k] for k in want.stats} == want.stats and got.stats["eden_noisy_share"] == 0.5
    assert not got.keep.all()  # a noisy row was dropped: the comparison is not vacuous
