"""SWE-v0: one owner cannot fill the shared layer store so that another's honest episode fails (issue 33).

Each test is an attack through the env's public interface (bash + snapshot), then checks that the attacker's
own snapshot is refused with a clear error and that another owner's honest episode still snapshots and earns
1.0 with the gold fix. Before issue 33 the store had one quota for everyone: the attacker filled it and the
honest submit scored 0 (its freeze was refused); directories' blocks were not counted at all.
"""

from __future__ import annotations

import json
import os

import pytest

from envkit.envs.swe.backend import Limits
from envkit.errors import EnvkitError

pytestmark = pytest.mark.slow

TASK = 2


def bash(env, command: str) -> str:  # type: ignore[no-untyped-def]
    return env.step(json.dumps({"tool": "bash", "command": command, "timeout": 120}))[0]


def layer_blocks(store, layer: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(allocated bytes, inodes) of one layer on disk, directories included (what `du` counts)."""
    blocks = inodes = 0
    root = store.path(layer)
    for dirpath, dirnames, filenames in os.walk(root):
        blocks += os.lstat(dirpath).st_blocks * 512
        inodes += 1
        for name in filenames:
            blocks += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            inodes += 1
    return blocks, inodes


def honest_episode_earns_one(env) -> None:  # type: ignore[no-untyped-def]
    snap = env.snapshot()
    env.step(json.dumps({"tool": "create", "path": "gold.patch", "file_text": env.task.patch}))
    assert "OK" in bash(env, "git apply gold.patch && rm gold.patch && echo OK")
    _, r, *_, info = env.step(json.dumps({"tool": "submit"}))
    assert r == 1.0, info.get("grade_void")
    env.discard(snap)


@pytest.fixture()
def shared_store(swe_tasks):
    from envkit.envs.swe.env import SWEEnv
    from envkit.envs.swe.layers import LayerStore

    store = LayerStore(max_mb=64)
    made = []

    def make(owner: str, **kw):  # type: ignore[no-untyped-def]
        env = SWEEnv(tasks=swe_tasks, max_steps=60, test_timeout=120, store=store, owner=owner, **kw)
        env.reset(seed=0, options={"index": TASK})
        made.append(env)
        return env

    yield store, make
    for env in made:
        env.close()
    store.close()


def test_one_owner_cannot_fill_the_store_for_another(shared_store):
    store, make = shared_store
    honest = make("honest")
    attackers = [make("attacker"), make("attacker")]  # two episodes of one owner share its budget
    bases = [env.snapshot() for env in attackers]
    snaps, refused = [], []
    for env in attackers:  # fill with big layers, then ever smaller ones, until not even 8 KiB fits
        for size in ("6M", "1M", "128K", "8K"):
            for i in range(40):
                bash(env, f"head -c {size} /dev/urandom > /repo/blob{size}{i}")
                try:
                    snaps.append((env, env.snapshot()))
                except EnvkitError as exc:
                    refused.append(str(exc))
                    bash(env, f"rm /repo/blob{size}{i}")
                    break
    assert len(refused) == 8, refused  # every size in both episodes was stopped, by the owner's budget
    assert all("owner 'attacker'" in why and "budget" in why for why in refused), refused
    assert store.budgets.owners["attacker"].bytes <= store.budgets.owner_bytes
    honest_episode_earns_one(honest)  # before issue 33: the store was full, the freeze failed, reward 0
    for env, base in zip(attackers, bases, strict=True):  # back to the start: the blob layers lose their last holder
        env.restore(base)
        env.discard(base)
    for env, s in snaps:
        env.discard(s)
    assert store.budgets.owners["attacker"].bytes < 1 << 20
    honest_episode_earns_one(attackers[0])  # the attacker's env keeps serving once it discards


def test_directories_count_at_their_real_disk_use(shared_store):
    store, make = shared_store
    env = make("dirs")
    before = set(os.listdir(store.root / "l"))
    bash(env, "mkdir -p /repo/d && cd /repo/d && seq 2000 | xargs mkdir")
    s = env.snapshot()
    (new,) = set(os.listdir(store.root / "l")) - before
    disk, inodes = layer_blocks(store, new)
    assert disk > 2000 * 4096 * 0.9  # ext4 (or any block file system): each directory takes a block
    assert store.usage_of(new) == (disk, inodes)  # before issue 33: directories counted 0 bytes
    from envkit.serve.budget import native_bytes

    assert native_bytes(env, s) == disk  # what envkit-serve charges the snapshot beyond its Python size
    env.discard(s)
    bash(env, "rm -rf /repo/d")
    honest_episode_earns_one(env)


def test_episode_inode_budget(shared_store):
    store, make = shared_store
    env = make("inodes", limits=Limits(repo_inodes=2000, snapshot_inodes=3000))
    base = env.snapshot()
    bash(env, "mkdir /repo/f1 && cd /repo/f1 && seq 1500 | xargs touch")
    first = env.snapshot()
    bash(env, "mkdir /repo/f2 && cd /repo/f2 && seq 1500 | xargs touch")
    with pytest.raises(EnvkitError, match=r"this episode.s snapshots .*Limits.snapshot_inodes"):
        env.snapshot()  # each snapshot is within repo_inodes, their sum is not
    assert len(os.listdir(os.path.join(env.root, "f2"))) == 1500  # refused, nothing lost
    env.restore(base)
    env.discard(first)  # nothing holds the f1 layer any more: its inodes go back to the episode
    bash(env, "mkdir /repo/f2 && cd /repo/f2 && seq 1500 | xargs touch")
    second = env.snapshot()
    assert env.account.inodes <= 3000
    env.restore(base)
    env.discard(second)
    honest_episode_earns_one(env)
    env.discard(base)


def test_episode_byte_budget(shared_store):
    _, make = shared_store
    env = make("bytes", limits=Limits(repo_mb=16, snapshot_mb=20))
    base = env.snapshot()
    bash(env, "head -c 12M /dev/urandom > /repo/a")
    first = env.snapshot()
    bash(env, "head -c 12M /dev/urandom > /repo/b")
    with pytest.raises(EnvkitError, match=r"this episode.s snapshots .*Limits.snapshot_mb"):
        env.snapshot()
    env.restore(base)
    env.discard(first)
    honest_episode_earns_one(env)
    env.discard(base)
