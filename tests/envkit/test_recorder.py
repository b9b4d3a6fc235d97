"""`envkit.recorder.EpisodeRecorder` on the real Toy-v0 env: exact steps, the one final-snapshot rule, discards,
and every out-of-order or bad input refused with an error that says what to do."""

from __future__ import annotations

import itertools
import math

import pytest

from envkit.core import Step
from envkit.lifetime import discard_many
from envkit.policies import ScriptedPolicy
from envkit.pool import EnvFactory, make_pool
from envkit.recorder import EpisodeRecorder, RecorderError
from envkit.rollout import Task, play, rollout
from envkit.testing import ToyEnv


def _walk(env, rec, actions, *, snapshots=True):
    for a in actions:
        snap = env.snapshot() if snapshots else None
        rec.step(snap, a, *env.step(a))
        if rec.ended:
            break
    return rec


def test_steps_are_exactly_what_the_env_returned_with_the_snapshot_before_each():
    env = ToyEnv()
    obs, info = env.reset(seed=0, options={"goal": 3, "length": 5})
    rec = _walk(env, EpisodeRecorder(obs, info, snapshots=True), ["right", "bogus", "right", "right"])
    assert rec.ended and len(rec) == 4 and not rec.wants_final_snapshot
    s = rec.steps
    assert [x.action for x in s] == ["right", "bogus", "right", "right"]
    assert [x.reward for x in s] == [0.0, 0.0, 0.0, 1.0]
    assert [(x.terminated, x.truncated) for x in s] == [(False, False)] * 3 + [(True, False)]
    assert [x.info["invalid"] for x in s] == [False, True, False, False]
    assert s[0].observation == obs and rec.initial_observation == obs
    for a, b in itertools.pairwise(s):
        assert b.observation == a.next_observation  # the chain of states, no gap
    for k, x in enumerate(s):  # the snapshot before step k restores the state step k acted in
        assert env.restore(x.snapshot)[0] == x.observation, k
    rec.stop()
    t = rec.trajectory(env_id="envkit/Toy-v0", task_id="t", seed=0, options={"goal": 3, "length": 5})
    assert t.steps == s and t.success and t.final_snapshot is None and not t.failed
    assert t.observations()[-1] == "You are at cell 3 of 5. The goal is cell 3. You reached the goal!"
    assert (t.env_id, t.task_id, t.seed, dict(t.options)) == ("envkit/Toy-v0", "t", 0, {"goal": 3, "length": 5})


def test_final_snapshot_exactly_when_the_caller_cut_a_live_episode():
    env = ToyEnv()
    obs, info = env.reset(seed=1, options={"goal": 4, "length": 6})
    rec = _walk(env, EpisodeRecorder(obs, info, snapshots=True), ["right", "right"])
    assert not rec.ended and rec.wants_final_snapshot
    final = env.snapshot()
    rec.stop(final)
    t = rec.trajectory(env_id="envkit/Toy-v0", task_id="t", seed=1)
    assert t.final_snapshot is final and t.snapshot_at(2) is final
    assert env.restore(final)[0] == t.steps[-1].next_observation
    assert rec.snapshots() == [t.steps[0].snapshot, t.steps[1].snapshot, final]
    # Env-truncated (step limit): done, so no final snapshot, exactly as for terminated.
    short = ToyEnv(max_steps=2)
    obs, info = short.reset(seed=1, options={"goal": 4, "length": 6})
    rec2 = _walk(short, EpisodeRecorder(obs, info, snapshots=True), ["left", "left", "left"])
    assert len(rec2) == 2 and rec2.steps[-1].truncated and rec2.ended and not rec2.wants_final_snapshot
    # No step at all (cut before the first turn): the start state is the final one.
    rec3 = EpisodeRecorder(*env.reset(seed=2), snapshots=True)
    assert rec3.wants_final_snapshot
    rec3.stop(env.snapshot())
    assert rec3.trajectory(env_id="e", task_id="t", seed=2).final_snapshot is not None
    # Snapshots off: never a final snapshot.
    assert not EpisodeRecorder("s", {}, snapshots=False).wants_final_snapshot


def test_every_loop_follows_the_one_rule():
    tasks = [Task("t0", seed=0, options={"goal": 2, "length": 6}), Task("t1", seed=1, options={"goal": 5, "length": 6})]
    right = ScriptedPolicy(["right"] * 10)
    with make_pool(EnvFactory("envkit/Toy-v0"), size=2, backend="inprocess") as pool:
        full = rollout(right, pool, tasks)
        cut = rollout(right, pool, tasks, max_steps=3)
    assert [(t.length, t.success, t.final_snapshot is None) for t in full] == [(2, True, True), (5, True, True)]
    assert [(t.length, t.success, t.final_snapshot is None) for t in cut] == [(2, True, True), (3, False, False)]
    env = ToyEnv()
    obs, info = env.reset(seed=1, options={"goal": 5, "length": 6})
    t = play(env, right, obs, info, task=tasks[1], max_steps=3, record_snapshots=True)
    assert t.length == 3 and env.restore(t.final_snapshot)[0] == t.steps[-1].next_observation
    assert play(env, right, obs, info, task=tasks[1], max_steps=3).final_snapshot is None  # snapshots off


def test_recorded_snapshots_can_all_be_discarded_in_their_env():
    env = ToyEnv()
    obs, info = env.reset(seed=1, options={"goal": 5, "length": 6})
    rec = _walk(env, EpisodeRecorder(obs, info, snapshots=True), ["right", "left", "stay"])
    rec.stop(env.snapshot())
    assert discard_many(env, rec.snapshots()) == 4


def test_out_of_order_and_bad_input_is_refused_with_a_fix():
    env = ToyEnv()
    obs, info = env.reset(seed=0, options={"goal": 1, "length": 4})
    rec = _walk(env, EpisodeRecorder(obs, info, snapshots=True), ["right"])
    assert rec.ended and rec.steps[-1].terminated
    with pytest.raises(RecorderError, match="after the env terminated the episode at step 0; reset"):
        rec.step(env.snapshot(), "right", "x", 0.0, False, False, {})
    with pytest.raises(RecorderError, match="no root can use it"):
        rec.stop(env.snapshot())  # a final snapshot of a done episode would only leak
    rec.stop()
    with pytest.raises(RecorderError, match="stop\\(\\) called twice"):
        rec.stop()
    with pytest.raises(RecorderError, match="after stop\\(\\)"):
        rec.step(None, "a", "x", 0.0, False, False, {})

    live = EpisodeRecorder(*env.reset(seed=0, options={"goal": 3, "length": 4}), snapshots=True)
    with pytest.raises(RecorderError, match=r"no snapshot of the state before it; take env\.snapshot"):
        live.step(None, "right", *env.step("right"))
    assert len(live) == 0  # nothing half-recorded
    with pytest.raises(RecorderError, match="trajectory\\(\\) before stop\\(\\)"):
        live.trajectory(env_id="e", task_id="t", seed=0)
    with pytest.raises(RecorderError, match="wants a final snapshot"):
        live.stop()
    off = EpisodeRecorder("s0", {}, snapshots=False)
    with pytest.raises(RecorderError, match="snapshots=False"):
        off.step(env.snapshot(), "a", "s1", 0.0, False, False, {})
    for bad in ("ten", None, math.nan, math.inf):
        with pytest.raises(RecorderError, match="reward"):
            off.step(None, "a", "s1", bad, False, False, {})
    with pytest.raises(RecorderError, match="info must be a mapping"):
        off.step(None, "a", "s1", 0.0, False, False, ["not", "a", "dict"])
    with pytest.raises(RecorderError, match="info must be a mapping"):
        EpisodeRecorder("s0", None, snapshots=False)  # type: ignore[arg-type]
    assert len(off) == 0


def test_a_failed_episode_keeps_its_steps_takes_no_final_snapshot_and_never_succeeds():
    rec = EpisodeRecorder("s0", {"success": True}, snapshots=False)
    rec.step(None, "a", "s1", 1.0, False, False, {"success": True, "junk": object()})
    assert rec.steps[0].info == {"success": True}  # only the JSON-able part is kept
    rec.stop(failed="worker crashed")
    t = rec.trajectory(env_id="e", task_id="t", seed=None)
    assert (t.failed, t.error, t.success, t.length) == (True, "worker crashed", False, 1)
    assert t.steps == (Step("s0", "a", 1.0, "s1", False, False, {"success": True}),)
    live = EpisodeRecorder("s0", {}, snapshots=True)
    live.stop(failed="env error")  # failed: the rule asks for no final snapshot
    assert live.trajectory(env_id="e", task_id="t", seed=None).failed
