"""Round three of SWE grading (issue 33): each forgery of `swe_round3` earns 0 on the host task (more_itertools, the
host's Python) with the static screen on (as shipped) and off (the grading rules and runtime layers alone), and on
the venv task (parse_type in its own prefix) with it off; the gold patch still earns 1 and the buggy tree 0. The image task runs
the same attacks in ``tests/envs/swe/test_swe_images.py`` (container).

Cost (slow): two gradings per test (the forged one, the honest one), 25 tests: ~2 min on 2 idle cores.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _round3():
    path = Path(__file__).with_name("swe_round3.py")
    spec = importlib.util.spec_from_file_location("_swe_round3", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


R3 = _round3()
HOST_TASK = 2  # more_itertools exactly_n: 3 required tests, 2 fail with the bug
VENV_TASK = 1  # parse_type make_variant: 51 required tests, 12 fail with the bug


@pytest.fixture(scope="module")
def parse_type_tasks(swe_tasks):
    from envkit.envs.swe.backend import SandboxError
    from envkit.envs.swe.env_build import build_prefix
    from envkit.envs.swe.tasks import TASKS_DIR, load_tasks

    try:
        build_prefix("parse_type")
    except SandboxError as exc:
        pytest.skip(f"the parse_type environment cannot be built here: {exc}")
    return load_tasks(TASKS_DIR / "parse_type.jsonl.gz")


@pytest.fixture(params=["host", "venv"])
def agent(request, swe_tasks, swe_agent_cls):
    from envkit.envs.swe.env import SWEEnv

    if request.param == "host":
        env, index, pkg = SWEEnv(tasks=swe_tasks, max_steps=40, test_timeout=120), HOST_TASK, "more_itertools"
    else:
        tasks = request.getfixturevalue("parse_type_tasks")
        env, index, pkg = SWEEnv(tasks=tasks, max_steps=40, test_timeout=120), VENV_TASK, "parse_type"
    env.reset(seed=0, options={"index": index})
    a = swe_agent_cls(env)
    a.pkg = pkg
    yield a
    env.close()


def attacked(agent, command: str, *, screen: bool) -> tuple[float, dict]:
    """Run the attack's command, submit; then restore and check the honest gold fix from the same state earns 1."""
    env = agent.env
    snap = env.snapshot()
    env.screen_diff = screen
    try:
        out = agent.bash(command)
        assert "[exit code" not in out, out
        r, info = agent.submit()
        info["output"] = env.last_grade.output
    finally:
        env.screen_diff = True
    env.restore(snap)
    agent.apply_gold()
    r2, info2 = agent.submit()
    assert r2 == 1.0 and info2["success"] and info2["grade_void"] == [], info2
    return r, info


@pytest.mark.parametrize(
    ("agent", "screen"),
    [("host", False), ("host", True), ("venv", False)],  # the venv task with the screen off only (CI cost)
    ids=["host-rules+runtime", "host-shipped", "venv-rules+runtime"],
    indirect=["agent"],
)
@pytest.mark.parametrize("attack", sorted(R3.ATTACKS))
def test_round3_forgery_earns_nothing(agent, attack, screen):
    cmd = R3.ATTACKS[attack](agent.pkg, list(agent.env.task.test_ids))
    r, info = attacked(agent, cmd, screen=screen)
    assert r == 0.0 and not info["success"], (attack, info["grade_void"], info["output"][-3000:])
    assert info["tests_failed"], info


def test_control_gold_pays_and_the_bug_does_not(agent):
    env = agent.env
    snap = env.snapshot()
    r, info = agent.submit()
    assert r == 0.0 and info["tests_failed"] and info["grade_void"] == [], info
    env.restore(snap)
    agent.apply_gold()
    r, info = agent.submit()
    assert r == 1.0 and info["grade_void"] == [] and info["tests_failed"] == [], info


def test_a_runner_planted_at_the_old_predictable_path_is_never_run(agent):
    """Any local uid could create /tmp/envkit-swe-grader-<pid> (round two reused it, never removed it)."""
    d = os.path.join(tempfile.gettempdir(), f"envkit-swe-grader-{os.getpid()}")
    os.makedirs(d, exist_ok=True)
    for name in ("grade_runner.py", "grade_session.py"):
        Path(d, name).write_text(R3.PLANTED_RUNNER)
    before = set(Path(tempfile.gettempdir()).glob("envkit-swe-grade-*"))
    try:
        r, info = agent.submit()
    finally:
        for name in ("grade_runner.py", "grade_session.py"):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
    assert r == 0.0 and info["tests_failed"], info
    assert set(Path(tempfile.gettempdir()).glob("envkit-swe-grade-*")) == before  # the run's private dir is gone


def test_grading_dirs_are_private_and_removed():
    from envkit.envs.swe.grading import private_runner_dir

    with private_runner_dir() as d:
        parent = os.path.dirname(d)
        st = os.lstat(parent)
        assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o022 == 0
        for name in ("grade_runner.py", "grade_session.py"):
            f = os.lstat(os.path.join(d, name))
            assert stat.S_ISREG(f.st_mode) and f.st_uid == os.geteuid() and stat.S_IMODE(f.st_mode) & 0o222 == 0
    assert not os.path.exists(parent)
