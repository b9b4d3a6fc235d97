"""The SERO miniature's reading rule (`scripts/sero_mini_rule.py`, docs/results/sero_mini_rule.md) on synthetic
JSON with exact values: support, refutation, void (each cause), cannot test, inconclusive, incomplete."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import sero_mini_rule as rule

SUP, REF = {"p_back_wrong": 0.95, "p_buy_right": 0.99}, {"p_back_wrong": 0.5, "p_buy_right": 0.99}
ARMS = (rule.GRAPHGPO, rule.MATCHED, rule.SERO, rule.SERO_OWN, rule.SUPERVISED)


def _run(arm, seed, held, *, train=(0.3, 0.5), rescues=3.0, n=48):
    """A run whose final held-out success is `held` on every rotated task (a float, or (48,) per base task)."""
    per_base = np.broadcast_to(np.asarray(held, dtype=float), (n,))
    per_task = np.tile(per_base, rule.ROTATIONS).tolist()  # rotation r of base task k at r * n + k
    curves = [{"sero_succeeded": rescues} if "SERO" in arm or "supervised" in arm else {} for _ in range(60)]
    return {"arm": arm, "seed": seed, "curves": curves,
            "evals": [{"train_success": train[0], "heldout_per_task": per_task},
                      {"train_success": train[1], "heldout_per_task": per_task}]}  # fmt: skip


def _variant(held: dict, gate=SUP, seeds=(0, 1), **kw):
    return {"gate": gate, "runs": [_run(a, s, held[a], **kw) for s in seeds for a in ARMS if a in held]}


def _levels(sero, graphgpo=0.3, matched=0.3, supervised=0.3, own=0.3):
    return {rule.SERO: sero, rule.GRAPHGPO: graphgpo, rule.MATCHED: matched, rule.SUPERVISED: supervised,
            rule.SERO_OWN: own}  # fmt: skip


def _spread(mean: float) -> np.ndarray:
    """48 per-task values with the given mean and a spread (so the bootstrap interval has width)."""
    return mean + np.linspace(-0.1, 0.1, 48)


def test_units_average_rotations_and_the_bootstrap_resamples_tasks():
    # 2 base tasks x 4 rotations, task r * 2 + k: base 0 gets 1, 1, 1, 0; base 1 gets 0, 0, 1, 0
    assert rule.task_values([1, 0, 1, 0, 1, 1, 0, 0]).tolist() == [0.75, 0.25]
    with pytest.raises(ValueError, match="multiple of 4"):
        rule.task_values([1, 0, 1])
    assert rule.task_bootstrap(np.full(48, 0.25), 100) == (0.25, 0.25, 0.25)
    runs = [_run(rule.SERO, 0, 0.5), _run(rule.GRAPHGPO, 0, 0.25), _run(rule.SERO, 1, 0.75),
            _run(rule.GRAPHGPO, 1, 0.25)]  # fmt: skip
    c = rule.contrast(runs, rule.SERO, rule.GRAPHGPO, 100)
    assert c["point"] == 0.375 and c["ci95"] == [0.375, 0.375] and c["per_seed"] == [0.25, 0.5]
    assert rule.contrast(runs, rule.SERO, rule.MATCHED, 100) is None


def test_support_when_sero_leads_both_controls_by_more_than_the_margin():
    readable = _variant(_levels(_spread(0.7)))
    word = _variant(_levels(_spread(0.45), supervised=_spread(0.45)))
    out = rule.verdict({"word": word, "readable": readable}, 500)
    assert out["positive_control"]["passed"]
    assert out["variants"]["readable"]["verdict"] == "SUPPORT"
    assert out["variants"]["readable"]["credit_vs_data"] == "credit adds"
    w = out["variants"]["word"]
    assert w["verdict"] == "SUPPORT" and w["credit_vs_data"] == "no more than the data"
    assert w["contrasts"][rule.GRAPHGPO]["point"] == pytest.approx(0.15, abs=1e-12)
    assert w["graphgpo_train_move"] == pytest.approx(0.2) and w["sero_rescues_per_step_first50"] == 3.0


def test_refutation_needs_both_upper_bounds_below_the_margin_and_a_passing_positive_control():
    readable = _variant(_levels(_spread(0.7)))
    word = _variant(_levels(_spread(0.31), graphgpo=_spread(0.3), matched=_spread(0.32)))
    out = rule.verdict({"word": word, "readable": readable}, 500)
    w = out["variants"]["word"]
    assert w["verdict"] == "REFUTATION" and all(w["contrasts"][b]["ci95"][1] < 0.05 for b in rule.CONTROLS)
    # the same word numbers without a positive control are void, not a refutation
    flat = _variant(_levels(_spread(0.3)))
    out = rule.verdict({"word": word, "readable": flat}, 500)
    assert out["variants"]["word"]["verdict"] == "VOID" and "positive control" in out["variants"]["word"]["why"]
    assert out["variants"]["readable"]["verdict"] == "VOID"


def test_void_when_graphgpo_does_not_move_or_sero_barely_rescues():
    readable = _variant(_levels(_spread(0.7)))
    still = _variant(_levels(_spread(0.5)), train=(0.5, 0.54))  # |0.04| < 0.05
    out = rule.verdict({"word": still, "readable": readable}, 500)
    assert out["variants"]["word"]["verdict"] == "VOID" and "train success moved" in out["variants"]["word"]["why"]
    rare = _variant(_levels(_spread(0.5)), rescues=0.9)
    out = rule.verdict({"word": rare, "readable": readable}, 500)
    assert out["variants"]["word"]["verdict"] == "VOID" and "rescued" in out["variants"]["word"]["why"]
    # a drop of train success is a move too (|final - start|)
    fell = _variant(_levels(_spread(0.5)), train=(0.5, 0.4))
    assert rule.verdict({"word": fell, "readable": readable}, 500)["variants"]["word"]["verdict"] == "SUPPORT"


def test_cannot_test_when_the_gate_fails_and_the_positive_control_needs_its_gate():
    readable = _variant(_levels(_spread(0.7)))
    word = _variant(_levels(_spread(0.7)), gate=REF)
    out = rule.verdict({"word": word, "readable": readable}, 500)
    assert out["variants"]["word"]["verdict"] == "CANNOT TEST SERO"
    assert out["variants"]["readable"]["verdict"] == "SUPPORT"
    out = rule.verdict({"word": _variant(_levels(_spread(0.7))), "readable": _variant(_levels(_spread(0.7)), gate=REF)},
                       500)  # fmt: skip
    assert not out["positive_control"]["passed"] and out["variants"]["word"]["verdict"] == "VOID"
    assert rule.gate_passed({"p_back_wrong": 0.9, "p_buy_right": 0.9}) and not rule.gate_passed(None)


def test_inconclusive_between_the_two_and_incomplete_without_a_control():
    readable = _variant(_levels(_spread(0.7)))
    # ahead of GraphGPO by 0.2 but only +0.03 over matched: neither support nor refutation
    word = _variant(_levels(_spread(0.5), graphgpo=_spread(0.3), matched=_spread(0.47)))
    out = rule.verdict({"word": word, "readable": readable}, 500)
    assert out["variants"]["word"]["verdict"] == "INCONCLUSIVE"
    held = _levels(_spread(0.5))
    del held[rule.MATCHED]
    out = rule.verdict({"word": _variant(held), "readable": readable}, 500)
    assert out["variants"]["word"]["verdict"] == "INCOMPLETE"


def test_the_positive_control_is_the_named_readable_variant():
    """Design v3 names ``readable_end`` as clause 2's variant; a result without it is VOID, not silently read."""
    lead, flat = _variant(_levels(_spread(0.7))), _variant(_levels(_spread(0.3)))
    out = rule.verdict({"word": flat, "readable_end": lead}, 500, positive="readable_end")
    assert out["positive_control"]["passed"] and out["positive_control"]["variant"] == "readable_end"
    assert out["variants"]["readable_end"]["verdict"] == "SUPPORT"
    assert out["variants"]["word"]["verdict"] == "REFUTATION"  # level with both controls, positive control passed
    missing = rule.verdict({"word": flat, "readable_end": lead}, 500)  # v2's default names "readable"
    assert not missing["positive_control"]["passed"] and "no 'readable' variant" in missing["positive_control"]["why"]
    assert missing["variants"]["readable_end"]["verdict"] == "VOID"
