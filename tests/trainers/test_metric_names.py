"""One metric vocabulary for both trainers: docs/metrics.md is the table of `METRICS`, the OpenRLHF backend logs
no old name, and a metrics file written with old names reads with the current ones."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from envkit.trainers.local.metrics import read_metrics
from envkit.trainers.metric_names import METRICS, RENAMED, current_names, metric_table

ROOT = Path(__file__).resolve().parents[2]


def test_docs_metric_table_is_generated_from_the_vocabulary():
    text = (ROOT / "docs" / "metrics.md").read_text()
    table = text.split("<!-- metric-table:begin -->\n")[1].split("<!-- metric-table:end -->")[0]
    assert table == metric_table(), "regenerate it: python -m envkit.trainers.metric_names"
    assert len({m.name for m in METRICS}) == len(METRICS) and not set(RENAMED) & {m.name for m in METRICS}


def test_no_trainer_module_logs_an_old_name():
    for path in [*(ROOT / "trainers").rglob("*.py")]:
        if path.name == "metric_names.py":
            continue
        strings = {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)}
        assert not strings & set(RENAMED), f"{path}: {strings & set(RENAMED)}"


def test_old_names_read_as_the_current_ones(tmp_path):
    old = {"step": 1, "zero_adv_group_frac": 0.5, "envkit/eden_noisy_kept": 0.25, "sero_mean_weight": 0.7}
    both = {"step": 2, "truncated_rate": 0.1, "truncated_episode_share": 0.2}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(both) + "\n")
    assert read_metrics(tmp_path / "metrics.jsonl") == [
        {"step": 1, "zero_adv_fraction": 0.5, "envkit/eden_noisy_kept_share": 0.25, "sero_weight_mean": 0.7},
        {"step": 2, "truncated_episode_share": 0.2},  # the current name's value wins
    ]
    assert current_names({"reward_mean": 1.0}) == {"reward_mean": 1.0}
