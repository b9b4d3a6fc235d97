"""A new user's first hour: every console script answers --help (without torch), the edges fail with what to do,
records keep the env's own task id, envkit-serve starts from the main venv's shell.

Cost: ~10 s in the default run (mostly the --help subprocesses); the envkit-serve walk (slow) ~10 s more.
The docs' own blocks run in tests/test_docs.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tyro")

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

HELPS = [
    ("envkit-oracle", "--help"),
    ("envkit-oracle", "rollout", "--help"),
    ("envkit-oracle", "inspect", "--help"),
    ("envkit-oracle", "export", "--help"),
    ("envkit-oracle", "envs", "--help"),
    ("envkit-train", "--help"),
    ("envkit-train", "local", "--help"),
    ("envkit-train", "openrlhf", "--help"),
    ("envkit-serve", "--help"),
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.mark.parametrize("argv", HELPS, ids=" ".join)
def test_every_console_script_answers_help(argv):
    """What a new user types first. Its speed is a benchmark (scripts/bench_help.py), not a timed test."""
    script = BIN / argv[0]
    if not script.exists():
        pytest.skip(f"{argv[0]} is not installed in {BIN}: pip install -e .")
    proc = subprocess.run([str(script), *argv[1:]], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower() and "--" in proc.stdout


def test_help_imports_no_torch():
    """`envkit-train local --help` and `envkit-serve --help` parse their configs without torch, scipy.stats or the
    server stack (what made --help take 9 s)."""
    code = (
        "import sys\nfrom envkit.trainers import cli\nfrom envkit.serve import cli as serve_cli\n"
        "for f, a in ((cli.main, ['local', '--help']), (serve_cli.main, ['--help'])):\n"
        "    try: f(a)\n    except SystemExit: pass\n"
        "bad = [m for m in ('torch', 'transformers', 'scipy.stats', 'fastapi') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_option_typo_hint_is_the_closest_whole_name(capsys):
    from envkit.oracles import cli

    with pytest.raises(SystemExit):
        cli.main(["rollout", "--task", "3"])
    assert "No such option: --task (did you mean --tasks?)" in capsys.readouterr().err  # not --chunk-tasks


def test_envs_table_fits_80_columns_without_cutting_an_id(monkeypatch, capsys):
    from envkit.oracles import cli
    from envkit.registration import ENVS

    monkeypatch.setenv("COLUMNS", "80")
    cli.main(["envs"])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    for env_id in ENVS:
        assert env_id in out, env_id  # whole, never "envki…"


def test_export_of_an_interrupted_run_says_how_to_finish_it(tmp_path, capsys):
    from envkit.io import RecordStore
    from envkit.oracles import cli

    out = tmp_path / "run.parquet"
    RecordStore(out, {"env_id": "envkit/Toy-v0"}).append("task-0", [{"x": 1}])  # a run killed after one task
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", str(out), "--format", "sft"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "is not written yet" in err and "1 tasks are in its journal" in err and "resumes from the journal" in err


def test_records_and_both_exports_keep_the_envs_own_task_id(tmp_path):
    from envkit.io import read_records
    from envkit.oracles.export import build_rows
    from envkit.oracles.pipeline import RunConfig, run

    out = tmp_path / "toy.jsonl"
    run(
        RunConfig(
            env_id="envkit/Toy-v0", tasks=3, group=2, out=str(out), backend="inprocess", workers=1, progress=False
        )
    )
    recs = read_records(out)
    by_task = {r["task_id"]: r["env_task_id"] for r in recs}
    assert set(by_task) == {"task-0", "task-1", "task-2"}
    assert all(v and v.startswith("goal-") for v in by_task.values()), by_task  # ToyEnv's info["task_id"]
    for fmt in ("sft", "rl"):
        rows = build_rows(recs, fmt)
        assert rows and all(r["env_task_id"] == by_task[r["task_id"]] for r in rows)


def test_shipped_swe_task_set_by_name_from_any_folder(tmp_path, monkeypatch):
    from envkit.envs.swe.tasks import load_tasks, shipped_task_sets
    from envkit.errors import DataNotFoundError

    monkeypatch.chdir(tmp_path)
    assert {"more_itertools", "parse_type"} <= set(shipped_task_sets())
    assert len(load_tasks("parse_type")) == 12
    assert len(load_tasks("envs/swe/tasks/parse_type.jsonl.gz")) == 12  # the old checkout-relative spelling
    with pytest.raises(DataNotFoundError, match=r"Shipped sets \(tasks=NAME\): more_itertools, parse_type"):
        load_tasks("parse_typo")


def test_pool_error_names_the_missing_main_guard(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(
        "from envkit.pool import EnvFactory, make_pool\n"
        "pool = make_pool(EnvFactory('envkit/Toy-v0'), 1, backend='subprocess')\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode != 0
    assert 'has no `if __name__ == "__main__":` guard' in proc.stderr, proc.stderr[-2000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_envkit_serve_from_the_main_venv_runs_in_the_interop_venv():
    """The `envkit-serve` on a user's PATH (the main venv's, no serve deps there) serves: it re-runs itself in
    the interop venv that scripts/setup.sh built."""
    from tests.conftest import interop_venv

    venv = interop_venv()
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"the interop venv {venv} is missing: bash .ci/install.d/40-interop.sh")
    script = BIN / "envkit-serve"
    if not script.exists():
        pytest.skip(f"envkit-serve is not installed in {BIN}: pip install -e .")
    import envkit

    port = _free_port()
    env = {**_env(), "ENVKIT_INTEROP_VENV": str(venv)}
    proc = subprocess.Popen([str(script), "envkit/Toy-v0", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                remote = envkit.make("envkit/Toy-v0", remote=f"http://127.0.0.1:{port}")
                obs, _ = remote.reset(seed=0)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "envkit-serve did not answer within 120 s"
                time.sleep(0.5)
        assert obs.startswith("You are at cell")
        remote.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out = proc.stdout.read() if proc.stdout else ""
    assert "envkit-serve: envkit/Toy-v0 on http://" in out


def test_webshop_missing_product_file_warning_is_said_once_per_run_not_per_worker(tmp_path):
    pytest.importorskip("bm25s", reason="WebShop extra not installed: pip install -e '.[webshop]'")
    script = tmp_path / "pool.py"
    script.write_text(
        "from envkit.pool import EnvFactory, make_pool\n"
        "if __name__ == '__main__':\n"
        "    pool = make_pool(EnvFactory('envkit/WebShop-v0'), 3, backend='subprocess')\n"
        "    pool.close()\n"
    )
    env = {**_env(), "WEBSHOP_DATA": str(tmp_path)}  # set, but holds no product file
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("holds no product file") == 1, proc.stderr[-3000:]
