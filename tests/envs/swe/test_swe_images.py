"""Image-backed tasks on the docker backend (Podman): the parse_type image (its own system and Python, no host
binds), SWE-bench-format records whose tree and interpreter come from an image, missing-image errors, and the
Podman service keeping its `oom` files out of the caller's directory. Skipped when no engine starts here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from envkit.envs.swe.backend import SandboxError
from envkit.envs.swe.environments import TaskEnvironment

pytestmark = pytest.mark.container

#: A host directory an image-backed task must never see: this checkout. (The host Python's packages are checked by
#: import: the image's own pins sit at the path envkit's image build gives them, which may equal the host's.)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(scope="module")
def parse_type_image(podman_url):
    from envkit.envs.swe.env_build import build_image

    try:
        return build_image("parse_type")
    except SandboxError as exc:
        pytest.skip(f"the parse_type image cannot be built here: {exc}")


@pytest.fixture()
def image_env(podman_url, parse_type_image):
    from envkit.envs.swe.container import DockerBackend
    from envkit.envs.swe.env import SWEEnv
    from envkit.envs.swe.tasks import TASKS_DIR, load_tasks

    env = SWEEnv(tasks=load_tasks(TASKS_DIR / "parse_type.jsonl.gz"), backend=DockerBackend(base_url=podman_url))
    yield env
    env.close()


def bash(cmd: str) -> str:
    return json.dumps({"tool": "bash", "command": cmd})


def test_image_task_runs_in_its_own_system_with_snapshots_and_rewards(image_env):
    from envkit.oracles.base import run_oracle
    from envkit.oracles.swe import GoldPatchOracle

    env = image_env
    env.reset(seed=0, options={"index": 1})
    probe = (
        "id -u; python -c 'import sys, six, pytest, parse; print(sys.version_info[:2], six.__version__, "
        "pytest.__version__, parse.__version__)'; python -c 'import yaml' 2>&1 | tail -1; "
        f"ls {REPO_ROOT} 2>&1 | grep -c 'No such'; ls /repo/parse_type/builder.py; cd parse_type; export K=1"
    )
    out, *_, info = env.step(bash(probe))
    lines = out.splitlines()
    assert lines[0] == "65534" and lines[1] == "(3, 11) 1.16.0 8.3.5 1.20.2", out  # the image's pins, not the host's
    assert "No module named 'yaml'" in lines[2] and lines[3] == "1", out  # no host site-packages, no host dirs
    assert info["cwd"] == "/repo/parse_type"
    _, r, *_ = env.step('{"tool": "submit"}')
    assert r == 0.0  # the start tree fails its FAIL_TO_PASS tests, graded in the image
    obs, info = env.reset(seed=0, options={"index": 1})
    snap = env.snapshot()
    env.step(bash("rm -rf /repo/parse_type && export GONE=1"))
    out, *_ = env.step(bash("test -e /repo/parse_type; echo $?; echo $GONE"))
    assert out.split() == ["1", "1"]
    obs, info = env.restore(snap)
    out, *_ = env.step(bash("ls /repo/parse_type/builder.py; echo ${GONE:-unset}"))
    assert out.split() == ["/repo/parse_type/builder.py", "unset"]
    obs, info = env.restore(snap)
    run = run_oracle(env, GoldPatchOracle(), obs, info, max_steps=10)
    assert run.success and run.steps[-1].reward == 1.0


def test_the_agent_cannot_poison_the_image(image_env):
    """Writes to the image's site-packages are refused (root-owned), and nothing outside /repo survives a
    command (a fresh container each time): the start tree still scores 0 after the attempt."""
    env = image_env
    env.reset(seed=0, options={"index": 0})
    site = "/usr/lib/python3/dist-packages"
    attack = (
        f"{{ echo 'raise SystemExit(0)' >> {site}/_pytest/runner.py; }} 2>&1 | grep -c 'Permission denied'; "
        "echo planted > /tmp/planted; echo ok"
    )
    out, *_ = env.step(bash(attack))
    assert out.split() == ["1", "ok"], out
    out, *_ = env.step(bash("cat /tmp/planted 2>&1 | grep -c 'No such'"))
    assert out.strip() == "1"
    _, r, *_ = env.step('{"tool": "submit"}')
    assert r == 0.0


def test_missing_image_names_the_build_command(podman_url, tmp_path, monkeypatch):
    import envkit.envs.swe.environments as environments
    from envkit.envs.swe.container import DockerBackend

    b = DockerBackend(base_url=podman_url)
    try:
        with pytest.raises(SandboxError, match="never pulls"):
            b.select(TaskEnvironment(image="swebench/sweb.eval.x86_64.none_1776_such-1:latest"))
        (tmp_path / "unbuilt.requirements.txt").write_text("six==1.16.0\n")
        monkeypatch.setattr(environments, "SPECS_DIR", tmp_path)
        with pytest.raises(SandboxError, match=r"scripts/make_swe_env.py unbuilt --image"):
            b.select(TaskEnvironment(name="unbuilt"))
        with pytest.raises(SandboxError, match="does not exist"):
            b.select(TaskEnvironment(prefix=str(tmp_path / "venv")))
    finally:
        b.close()


def _swebench_image(base: str, tmp_path, task) -> str:
    """A SWE-bench-style instance image built with `podman build` from a local context: the parse_type image
    plus the task's start tree at /testbed (nothing pulled: --pull=never)."""
    from envkit.envs.swe.layers import LayerStore
    from envkit.envs.swe.workspace import task_layers

    store = LayerStore.default()
    layers = task_layers(store, task)
    ctx = tmp_path / "ctx"
    testbed = ctx / "testbed"
    for layer in layers.start:  # source then bug layer (regular files only; the bug layer has no whiteouts)
        shutil.copytree(store.path(layer), testbed, dirs_exist_ok=True, symlinks=True)
    (ctx / "Containerfile").write_text(f"FROM {base}\nCOPY testbed /testbed\n")
    tag = "envkit-test-swebench-parse-type:1"
    proc = subprocess.run(
        ["podman", "build", "--pull=never", "-q", "-t", tag, "-f", str(ctx / "Containerfile"), str(ctx)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"podman build does not work here: {proc.stderr[-500:]}")
    return tag


def test_swebench_records_with_an_image_run_through_the_image(podman_url, parse_type_image, tmp_path):
    """A SWE-bench-format record (JSON-string test lists, `image_name`, no `source`): the tree is the image's
    /testbed, tests run with the image's Python, the work tree is bound at /testbed and /repo."""
    from envkit.envs.swe.container import DockerBackend
    from envkit.envs.swe.env import SWEEnv
    from envkit.envs.swe.tasks import TASKS_DIR, load_swebench, load_tasks
    from envkit.oracles.base import run_oracle
    from envkit.oracles.swe import GoldPatchOracle

    task = load_tasks(TASKS_DIR / "parse_type.jsonl.gz")[2]
    image = _swebench_image(parse_type_image, tmp_path, task)
    record = {
        "instance_id": "parse-type__parse_type-1",
        "repo": "jenisys/parse_type",
        "base_commit": "0" * 40,
        "patch": task.patch,
        "test_patch": "",
        "problem_statement": task.problem_statement,
        "FAIL_TO_PASS": json.dumps(list(task.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(task.pass_to_pass)),
        "image_name": image,
        "env_path": ["/usr/bin"],
    }
    path = tmp_path / "swebench.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (loaded,) = load_swebench(path)
    assert loaded.source == f"image:{image}:/testbed" and loaded.environment.workdir == "/testbed"  # type: ignore[union-attr]
    env = SWEEnv(tasks=[loaded], backend=DockerBackend(base_url=podman_url), max_steps=10)
    try:
        obs, info = env.reset(seed=0)
        out, *_ = env.step(bash("cmp /testbed/parse_type/builder.py /repo/parse_type/builder.py && echo same"))
        assert out.strip() == "same"
        _, r, *_ = env.step('{"tool": "submit"}')
        assert r == 0.0
        obs, info = env.reset(seed=0)
        run = run_oracle(env, GoldPatchOracle(), obs, info, max_steps=10)
        assert run.steps[-1].reward == 1.0, env.last_grade.output[-1500:]  # type: ignore[union-attr]
    finally:
        env.close()
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True)


def test_oom_kills_leave_the_callers_directory_untouched(tmp_path, monkeypatch):
    """conmon writes an `oom` file into its cwd when a container is OOM-killed: the service runs in its state dir."""
    from envkit.envs.swe.backend import Limits
    from envkit.envs.swe.container import DockerBackend, start_podman_service

    caller = tmp_path / "caller"
    caller.mkdir()
    monkeypatch.chdir(caller)
    try:
        url, proc = start_podman_service(tmp_path / "service")
    except SandboxError as exc:
        pytest.skip(f"no podman service: {exc}")
    try:
        b = DockerBackend(Limits(memory_mb=64), base_url=url)
        tree = tmp_path / "tree"
        tree.mkdir()
        os.chown(tree, 65534, 65534)
        tmp_path.chmod(0o755)
        r = b.run(str(tree), "python3 -c 'x = bytearray(512 << 20); print(len(x))'", cwd="/repo", env=b.base_env(),
                  timeout=60)  # fmt: skip
        b.close()
        assert r.exit_code not in (0, None) and "536870912" not in r.output, r.output
        assert os.listdir(caller) == [] and os.getcwd() == str(caller)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_every_parse_type_task_validates_in_its_image(podman_url, parse_type_image):
    from envkit.envs.swe.container import DockerBackend
    from envkit.envs.swe.tasks import TASKS_DIR, load_tasks
    from envkit.oracles.swe import validate

    tasks = load_tasks(TASKS_DIR / "parse_type.jsonl.gz")
    checks = validate(tasks, backend=DockerBackend(base_url=podman_url))
    assert [(c.buggy_reward, c.gold_reward) for c in checks] == [(0.0, 1.0)] * len(tasks)


@pytest.mark.slow
def test_image_backed_env_passes_the_snapshot_contract(podman_url, parse_type_image, monkeypatch):
    import gymnasium as gym

    import envkit
    from envkit.envs.swe.tasks import TASKS_DIR

    monkeypatch.setenv("DOCKER_HOST", podman_url)  # backend="docker" (fresh envs of the check build their own)
    env = gym.make("envkit/SWE-v0", tasks=str(TASKS_DIR / "parse_type.jsonl.gz"), backend="docker")
    try:
        report = envkit.check_snapshot_env(env, seed=0)
    finally:
        env.close()
    assert set(report.rules) == {1, 2, 3, 4, 5, 6}


def _forgery_payloads() -> dict[str, str]:
    """The issue's three forgeries (argv/report path + os._exit, patching __main__'s verdicts, patching json/marshal),
    as tests/security/test_swe_forgery.py spells them for the host-Python task."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "security" / "test_swe_forgery.py"
    spec = importlib.util.spec_from_file_location("_swe_forgery_payloads", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"argv": mod.ISSUE_ARGV, "main": mod.ISSUE_MAIN, "json": mod.ISSUE_JSON}


def test_grading_forgeries_earn_nothing_in_the_image(image_env):
    """The grading layers hold on an image-backed task too (its own Python and pytest): each forgery appended to
    the package under test earns 0 (runtime layers alone, the static screen off; then with the screen on), and an
    honest gold fix from the same state still earns 1."""
    from envkit.oracles.base import run_oracle
    from envkit.oracles.swe import GoldPatchOracle

    env = image_env
    obs, info = env.reset(seed=0, options={"index": 1})
    start = env.snapshot()
    for name, payload in _forgery_payloads().items():
        for screen in (False, True):
            env.restore(start)
            env.screen_diff = screen
            try:
                env.step(bash("cat >> /repo/parse_type/__init__.py <<'EOF'\n" + payload + "\nEOF"))
                _, r, *_, sub = env.step('{"tool": "submit"}')
            finally:
                env.screen_diff = True
            assert r == 0.0, (name, screen, sub)
            # no runtime void from the image's own pytest (its packages live outside sysconfig's scheme)
            assert not any("/usr/lib/python3/dist-packages/" in v for v in sub["grade_void"]), sub["grade_void"]
            if screen and name != "json":  # the screen lists harness names; patching json is caught at run time
                assert any("screen:" in v for v in sub["grade_void"]), (name, sub["grade_void"])
    obs, info = env.restore(start)
    run = run_oracle(env, GoldPatchOracle(), obs, info, max_steps=10)
    assert run.success and run.steps[-1].reward == 1.0  # the env keeps serving, honest work pays


def test_round3_forgeries_earn_nothing_in_the_image(image_env):
    """Issue 33's forgeries (tests/security/swe_round3.py: xfail, a pytest11 entry point in the image's
    ``parse_type.egg-info``, the channel silenced and SIGKILL, a plugin registered at call time, patched contextlib,
    code compiled under a standard-library name) each earn 0 on the image-backed task with the static screen off
    (the grading rules and runtime layers alone); the gold fix from the same state still earns 1. Cost: ~7 gradings."""
    import importlib.util
    from pathlib import Path

    from envkit.oracles.base import run_oracle
    from envkit.oracles.swe import GoldPatchOracle

    path = Path(__file__).resolve().parents[2] / "security" / "swe_round3.py"
    spec = importlib.util.spec_from_file_location("_swe_round3", path)
    assert spec is not None and spec.loader is not None
    r3 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(r3)
    env = image_env
    obs, info = env.reset(seed=0, options={"index": 1})
    start = env.snapshot()
    for name, attack in sorted(r3.ATTACKS.items()):
        env.restore(start)
        env.screen_diff = False
        try:
            out, *_ = env.step(bash(attack("parse_type", list(env.task.test_ids))))
            assert "[exit code" not in out, (name, out)
            _, r, *_, sub = env.step('{"tool": "submit"}')
        finally:
            env.screen_diff = True
        assert r == 0.0 and sub["tests_failed"], (name, sub["grade_void"])
    obs, info = env.restore(start)
    run = run_oracle(env, GoldPatchOracle(), obs, info, max_steps=10)
    assert run.success and run.steps[-1].reward == 1.0
