"""End to end on envkit/Toy-v0: random policy fails, SERO restores and the oracle turns roots into successes."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envkit  # noqa: F401
from envkit.capability import SnapshotCapability
from envkit.core import Root
from envkit.credit.sero import SeroConfig, SeroOptions, select_roots
from envkit.errors import EnvkitError
from envkit.io import read_records
from envkit.oracles.continuation import ContinuationJob, continue_from_root, job_for
from envkit.oracles.pipeline import RunConfig, run, summary_path
from envkit.policies import RandomAdmissiblePolicy
from envkit.rollout import Task, play
from envkit.snapshot import ReplayState
from envkit.testing import ToyEnv

# Toy episodes truncate at 10 steps: the random walk often misses the goal; a root with >= 7 steps left is always
# enough for the oracle (the line has 8 cells).
TOY = {"env_id": "envkit/Toy-v0", "env_kwargs": {"max_steps": 10}, "max_steps": 10}


def _cfg(tmp_path, name, **kw):
    return RunConfig(
        **{
            **TOY,
            "tasks": 6,
            "group": 4,
            "sero": SeroOptions(roots_per_group=2, min_budget=7),
            "progress": False,
            "out": str(tmp_path / name),
            **kw,
        }
    )


def test_random_fails_and_sero_rescues_in_subprocess_workers(tmp_path):
    summary = run(_cfg(tmp_path, "sub.parquet", workers=2, backend="subprocess"))
    tot = summary["totals"]
    assert tot["policy_successes"] < tot["trajectories"]  # the random policy fails some episodes
    assert tot["roots_tried"] > 0
    assert tot["continued_to_success"] == tot["roots_tried"] == tot["restored_native"]  # snapshots travel pickled
    assert tot["success_rate_after"] > tot["success_rate_before"]
    assert summary_path(tmp_path / "sub.parquet").exists()
    assert tot["state_key_env"] == 6  # every task's graph used the Toy env's exact keys (--state-key unset)
    recs = read_records(tmp_path / "sub.parquet")
    oracle = [r for r in recs if r["is_oracle"]]
    assert len(oracle) == tot["oracle_rows"] > 0
    by_root: dict[str, list[dict]] = {}
    for r in oracle:
        by_root.setdefault(r["root_id"], []).append(r)
    assert len(by_root) == tot["continued_to_success"]
    for rows in by_root.values():
        rows.sort(key=lambda r: r["step"])
        assert rows[-1]["reward"] == 1.0 and rows[-1]["terminated"]  # the env confirmed the success
        # the first oracle action weighs exactly 1 (the paper's, reach.first="one", default)
        assert rows[0]["reach_weight"] == 1.0 and rows[-1]["distance"] == 0
        assert rows[0]["step"] == rows[0]["root_step"]
        # the oracle continues from exactly the state the policy reached
        prefix = [
            r for r in recs if r["task_id"] == rows[0]["task_id"] and r["trajectory"] == rows[0]["root_trajectory"]
        ]
        assert {p["step"]: p["observation"] for p in prefix}[rows[0]["root_step"]] == rows[0]["observation"]
        # its earlier policy states now have a path to SUCCESS: the step into the root is at most K from it
        into_root = [p for p in prefix if p["step"] == rows[0]["root_step"] - 1]
        for p in into_root:
            assert p["distance"] <= len(rows)
    policy_rows = [r for r in recs if not r["is_oracle"]]
    assert all(r["reach_weight"] == 1.0 and r["root_id"] == "" for r in policy_rows)
    # the credit diagnostics add up from the records
    assert tot["policy_adv_sum"] == pytest.approx(sum(r["advantage"] for r in policy_rows), abs=1e-9)
    assert tot["oracle_adv_sum"] == pytest.approx(sum(r["weighted_advantage"] for r in oracle), abs=1e-9)
    at_min = sum(r["reach_weight"] <= 0.05 + 1e-12 for r in oracle)
    assert tot["w_min_share"] == pytest.approx(at_min / len(oracle))
    firsts = [rows[0]["oracle_loglik"] for rows in by_root.values()]
    assert tot["first_loglik_mean"] == pytest.approx(sum(firsts) / len(firsts))
    assert sum(r["step"] == 0 for r in policy_rows) == tot["trajectories"]


def test_output_does_not_depend_on_workers_or_backend(tmp_path):
    run(_cfg(tmp_path, "a.parquet", workers=1, backend="inprocess"))
    run(_cfg(tmp_path, "b.parquet", workers=3, backend="subprocess"))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_resume_skips_finished_tasks_and_refuses_other_settings(tmp_path):
    first = run(_cfg(tmp_path, "r.jsonl", tasks=3, workers=1, backend="inprocess"))
    assert first["session"]["tasks_run"] == 3
    again = run(_cfg(tmp_path, "r.jsonl", tasks=5, workers=1, backend="inprocess"))
    assert again["session"]["tasks_run"] == 2 and again["totals"]["tasks"] == 5
    full = run(_cfg(tmp_path, "full.jsonl", tasks=5, workers=2, backend="inprocess"))
    assert (tmp_path / "r.jsonl").read_text() == (tmp_path / "full.jsonl").read_text()
    timing = ("oracle_s", "restore_s", "oracle_env_s")
    assert {k: v for k, v in full["totals"].items() if k not in timing} == {
        k: v for k, v in again["totals"].items() if k not in timing
    }
    with pytest.raises(EnvkitError, match="other settings"):
        run(_cfg(tmp_path, "r.jsonl", tasks=5, workers=1, backend="inprocess", seed=9))


def _rollout(seed=3, steps=6):
    env = gym.make("envkit/Toy-v0", max_steps=20)
    obs, info = env.reset(seed=seed)
    return play(env, RandomAdmissiblePolicy(1), obs, info, task=Task("t", seed), max_steps=steps, record_snapshots=True)


def _root_at(tr, t):
    obs = tr.observations()
    return Root(0, 0, t, obs[t], tr.snapshot_at(t), tuple(s.action for s in tr.steps[:t]), 20 - t)


def test_select_roots_uses_the_recorded_snapshots():
    tr = _rollout(seed=3, steps=6)
    roots = select_roots([tr], group=0, config=SeroConfig(horizon=20, roots_per_group=10))
    assert not tr.success and roots
    for r in roots:
        assert r.snapshot is tr.snapshot_at(r.t)
        assert r.snapshot is not None  # max_steps cut the episode: play() snapshots its final state too
    assert not tr.done and any(r.t == tr.length for r in roots)


def test_restore_native_into_fresh_env_and_by_verified_replay():
    tr = _rollout()
    root = _root_at(tr, 3)
    job = job_for(root, tr, "envkit/Toy-v0", 20)
    out = continue_from_root(gym.make("envkit/Toy-v0", max_steps=20), job)
    assert out.restored_by == "native" and out.success and out.steps[0].observation == root.observation
    # No snapshot: verified replay from the task seed.
    job2 = ContinuationJob(root.__class__(**{**root.__dict__, "snapshot": None}), job.replay, "envkit/Toy-v0", 12)
    out2 = continue_from_root(gym.make("envkit/Toy-v0", max_steps=20), job2)
    assert out2.restored_by == "replay" and out2.success and out2.steps == out.steps
    # A recipe whose hashes do not match: the root is dropped and counted as diverged.
    bad = ReplayState(job.replay.seed, job.replay.options, job.replay.actions, ("0" * 32,) * len(job.replay.hashes))
    out3 = continue_from_root(
        gym.make("envkit/Toy-v0", max_steps=20), ContinuationJob(job2.root, bad, "envkit/Toy-v0", 12)
    )
    assert out3.diverged and not out3.success and out3.restored_by == ""


class InstanceBoundToy(ToyEnv):
    """Like ALFWorld: a native payload is only valid in the instance that took it; elsewhere replay."""

    def _snapshot(self):
        return (id(self), super()._snapshot())

    def _restore(self, payload, snapshot):
        owner, inner = payload
        if owner != id(self):
            return self.restore_by_replay(snapshot)
        return super()._restore(inner, snapshot)


def test_native_restore_that_falls_back_to_replay_is_counted_as_replay():
    env = InstanceBoundToy(max_steps=20)
    obs, info = env.reset(seed=4)
    tr = play(env, RandomAdmissiblePolicy(2), obs, info, task=Task("t", 4), max_steps=5, record_snapshots=True)
    root = _root_at(tr, 3)
    same = continue_from_root(env, job_for(root, tr, "envkit/Toy-v0", 20))
    other = continue_from_root(InstanceBoundToy(max_steps=20), job_for(root, tr, "envkit/Toy-v0", 20))
    assert (same.restored_by, other.restored_by) == ("native", "replay")
    assert same.steps == other.steps and same.success


def test_oracle_refuses_evaluation_envs():
    tr = _rollout()
    root = select_roots([tr], group=0, config=SeroConfig(horizon=20))[0]
    with pytest.raises(EnvkitError, match="evaluation"):
        continue_from_root(gym.make("envkit/Toy-v0", evaluation=True), job_for(root, tr, "envkit/Toy-v0", 20))


class CountingToy(ToyEnv):
    """A toy env whose snapshots hold a 'resource' (counted per instance) until discarded, like SWE layers."""

    metadata = {"render_modes": [], **SnapshotCapability(holds_resources=True).metadata()}

    def __init__(self, **kw):
        super().__init__(**kw)
        self.live: set[int] = set()
        self.made = 0

    def _snapshot(self):
        self.made += 1
        self.live.add(self.made)
        return (self.made, super()._snapshot())

    def _restore(self, payload, snapshot):
        return super()._restore(payload[1], snapshot)

    def _discard(self, payload):
        self.live.discard(payload[0])


def test_snapshots_holding_resources_are_discarded_in_their_worker(tmp_path, monkeypatch):
    from envkit import pool as pool_mod

    gym.register(id="envkit/CountingToy-v0", entry_point=CountingToy, order_enforce=False, disable_env_checker=True)
    made: list = []
    orig = pool_mod.InProcessPool.__init__

    def spy(self, factory, size):
        orig(self, factory, size)
        made.extend(e.unwrapped for e in self.envs)

    monkeypatch.setattr(pool_mod.InProcessPool, "__init__", spy)
    from envkit.registration import ENVS, EnvEntry

    entry = EnvEntry("envkit/CountingToy-v0", "", None, "", oracle="envkit.oracles.toy:ToyOracle")
    monkeypatch.setitem(ENVS, "envkit/CountingToy-v0", entry)
    try:
        cfg = _cfg(tmp_path, "c.jsonl", env_id="envkit/CountingToy-v0", workers=2, backend="inprocess")
        summary = run(cfg)
    finally:
        gym.registry.pop("envkit/CountingToy-v0", None)
    assert len(made) == 2 and sum(e.made for e in made) > 0
    assert summary["totals"]["continued_to_success"] > 0
    assert all(not e.live for e in made)  # every snapshot was released in the env that made it
    # One snapshot before every policy step; none of a final state: every episode here ended in the env (Toy's
    # 10-step limit), and a done episode's final state is never a root (envkit.recorder's final-snapshot rule).
    assert summary["session"]["snapshots_released"] == summary["session"]["policy_steps"]


def test_roots_go_to_the_worker_that_made_them(tmp_path, monkeypatch):
    # Native snapshots valid only in their own env instance (like ALFWorld): sent to their owner, they restore
    # natively; elsewhere they would fall back to replay.
    from envkit.registration import ENVS, EnvEntry

    gym.register(id="envkit/BoundToy-v0", entry_point=InstanceBoundToy, order_enforce=False, disable_env_checker=True)
    entry = EnvEntry("envkit/BoundToy-v0", "", None, "", oracle="envkit.oracles.toy:ToyOracle")
    monkeypatch.setitem(ENVS, "envkit/BoundToy-v0", entry)
    try:
        cfg = _cfg(tmp_path, "b.jsonl", env_id="envkit/BoundToy-v0", workers=3, backend="inprocess", tasks=12)
        tot = run(cfg)["totals"]
    finally:
        gym.registry.pop("envkit/BoundToy-v0", None)
    assert tot["roots_tried"] >= 3
    assert tot["restored_native"] == tot["roots_tried"] and tot["restored_replay"] == 0


def test_dealing_balances_and_orders_latest_first():
    from envkit.oracles.continuation import _deal

    # 5 jobs, 2 workers: worker 0 made jobs 0-3, job 4 has no owner. Fair share is 3 per worker: the three
    # latest snapshots of worker 0 stay there (latest first), the oldest and the unowned go to worker 1.
    batches = _deal(5, 2, [(0, 0), (0, 5), (0, 2), (0, 7), None])
    assert batches == [[3, 1, 2], [0, 4]]
    assert _deal(3, 2, [None, None, None]) == [[0, 2], [1]]
