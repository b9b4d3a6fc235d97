"""The reading rule of SERO's miniature (`scripts/compare_sero_mini.py`, issue 32), as pure functions on its JSON.

Written and committed before any run of the design it reads (docs/results/sero_mini_rule.md states the same rule
in prose); `verdict` applies it. Only numpy; nothing here trains or plays.

READING RULE
    Units. Per variant (``word``, ``readable``), arm and seed, the FINAL evaluation's rotated held-out success per
    task: 48 held-out base tasks x 4 rotations of the listing (192 entries, task ``r * 48 + k`` is base task k in
    rotation r), each the success share of its evaluation episodes. A base task's value is the mean over its
    4 rotations; a contrast A - B has, per base task k, d_k = the mean over the paired seeds of
    (A's value - B's value). Point = mean of d_k over the 48 tasks; 95% interval = 2.5 / 97.5 percentiles of
    that mean over `bootstrap` resamples of the TASKS with replacement (a task carries its rotations and seeds
    together; seeds are not resampled), numpy ``default_rng(0)``.
    Primary endpoint: rotated held-out success at the final step (150 in the documented design).
    Contrasts: SERO - GraphGPO, SERO - matched (GraphGPO + matched env steps), SERO - supervised (GraphGPO + the
    same oracle continuations as plain supervised rows). SERO = GraphGPO + SERO with the paper's weighting
    (``reach.first="one"``). SERO own (the ablation) - GraphGPO is reported, not read.
    Equivalence margin: 0.05.
    Per variant, in this order:
      1. CANNOT TEST SERO if the variant's learnability gate failed (supervised on oracle continuations from
         wrong-item states plus the normal demos, the model did not reach p(back | wrong item's page) >= 0.9 and
         p(buy | right item's page) >= 0.9 on the rotated held-out tasks).
      2. VOID if the positive control failed: the readable variant's gate failed, or its SERO - GraphGPO lower
         bound is not > 0 (the set-up cannot show SERO ahead even where the policy can read what the oracle's
         ``back`` depends on).
      3. VOID if GraphGPO's train success moved by less than 0.05 (|mean over seeds of final - start| < 0.05):
         RL at this size did not change the policy.
      4. VOID if SERO rescued < 1 failed state per step on average over its first 50 steps (mean over seeds of
         ``sero_succeeded``): SERO barely ran. Rescues are reported at every step but never required at each.
      5. SUPPORT ("SERO helps") if against BOTH controls, GraphGPO and matched, the lower bound is > 0 and the
         point is >= +0.05.
      6. REFUTATION ("SERO does not help by 0.05 or more") if against both controls the upper bound is < +0.05
         (the positive control passed: step 2).
      7. INCONCLUSIVE otherwise.
      A contrast that cannot be computed (an arm or seed missing) makes the variant INCOMPLETE (before 5).
    Credit vs data (read beside the verdict, SERO - supervised): "credit adds" if its lower bound > 0 and point
    >= +0.05; "no more than the data" if its upper bound < +0.05; "undecided" otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SERO = "GraphGPO + SERO"
SERO_OWN = "GraphGPO + SERO own"
GRAPHGPO = "GraphGPO"
MATCHED = "GraphGPO + matched steps"
SUPERVISED = "GraphGPO + supervised oracle rows"
#: the verdict's controls (clauses 5 and 6)
CONTROLS = (GRAPHGPO, MATCHED)
#: the variant whose SERO - GraphGPO contrast is the positive control (clause 2): v2's; design v3 passes
#: ``readable_end`` (`scripts/compare_sero_mini.Config.positive_control`, docs/results/sero_mini_rule_v3.md)
POSITIVE_CONTROL = "readable"
MARGIN = 0.05
TRAIN_MOVE = 0.05
GATE = 0.9
RESCUE_STEPS = 50
ROTATIONS = 4


def task_values(per_task: Sequence[float], rotations: int = ROTATIONS) -> np.ndarray:
    """(rotations * n,) per rotated task -> (n,) per base task, the mean over its rotations."""
    x = np.asarray(per_task, dtype=np.float64)
    if x.ndim != 1 or len(x) % rotations:
        raise ValueError(f"held-out per-task values must be 1-D with a multiple of {rotations} entries, got {x.shape}")
    return x.reshape(rotations, -1).mean(axis=0)


def task_bootstrap(d: np.ndarray, n: int, seed: int = 0) -> tuple[float, float, float]:
    """Mean of the per-task differences `d` and its 95% percentile interval over `n` resamples of the tasks."""
    d = np.asarray(d, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def contrast(runs: Sequence[Mapping[str, Any]], a: str, b: str, n: int) -> dict[str, Any] | None:
    """Arm `a` - arm `b` on the final rotated held-out success (the docstring's units); None without a paired seed."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = sorted(s for s in {r["seed"] for r in runs} if (a, s) in by and (b, s) in by)
    if not seeds:
        return None
    va = np.stack([task_values(by[(a, s)]["evals"][-1]["heldout_per_task"]) for s in seeds])
    vb = np.stack([task_values(by[(b, s)]["evals"][-1]["heldout_per_task"]) for s in seeds])
    point, lo, hi = task_bootstrap((va - vb).mean(axis=0), n)
    return {"a": a, "b": b, "seeds": seeds, "point": point, "ci95": [lo, hi],
            "per_seed": (va - vb).mean(axis=1).round(4).tolist()}  # fmt: skip


def train_move(runs: Sequence[Mapping[str, Any]], arm: str = GRAPHGPO) -> float | None:
    """Mean over seeds of `arm`'s final - start train success (None: no run)."""
    rs = [r for r in runs if r["arm"] == arm]
    if not rs:
        return None
    return float(np.mean([r["evals"][-1]["train_success"] - r["evals"][0]["train_success"] for r in rs]))


def rescues_early(runs: Sequence[Mapping[str, Any]], arm: str = SERO, steps: int = RESCUE_STEPS) -> float | None:
    """Mean over seeds of `arm`'s mean rescues (``sero_succeeded``) per step over its first `steps` steps."""
    rs = [r for r in runs if r["arm"] == arm and r["curves"]]
    if not rs:
        return None
    return float(np.mean([np.mean([c.get("sero_succeeded", 0.0) for c in r["curves"][:steps]]) for r in rs]))


def gate_passed(gate: Mapping[str, Any] | None) -> bool:
    """The learnability gate: p(back | wrong) >= 0.9 and p(buy | right) >= 0.9 on the rotated held-out tasks."""
    return bool(gate) and gate["p_back_wrong"] >= GATE and gate["p_buy_right"] >= GATE  # type: ignore[index]


def _ahead(c: Mapping[str, Any]) -> bool:
    return c["ci95"][0] > 0.0 and c["point"] >= MARGIN


def _within(c: Mapping[str, Any]) -> bool:
    return c["ci95"][1] < MARGIN


def positive_control(variants: Mapping[str, Mapping[str, Any]], n: int, name: str = POSITIVE_CONTROL) -> dict[str, Any]:
    """Clause 2: the readable variant `name`'s gate passed and its SERO - GraphGPO lower bound is > 0."""
    v = variants.get(name)
    if v is None:
        return {"passed": False, "why": f"no {name!r} variant in the results"}
    if not gate_passed(v.get("gate")):
        return {"passed": False, "why": f"the {name} variant's learnability gate failed"}
    c = contrast(v["runs"], SERO, GRAPHGPO, n)
    if c is None:
        return {"passed": False, "why": f"no paired {SERO} / {GRAPHGPO} runs in the {name} variant"}
    ok = c["ci95"][0] > 0.0
    return {
        "passed": ok,
        "variant": name,
        "sero_minus_graphgpo": c,
        "why": "" if ok else f"{name}: SERO - GraphGPO lower bound {c['ci95'][0]:+.3f} is not > 0",
    }


def read_variant(v: Mapping[str, Any], pc: Mapping[str, Any], n: int) -> dict[str, Any]:
    """The docstring's clauses 1-7 for one variant (`pc`: `positive_control`'s answer)."""
    runs = v["runs"]
    out: dict[str, Any] = {"gate": v.get("gate"), "gate_passed": gate_passed(v.get("gate")),
                           "positive_control_passed": pc["passed"]}  # fmt: skip
    out["contrasts"] = {b: contrast(runs, SERO, b, n) for b in (GRAPHGPO, MATCHED, SUPERVISED)}
    out["own_minus_graphgpo"] = contrast(runs, SERO_OWN, GRAPHGPO, n)
    out["graphgpo_train_move"] = train_move(runs)
    out["sero_rescues_per_step_first50"] = rescues_early(runs)
    sup = out["contrasts"][SUPERVISED]
    out["credit_vs_data"] = (
        "missing" if sup is None else "credit adds" if _ahead(sup) else "no more than the data" if _within(sup)
        else "undecided"
    )  # fmt: skip
    move, resc = out["graphgpo_train_move"], out["sero_rescues_per_step_first50"]
    if not out["gate_passed"]:
        out["verdict"], out["why"] = "CANNOT TEST SERO", "the learnability gate failed"
    elif not pc["passed"]:
        out["verdict"], out["why"] = "VOID", f"positive control failed: {pc['why']}"
    elif move is None or abs(move) < TRAIN_MOVE:
        out["verdict"], out["why"] = "VOID", f"GraphGPO's train success moved {move} (< {TRAIN_MOVE})"
    elif resc is None or resc < 1.0:
        out["verdict"], out["why"] = "VOID", f"SERO rescued {resc} per step over its first {RESCUE_STEPS} (< 1)"
    elif any(out["contrasts"][b] is None for b in CONTROLS):
        out["verdict"], out["why"] = "INCOMPLETE", "a control's runs are missing"
    elif all(_ahead(out["contrasts"][b]) for b in CONTROLS):
        out["verdict"], out["why"] = "SUPPORT", "lower bounds > 0 and points >= +0.05 against both controls"
    elif all(_within(out["contrasts"][b]) for b in CONTROLS):
        out["verdict"], out["why"] = "REFUTATION", "upper bounds < +0.05 against both controls"
    else:
        out["verdict"], out["why"] = "INCONCLUSIVE", "neither support nor refutation"
    return out


def verdict(
    variants: Mapping[str, Mapping[str, Any]], n: int = 2000, positive: str = POSITIVE_CONTROL
) -> dict[str, Any]:
    """The rule applied to ``{variant: {"gate": {...}, "runs": [...]}}`` (the comparison's JSON ``variants``);
    `positive`: the readable variant of clause 2."""
    pc = positive_control(variants, n, positive)
    return {"positive_control": pc, "variants": {name: read_variant(v, pc, n) for name, v in variants.items()}}
