"""`envkit-train local` refuses a used run folder without --resume, and a --resume with changed settings
(the oracle CLI's journal rule, `envkit.io.changed_settings`); both before any model is loaded."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tyro")

from envkit.trainers import cli
from envkit.trainers.local.config import TrainConfig
from envkit.trainers.local.run_dir import RunDirError, check_run_dir, run_settings


def _used(run, **kw):
    cfg = TrainConfig(run_dir=str(run), **kw)
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(run_settings(cfg) | {"steps": cfg.steps}))
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return cfg


def test_new_or_empty_folder_passes(tmp_path):
    check_run_dir(TrainConfig(run_dir=str(tmp_path / "new")))
    (tmp_path / "empty").mkdir()
    check_run_dir(TrainConfig(run_dir=str(tmp_path / "empty")))


def test_used_folder_without_resume_is_refused_with_the_ways_out(tmp_path, capsys):
    run = tmp_path / "r"
    _used(run, lr=3e-4)
    with pytest.raises(
        RunDirError, match=r"already holds a run \(metrics.jsonl, config.json\): continue it with --resume"
    ):
        check_run_dir(TrainConfig(run_dir=str(run), lr=3e-4))
    with pytest.raises(SystemExit) as exc:  # the CLI: one error line, exit 2, nothing overwritten
        cli.main(["local", "--run-dir", str(run), "--lr", "3e-4", "--steps", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--resume True" in err and "choose another --run-dir" in err
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_resume_with_changed_settings_is_refused_naming_them(tmp_path, capsys):
    run = tmp_path / "r"
    _used(run, lr=3e-4)
    with pytest.raises(RunDirError, match=r"other settings \(lr: 0.0003 -> 0.001\); resume with the same settings"):
        check_run_dir(TrainConfig(run_dir=str(run), lr=1e-3, resume=True))
    check_run_dir(TrainConfig(run_dir=str(run), lr=3e-4, resume=True, steps=99, progress=False))  # may change
    with pytest.raises(SystemExit) as exc:
        cli.main(["local", "--run-dir", str(run), "--lr", "1e-3", "--resume", "True"])
    assert exc.value.code == 2 and "lr: 0.0003 -> 0.001" in capsys.readouterr().err


def test_the_settings_a_run_writes_are_the_ones_resume_compares(tmp_path):
    """config.json is what LocalTrainer writes: the same settings read back compare equal (no false refusal)."""
    import dataclasses

    cfg = TrainConfig(run_dir=str(tmp_path / "r"), task="envkit/Toy-v0", model=TrainConfig().model)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2, default=str))
    check_run_dir(dataclasses.replace(cfg, resume=True))


def test_curves_of_a_sero_run_plot_its_sero_metrics(tmp_path):
    from envkit.trainers.local.metrics import plot_metrics, plotted_keys

    recs = [{"step": s, "reward_mean": 0.0, "sero_tried": 4.0, "sero_succeeded": 3.0 + s, "sero_rows": 3.0,
             "sero_weight_mean": 0.5} for s in (1, 2)]  # fmt: skip
    assert {"sero_tried", "sero_succeeded", "sero_rows", "sero_weight_mean"} <= set(plotted_keys({"": recs}))
    assert "sero_tried" not in plotted_keys({"": [{"step": 1, "reward_mean": 0.0}]})  # no empty panels elsewhere
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "curves.png").stat().st_size > 0
