"""The envkit-oracle CLI: help, errors, inspect, export (loaded by `datasets`), and kill -9 + resume."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envkit.io import read_records
from envkit.oracles.cli import main

TOY = ["--env", "envkit/Toy-v0", "--env-kwarg", "max_steps=10", "--max-steps", "10", "--sero.min-budget", "7"]


class _Result:
    def __init__(self, exit_code: int, stdout: str, stderr: str):
        self.exit_code, self.stdout, self.output = exit_code, stdout, stdout + stderr


class _Runner:
    """Runs `envkit.oracles.cli.main` in this process with `env` set, capturing its exit code, stdout and stderr."""

    def invoke(self, _main, args, env=None):
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        old = {k: os.environ.get(k) for k in env or {}}
        os.environ.update(env or {})
        code = 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                _main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return _Result(code, out.getvalue(), err.getvalue())


runner = _Runner()
app = main


def _options(cls, prefix=""):
    """(flag, default) of every option tyro builds from a config dataclass, nested ones dotted."""
    import dataclasses

    import tyro

    hints = __import__("typing").get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        name = f.name.replace("_", "-")
        for meta in getattr(hints[f.name], "__metadata__", ()):
            if isinstance(meta, type(tyro.conf.arg())) and meta.name:
                name = meta.name
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):
            yield from _options(type(default), f"{prefix}{name}.")
        else:
            yield f"--{prefix}{name}", default


def _plain(text: str) -> str:
    """The help as one line of words: no colours, no box borders (a wrapped option reads on)."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", re.sub(r"\x1b\[[0-9;]*m", "", text)))


def test_help_shows_only_the_sero_knobs_that_act_in_the_oracle_pipeline():
    # Trainer-only (the oracle-row cap) and OpenRLHF-only (the continuation budget without a turn cap) knobs live in
    # the trainers' options (issue 25): they would do nothing here, so the command neither shows nor accepts them.
    from envkit.credit.sero import SeroOptions
    from envkit.oracles.run_config import OracleSeroOptions
    from envkit.trainers.sero_options import TrainerSeroOptions

    text = _plain(runner.invoke(app, ["rollout", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"}).output)
    trainer_only = {f.name for f in dataclasses.fields(TrainerSeroOptions)} - {
        f.name for f in dataclasses.fields(SeroOptions)
    }
    assert trainer_only == {"max_oracle_share"}
    assert not {f.name for f in dataclasses.fields(TrainerSeroOptions)} & {"weighting"}  # oracle-only stays here
    for name in trainer_only:
        flag = f"--sero.{name.replace('_', '-')}"
        assert flag not in text, flag
        res = runner.invoke(app, ["rollout", flag, "1"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        assert res.exit_code != 0, flag
    oracle_fields = {f.name for f in dataclasses.fields(OracleSeroOptions)}
    assert {f"--sero.{n.replace('_', '-')}" for n in oracle_fields if n != "reach"} <= set(text.split())


def test_a_fields_multi_line_docstring_reads_as_one_paragraph_in_help():
    # Field docs live under the fields (attribute docstrings); their indented continuation lines must not keep
    # their line breaks (envkit.runtime.command_line dedents them before tyro joins the lines).
    res = runner.invoke(app, ["rollout", "--help"], env={"COLUMNS": "1000", "NO_COLOR": "1"})
    lines = [re.sub(r"\s+", " ", line) for line in res.output.splitlines()]
    for sentence in (
        "policy rows only, so an oracle action changes the policy's own ranking",  # SeroOptions.same_state
        "the summary counts the tasks per key as ``state_key_<kind>``",  # RunConfig.state_key
        "(default, the paper's) ``w_t = 1``, as reachability alone weighs it",  # ReachConfig.first
    ):
        assert any(sentence in line for line in lines), sentence


def test_help_documents_every_option_with_its_default():
    # < 130 columns: tyro lays the option groups out in one column (wider, it puts them side by side)
    res = runner.invoke(app, ["rollout", "--help"], env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert res.exit_code == 0
    text = _plain(res.output)
    from envkit.oracles.pipeline import RunConfig

    params = list(_options(RunConfig))
    # + --sero.same-state, --sero.reach.first (22), --state-key (26); - the trainers' 2 (25); + --fleet.* (34); + --retries (35)
    assert len(params) == 35
    for flag, default in params:
        assert flag in text, flag
        if isinstance(default, bool):  # a --x/--no-x flag shows its default
            assert f"{flag}, --no-{flag[2:]}" in text and "(default: True)" in text, flag
        elif default == "":  # an empty string shows quoted
            assert "(default: '')" in text, flag
        elif default not in (None, {}):  # every default shows in the help (None ones say it in words)
            assert f"(default: {default})".lower() in text.lower(), flag
        else:
            assert "None:" in text or "repeatable" in text, flag
    for opt in ("--oracle-kwarg", "--chunk-tasks", "--env-kwarg", "--sero.weighting", "--scorer", "--state-key"):
        assert opt in text
    for default in (
        "envkit/WebShop-v0",
        "default: random",
        "default: 32",
        "default: 8",
        "default: 2",
        "runs/oracle.parquet",
        "subprocess",
        "uniform",
        "sequence",
        "0.05",
        "WebShop 15",
    ):
        assert default in text, default


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "envkit/toy-v0"], "Did you mean 'envkit/Toy-v0'"),
        (["--env", "envkit/Toy-v0", "--policy", "magic"], "unknown policy spec 'magic'"),
        (["--env", "envkit/Toy-v0", "--policy", "scripted:/nonexistent/actions.json"], "does not exist"),
        (["--env", "envkit/Toy-v0", "--out", "/etc/passwd/x.parquet"], "cannot write the output"),
        (["--env", "envkit/Toy-v0", "--out", "x.csv"], "must end in .parquet or .jsonl"),
        (["--env", "envkit/Toy-v0", "--scorer", "gpt"], "unknown scorer 'gpt'"),
        (["--env", "envkit/Toy-v0", "--tasks", "0"], "--tasks must be >= 1"),
        (["--env", "envkit/Toy-v0", "--env-kwarg", "oops"], "KEY=VALUE"),
    ],
)
def test_bad_input_gives_clear_errors(tmp_path, args, message):
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path / "o.parquet")]
    res = runner.invoke(
        app,
        ["rollout", *args, "--tasks", "1", "--no-progress"]
        if "--tasks" not in args
        else ["rollout", *args, "--no-progress"],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 2, res.output
    assert message in _plain(res.output), res.output


def test_missing_extra_names_the_install(monkeypatch):
    # An id whose domain module cannot be imported here: the error names the extra to install.
    import gymnasium as gym

    import envkit.registration as reg
    from envkit.registration import EnvEntry

    gym.register(id="envkit/Missing-v0", entry_point="envs.not_installed_domain:Env")
    monkeypatch.setitem(
        reg.ENVS, "envkit/Missing-v0", EnvEntry("envkit/Missing-v0", "envs.not_installed_domain:Env", "missing", "test")
    )
    try:
        res = runner.invoke(app, ["rollout", "--env", "envkit/Missing-v0", "--no-progress"], env={"COLUMNS": "200"})
    finally:
        gym.registry.pop("envkit/Missing-v0", None)
    assert res.exit_code == 2
    assert "pip install -e '.[missing]'" in _plain(res.output)


def test_envs_lists_ids_with_status():
    res = runner.invoke(app, ["envs"], env={"COLUMNS": "250"})
    assert res.exit_code == 0
    assert "envkit/Toy-v0" in res.output and "envkit/ALFWorld-v0" in res.output and "yes" in res.output


def test_envs_piped_into_a_file_keeps_every_cell_whole(tmp_path):
    """Written to a pipe or a log (no terminal, no COLUMNS), rich would assume 80 columns and cut cells (``envki…``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    res = subprocess.run(
        [sys.executable, "-m", "envkit.oracles.cli", "envs"], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    rows = _raw_rows(res.stdout)
    assert len(rows) >= 7 and "…" not in res.stdout, res.stdout[:2000]
    ids = {row.split("│")[1].strip() for row in rows}
    assert {"envkit/Toy-v0", "envkit/WebShop-v0", "envkit/SWE-v0"} <= ids  # one line per env, nothing wrapped
    assert any("envkit.oracles.webshop:WebShopOracle" in row for row in rows)


def test_envs_reports_an_env_unusable_when_a_program_it_runs_is_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    res = runner.invoke(app, ["envs"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert res.exit_code == 0
    rows = {line.split("│")[1].strip(): line for line in _raw_rows(res.output)}
    assert "no: program(s) chromium|chromium-browser, chromedriver not on PATH" in _plain(
        rows["envkit/WebShopBrowser-v0"]
    )
    assert "no: program(s) bwrap, bash, git not on PATH" in _plain(rows["envkit/SWE-v0"])
    assert "│ yes" in rows["envkit/Toy-v0"]


def _raw_rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("│ envkit/")]


def test_rollout_inspect_export_and_datasets_load(tmp_path):
    import datasets

    out = tmp_path / "run.parquet"
    res = runner.invoke(
        app,
        [
            "rollout",
            *TOY,
            "--tasks",
            "4",
            "--group",
            "4",
            "--out",
            str(out),
            "--workers",
            "2",
            "--backend",
            "inprocess",
            "--no-progress",
        ],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, res.output
    assert "continued_to_success" in res.output
    summary = json.loads((tmp_path / "run.parquet.summary.json").read_text())
    res = runner.invoke(app, ["inspect", str(out), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["totals"] == summary["totals"]
    for fmt in ("sft", "rl"):
        target = tmp_path / f"data.{fmt}.jsonl"
        res = runner.invoke(app, ["export", str(out), "--format", fmt, "--out", str(target)])
        assert res.exit_code == 0, res.output
        ds = datasets.load_dataset("json", data_files=str(target), split="train")
        assert len(ds) > 0
        if fmt == "sft":
            m = ds[0]["messages"]
            assert [x["role"] for x in m] == ["system", "user", "assistant"]
            oracle = ds.filter(lambda r: r["is_oracle"])
            assert len(oracle) == summary["totals"]["oracle_rows"]
            # the first oracle action of a continuation weighs 1 (the paper's, reach.first one), later ones the
            # policy's likelihood of the path to them
            assert 0.0 < min(oracle["weight"]) <= max(oracle["weight"]) == 1.0
            # an oracle turn's prompt shows the policy steps that led to its root (history of 2 steps)
            recs = {(r["task_id"], r["trajectory"], r["step"]): r for r in read_records(out)}
            first = next(
                r
                for r in oracle
                if r["step"] == recs[(r["task_id"], r["trajectory"], r["step"])]["root_step"] and r["step"] >= 1
            )
            root = recs[(first["task_id"], first["trajectory"], first["step"])]
            prev = recs[(root["task_id"], root["root_trajectory"], root["step"] - 1)]
            assert f"-> {prev['action']}" in first["messages"][1]["content"]
            assert root["observation"] in first["messages"][1]["content"]
            assert first["messages"][2]["content"] == root["action"]
        else:
            assert {"prompt", "completion", "advantage", "weight", "weighted_advantage"} <= set(ds.column_names)
    res = runner.invoke(app, ["export", str(tmp_path / "none.parquet")])
    assert res.exit_code == 2 and "does not exist" in _plain(res.output)


@pytest.mark.slow
def test_sigkill_and_resume_gives_the_identical_file(tmp_path):
    from envkit.credit.sero import SeroOptions
    from envkit.oracles.pipeline import RunConfig, run

    args = [
        *TOY,
        "--env-kwarg",
        "step_delay=0.004",
        "--tasks",
        "10",
        "--group",
        "4",
        "--workers",
        "2",
        "--backend",
        "subprocess",
        "--chunk-tasks",
        "2",
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = tmp_path / "killed.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "envkit.oracles.cli", "rollout", *args, "--out", str(killed)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = tmp_path / "killed.parquet.journal.jsonl"
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 3:  # meta + 2 finished tasks
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed; make it slower"
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its pool workers
    proc.wait()
    units = journal.read_bytes().count(b'"unit"')
    assert 2 <= units < 10, "the run must be killed mid-way"
    assert not killed.exists()
    res = runner.invoke(app, ["inspect", str(killed), "--json"])  # a killed run: summary from its journal
    assert res.exit_code == 0 and json.loads(res.output)["totals"]["tasks"] == units
    # Resume (same settings as the CLI run; the backend and worker count do not change the records).
    cfg = dict(
        env_id="envkit/Toy-v0",
        env_kwargs={"max_steps": 10, "step_delay": 0.004},
        max_steps=10,
        sero=SeroOptions(min_budget=7),
        tasks=10,
        group=4,
        workers=1,
        backend="inprocess",
        progress=False,
    )
    resumed = run(RunConfig(**cfg, out=str(killed)))
    assert resumed["session"]["tasks_run"] == 10 - units and resumed["totals"]["tasks"] == 10
    whole = tmp_path / "whole.parquet"
    run(RunConfig(**cfg, out=str(whole)))
    assert killed.read_bytes() == whole.read_bytes()


def test_inspect_prints_whole_stop_reasons_and_dead_roots(tmp_path):
    """Stop reasons are kept and printed whole, one per line (they contain colons and commas), with dead roots."""
    from envkit.core import Root
    from envkit.oracles.continuation import ContinuationOutcome
    from envkit.oracles.reach_weights import Weighted
    from envkit.oracles.records import summarize, task_stats

    why = "oracle gave up: fast-downward found no plan within 20 s: the agent holds x, which no receptacle accepts"
    root = Root(0, 0, 1, "obs")
    outs = [ContinuationOutcome(root, "native", reason=why)]
    outs += [ContinuationOutcome(root, "native", reason="dead root skipped: no", dead_end=True)] * 3
    stats = task_stats([], outs, [Weighted((), ())] * 4)
    assert (stats["roots_tried"], stats["dead_roots_skipped"], stats["stop_reasons"]) == (1, 3, {why: 1})
    summary = summarize([stats])
    assert summary["totals"]["stop_reasons"] == {why: 1} and summary["totals"]["dead_roots_skipped"] == 3
    (tmp_path / "run.parquet.summary.json").write_text(json.dumps(summary))
    res = runner.invoke(app, ["inspect", str(tmp_path / "run.parquet.summary.json")], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    text = _plain(res.output)
    assert f"1 x {why}" in text
    assert re.search(r"dead_roots_skipped\W+3", text)


def test_piped_rollout_prints_progress_lines_and_the_journal(tmp_path):
    # stdout is a pipe here: no live bar can draw, so plain progress lines go to stderr.
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "toy.parquet"
    cmd = [
        sys.executable,
        "-m",
        "envkit.oracles.cli",
        "rollout",
        *TOY,
        "--tasks",
        "4",
        "--group",
        "2",
        "--out",
        str(out),
    ]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(repo)}
    )
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("SERO tasks: ")]
    assert lines[0] == "SERO tasks: 0/4 (0%) 0 s elapsed | starting"
    assert lines[-1].startswith("SERO tasks: 4/4 (100%) ") and "rescued " in lines[-1]
    assert f"journal: {out}.journal.jsonl (" in _plain(done.stdout)
