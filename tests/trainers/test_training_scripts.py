"""The training scripts: compare_explorers' plot, a one-step bench_explorers run, a short compare_sero run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("steps", [3, 25])
def test_compare_plot_handles_runs_shorter_and_longer_than_the_smoothing_window(tmp_path, steps):
    plot_arms = _script("compare_explorers").plot_arms
    rec = {"reward_mean": 0.5, "zero_adv_fraction": 0.25, "entropy": 1.0}
    runs = {
        f"{arm}/seed{s}": [dict(rec, reward_mean=0.1 * k) for k in range(steps)]
        for arm in ("none", "xrpo")
        for s in (0, 1)
    }
    png = tmp_path / "c.png"
    plot_arms(runs, png)
    assert png.stat().st_size > 10_000


@pytest.mark.slow
def test_bench_explorers_prints_one_json_object_with_the_ratios():
    cmd = [sys.executable, str(REPO / "scripts" / "bench_explorers.py"), "--steps", "1", "--skip", "1",
           "--warmup-steps", "2", "--prompts-per-step", "4", "--group-size", "4", "--arms", "none", "xrpo"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["xrpo_vs_grpo"] > 0 and out["rollouts_per_step"] == {"grpo": [16], "xrpo": [16]}


@pytest.mark.slow
def test_compare_sero_writes_both_arms_curves_and_the_plot(tmp_path):
    cmd = [sys.executable, str(REPO / "scripts" / "compare_sero.py"), "--out", str(tmp_path), "--steps", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "compare_sero.json").read_text())
    assert set(result["curves"]) == {"GraphGPO", "GraphGPO + SERO"}
    assert all(len(c) == 2 for c in result["curves"].values())
    assert result["curves"]["GraphGPO"][0]["success_rate"] == 0.0  # a random model: all-fail groups
    assert sum(r["sero_rows"] for r in result["curves"]["GraphGPO + SERO"]) >= 1
    assert (tmp_path / "compare_sero.png").stat().st_size > 10_000
    assert f"wrote {tmp_path / 'compare_sero.json'} and {tmp_path / 'compare_sero.png'}" in done.stdout
