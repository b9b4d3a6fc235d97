"""SERO end to end on envkit/WebShop-v0 (embedded catalog, no data): the CLI's default env."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "envkit.envs.webshop.env", reason="envkit/WebShop-v0 is not installed (pip install -e '.[webshop]')"
)

from envkit.io import read_records
from envkit.oracles.pipeline import DEFAULT_ENV, RunConfig, run
from envkit.oracles.run_config import OracleSeroOptions


def _check(summary, out):
    tot = summary["totals"]
    assert tot["policy_successes"] < tot["trajectories"]  # random shopping fails
    assert tot["roots_tried"] > 0 and tot["continued_to_success"] > 0
    assert tot["success_rate_after"] > tot["success_rate_before"]
    assert tot["replay_diverged"] == 0
    recs = read_records(out)
    oracle = [r for r in recs if r["is_oracle"]]
    ends = [r for r in oracle if r["terminated"]]
    assert len(ends) == tot["continued_to_success"]
    assert all(r["action"] == "click[buy now]" and r["reward"] == 1.0 for r in ends)  # a perfect purchase
    assert all(0.05 <= r["reach_weight"] <= 1.0 for r in oracle)
    return tot


def test_webshop_inprocess_quick(tmp_path):
    assert DEFAULT_ENV == "envkit/WebShop-v0"
    out = tmp_path / "ws.jsonl"
    tot = _check(run(RunConfig(tasks=2, group=2, workers=1, backend="inprocess", out=str(out), progress=False)), out)
    assert tot["restored_native"] == tot["roots_tried"]


@pytest.mark.slow
def test_webshop_subprocess_workers_choice_weights(tmp_path):
    out = tmp_path / "ws.parquet"
    cfg = RunConfig(
        tasks=4,
        group=4,
        workers=2,
        backend="subprocess",
        out=str(out),
        progress=False,
        sero=OracleSeroOptions(weighting="choice"),
    )
    tot = _check(run(cfg), out)
    assert tot["restored_native"] + tot["restored_replay"] == tot["roots_tried"]
