"""SWE-v0 against disk, inode and memory amplification (issue 23, section 2): one test per class.

Each test makes the env (or its sandbox) do something costly, asserts the cost is bounded (refused with an
envkit error, or contained), and then that the env keeps serving: the tree is mounted, a command runs, a
snapshot or grade works.
"""

from __future__ import annotations

import json
import os

import pytest

from envkit.envs.swe.backend import Limits
from envkit.errors import EnvkitError

pytestmark = pytest.mark.slow

TASK = 2


def store_blocks(store) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(allocated bytes, inodes) of every layer on disk."""
    blocks = inodes = 0
    for dirpath, dirnames, filenames in os.walk(store.root / "l"):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            blocks += st.st_blocks * 512
            inodes += 1
    return blocks, inodes


@pytest.fixture()
def make_env(swe_tasks):
    from envkit.envs.swe.env import SWEEnv

    made = []

    def make(**kw):  # type: ignore[no-untyped-def]
        env = SWEEnv(tasks=swe_tasks, max_steps=40, test_timeout=120, **kw)
        env.reset(seed=0, options={"index": TASK})
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def bash(env, command: str) -> str:  # type: ignore[no-untyped-def]
    return env.step(json.dumps({"tool": "bash", "command": command, "timeout": 120}))[0]


def still_serving(env) -> None:  # type: ignore[no-untyped-def]
    assert "more_itertools" in bash(env, "ls /repo")
    snap = env.snapshot()
    env.step(json.dumps({"tool": "create", "path": "gold.patch", "file_text": env.task.patch}))
    assert "OK" in bash(env, "git apply gold.patch && rm gold.patch && echo OK")
    _, r, *_ = env.step(json.dumps({"tool": "submit"}))
    assert r == 1.0
    env.restore(snap)
    env.discard(snap)


def test_sparse_files_keep_holes_and_count_apparent_size(make_env):
    env = make_env(limits=Limits(repo_mb=64))
    before = store_blocks(env.store)[0]
    bash(env, "truncate -s 50M /repo/a")
    s = env.snapshot()
    assert store_blocks(env.store)[0] - before < 4 << 20  # the 50 MB hole costs nothing in the store
    bash(env, "truncate -s 100M /repo/b")  # apparent 100 MiB of new edits > repo_mb
    with pytest.raises(EnvkitError, match="apparent size"):
        env.snapshot()
    _, r, *_, info = env.step(json.dumps({"tool": "submit"}))  # grading refuses too: a failed grade, no exception
    assert r == 0.0 and "too large" in " ".join(info["grade_void"])
    env.restore(s)
    assert store_blocks(env.store)[0] - before < 4 << 20
    still_serving(env)


def test_inode_budget_per_layer(make_env):
    env = make_env(limits=Limits(repo_inodes=3000))
    _, before = store_blocks(env.store)
    out = bash(env, "cd /tmp && seq 5000 | (cd /repo && xargs touch) 2>&1 | tail -1; ls /repo | wc -l")
    try:
        env.snapshot()
    except EnvkitError as exc:
        assert "files and directories" in str(exc)
    assert store_blocks(env.store)[1] - before <= 3000 + 16, out
    bash(env, "cd /repo && git clean -fdxq . 2>/dev/null; rm -f [0-9]*")
    still_serving(env)


def test_store_quota_bytes_and_inodes(swe_tasks):
    from envkit.envs.swe.env import SWEEnv
    from envkit.envs.swe.layers import LayerStore, StoreQuotaError

    store = LayerStore(floor_mb=0, floor_inodes=0)  # the store-wide quota alone (floors: test_swe_store_shares.py)
    env = SWEEnv(tasks=swe_tasks, max_steps=40, test_timeout=120, store=store)
    try:
        env.reset(seed=0, options={"index": TASK})
        store.max_inodes = store.used_inodes + 2500
        snaps = []
        with pytest.raises(StoreQuotaError, match="discard snapshots"):
            for i in range(4):
                bash(env, f"mkdir -p /repo/f{i} && cd /repo/f{i} && seq 1000 | xargs touch")
                snaps.append(env.snapshot())
        assert len(snaps) == 2
        assert store.used_inodes <= store.max_inodes
        assert store_blocks(store)[1] <= store.max_inodes
        store.max_bytes = store.used_bytes + (8 << 20)
        bash(env, "rm -rf /repo/f*; head -c 12M /dev/urandom > /repo/big")
        with pytest.raises(StoreQuotaError, match="MiB"):
            env.snapshot()
        assert os.path.getsize(os.path.join(env.root, "big")) == 12 << 20  # the edits are still there
        bash(env, "rm /repo/big")
        for s in snaps:
            env.discard(s)
        store.max_bytes = 1 << 40
        still_serving(env)
    finally:
        env.close()
        store.close()


def test_dev_shm_is_capped_and_dev_read_only(make_env):
    env = make_env(limits=Limits(shm_mb=16))
    out = bash(env, "head -c 200M /dev/zero > /dev/shm/x; du -m /dev/shm/x; touch /dev/y 2>&1; rm -f /dev/shm/x")
    assert "No space left" in out and "Read-only" in out, out
    assert env.backend.isolation["aggregate_memory"].startswith("memory cgroup")
    still_serving(env)


def test_aggregate_memory_bound(make_env):
    """Three processes holding 300 MiB each: more than the sandbox's memory cgroup (memory + tmp + shm + repo)."""
    env = make_env(limits=Limits(memory_mb=512, tmp_mb=64, shm_mb=16, repo_mb=64))
    hold = 'python -c \'import time; b = bytearray(300 << 20); b[::4096] = b"x" * len(b[::4096]); time.sleep(4); print("held")\''
    out = bash(env, f"for i in 1 2 3; do {hold} & done; wait")
    assert out.splitlines().count("held") < 3, out
    still_serving(env)


def test_one_memory_limit_for_processes_and_tmpfs_together(make_env):
    """Issue 33: /tmp, /repo and a process each within their own cap (250 of 400, 250 of 400, 250 of 512 MiB),
    together over the episode's one limit (640 MiB): before, the limit was the sum of the parts (1,328 MiB)."""
    env = make_env(limits=Limits(memory_mb=512, tmp_mb=400, shm_mb=16, repo_mb=400, episode_memory_mb=640))
    assert "640 MiB" in env.backend.isolation["aggregate_memory"]
    hold = 'python -c \'import time; b = bytearray(250 << 20); b[::4096] = b"x" * len(b[::4096]); print("held")\''
    out = bash(env, f"head -c 250M /dev/zero > /tmp/t && head -c 250M /dev/zero > /repo/r && echo FILLED; {hold}")
    lines = out.splitlines()  # (a kill message quotes the command: compare whole lines)
    assert "FILLED" in lines and "held" not in lines and "Killed" in out, out
    bash(env, "rm -f /repo/r")
    still_serving(env)


@pytest.mark.parametrize("shape", ["deep", "long-names"])
def test_deep_tree_snapshot_and_submit(make_env, shape):
    env = make_env()
    if shape == "deep":
        make = "mkdir -p /repo/d/$(printf 'd/%.0s' $(seq 1100)) && echo MADE"
    else:  # a path longer than PATH_MAX, made one relative step at a time
        make = (
            "cd /repo && for i in $(seq 30); do mkdir $(printf 'x%.0s' $(seq 200)) && cd x*; done; touch f; echo MADE"
        )
    assert "MADE" in bash(env, make)
    try:
        s = env.snapshot()
    except EnvkitError:
        s = None
    assert "more_itertools" in bash(env, "ls /repo")  # still mounted
    _, r, term, _, info = env.step(json.dumps({"tool": "submit"}))  # graded (or a failed grade): no exception
    assert term and r == 0.0
    if s is not None:
        env.restore(s)
        env.discard(s)
    else:
        env.reset(seed=0, options={"index": TASK})
    bash(env, "rm -rf /repo/d /repo/x*")
    still_serving(env)


def test_failed_snapshot_step_discards_its_snapshot(make_env):
    from envkit.errors import InvalidActionError
    from envkit.pool import dispatch

    env = make_env()
    bash(env, "echo edit > /repo/new.txt")  # dirty: the snapshot makes a layer
    layers = env.store.layer_count()
    for _ in range(3):
        with pytest.raises(InvalidActionError):
            dispatch(env, "snapshot_step", ("x" * 70_000,), {})
        env.store._empty_trash()
    assert env.store.layer_count() <= layers + 1  # the tree's own new layer, none per failed call
    assert env.store.refcount(env.tree.stack[-1]) == 1  # held by the tree only: no failed call kept a reference
    refs = sum(env.store.refcount(x) for x in env.tree.stack)
    snap, (obs, *_) = dispatch(env, "snapshot_step", (json.dumps({"tool": "bash", "command": "echo ok"}),), {})
    assert "ok" in obs
    env.discard(snap)
    assert sum(env.store.refcount(x) for x in env.tree.stack) == refs
    still_serving(env)
