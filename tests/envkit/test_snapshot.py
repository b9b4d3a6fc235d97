"""Snapshot base class, replay wrapper and divergence detection on the toy env."""

from __future__ import annotations

import pickle
import re
from typing import Any

import gymnasium as gym
import pytest

import envkit
from envkit import checker
from envkit.errors import InvalidActionError, ReplayDivergenceError, ResetNeededError, SnapshotError
from envkit.policies import ScriptedPolicy
from envkit.pool_contract import dispatch
from envkit.rollout import Task, play
from envkit.snapshot import ReplaySnapshot, snapshot_env
from envkit.testing import ToyEnv


def test_gymnasium_make_returns_snapshot_env_without_wrappers():
    env = gym.make("envkit/Toy-v0")
    assert isinstance(env, ToyEnv)
    assert isinstance(env, envkit.SnapshotEnv)


def test_restore_reproduces_observations_and_rng():
    env = ToyEnv(max_steps=30)
    obs, _ = env.reset(seed=3, options={"goal": 6, "length": 10})
    env.step("right")
    s = env.snapshot()
    first = [env.step(a)[:4] for a in ("teleport", "right", "teleport", "left")]
    obs_s, info_s = env.restore(s)
    assert obs_s.startswith("You are at cell 1 of 10")
    assert info_s["step"] == 1
    again = [env.step(a)[:4] for a in ("teleport", "right", "teleport", "left")]
    assert again == first  # the RNG stream (teleport) is part of the snapshot


def test_snapshot_restores_into_fresh_instance_via_pickle():
    env = ToyEnv()
    env.reset(seed=5, options={"goal": 7, "length": 9})
    env.step("right")
    s = pickle.loads(pickle.dumps(env.snapshot()))
    ref = [env.step(a)[:4] for a in ("teleport", "right")]
    fresh = ToyEnv()
    fresh.restore(s)
    assert [fresh.step(a)[:4] for a in ("teleport", "right")] == ref


def test_snapshot_errors_are_clear():
    env = ToyEnv()
    with pytest.raises(SnapshotError, match="before reset"):
        env.snapshot()
    with pytest.raises(ResetNeededError, match="reset"):
        env.step("right")
    env.reset(seed=0)
    with pytest.raises(SnapshotError, match="expected a Snapshot"):
        env.restore("not a snapshot")  # type: ignore[arg-type]
    with pytest.raises(InvalidActionError, match="actions are text"):
        env.step(3)  # type: ignore[arg-type]
    s = env.snapshot()
    env.discard(s)
    with pytest.raises(SnapshotError, match="discarded"):
        env.restore(s)

    class OtherEnv(ToyEnv):
        pass

    with pytest.raises(SnapshotError, match="taken from"):
        OtherEnv().restore(ToyEnv().reset(seed=0) and _snap(ToyEnv()))


def _snap(env: ToyEnv) -> Any:
    env.reset(seed=0)
    return env.snapshot()


def test_step_after_episode_end_needs_reset():
    env = ToyEnv(max_steps=1)
    env.reset(seed=0, options={"goal": 5})
    *_, trunc, _ = env.step("stay")
    assert trunc
    with pytest.raises(ResetNeededError, match="episode ended"):
        env.step("stay")


def test_invalid_action_is_feedback_not_error():
    env = ToyEnv()
    env.reset(seed=0, options={"goal": 3})
    obs, reward, term, trunc, info = env.step("fly away")
    assert info["invalid"] and "Nothing happens." in obs and reward == 0.0 and not term


def test_replay_wrapper_restores_by_replay():
    env = ReplaySnapshot(ToyEnv())
    env.reset(seed=11, options={"goal": 4})
    env.step("right")
    s = env.snapshot()
    ref = [env.step(a)[:4] for a in ("teleport", "teleport")]
    obs, _ = env.restore(s)
    assert obs.startswith("You are at cell 1")
    assert [env.step(a)[:4] for a in ("teleport", "teleport")] == ref
    assert env.metadata["snapshot"] == "replay"


class DriftingEnv(ToyEnv):
    """An env whose dynamics change between runs (e.g. unseeded randomness): replay must notice."""

    calls = 0

    def _step(self, action: str) -> Any:
        DriftingEnv.calls += 1
        obs, r, term, trunc, info = super()._step(action)
        return obs + f" (call {DriftingEnv.calls})", r, term, trunc, info


def test_replay_divergence_is_detected_and_named():
    env = ReplaySnapshot(DriftingEnv())
    env.reset(seed=1, options={"goal": 5})
    env.step("right")
    env.step("right")
    s = env.snapshot()
    with pytest.raises(ReplayDivergenceError, match="step 1 of 2"):
        env.restore(s)


def test_native_snapshot_falls_back_to_verified_replay():
    env = ToyEnv()
    env.reset(seed=2, options={"goal": 6})
    env.step("right")
    env.step("teleport")
    s = env.snapshot()
    assert s.replay is not None and len(s.replay.actions) == 2
    fresh = ToyEnv()
    obs, _ = fresh.restore_by_replay(s)
    assert obs == env.restore(s)[0]


def test_checker_passes_toy_and_replay_wrapper():
    report = envkit.check_snapshot_env(gym.make("envkit/Toy-v0"), seed=4, options={"goal": 7})
    assert sorted(report.rules) == [1, 2, 3, 4, 5, 6]
    wrapped = ReplaySnapshot(ToyEnv())
    envkit.check_snapshot_env(wrapped, seed=4, options={"goal": 7}, make_fresh=lambda: ReplaySnapshot(ToyEnv()))


class ForgetfulEnv(ToyEnv):
    """Breaks rule 4: its step counter is not part of the snapshot."""

    def _snapshot(self) -> Any:
        return (self._pos, self._goal, self._length, 0, self._history)


class LeakyEnv(ToyEnv):
    """Breaks rule 3: the snapshot shares a mutable list with the live env."""

    def _reset(self, *, seed, options):
        self._log: list[str] = []
        return super()._reset(seed=seed, options=options)

    def _step(self, action):
        self._log.append(action)
        obs, r, term, trunc, info = super()._step(action)
        return obs + f" [{len(self._log)}]", r, term, trunc, info

    def _snapshot(self):
        return (super()._snapshot(), self._log)

    def _restore(self, payload, snapshot):
        inner, self._log = payload
        return super()._restore(inner, snapshot)


@pytest.mark.parametrize(("cls", "rule"), [(ForgetfulEnv, "rule [24]"), (LeakyEnv, "rule [23]")])
def test_checker_catches_broken_envs(cls, rule):
    with pytest.raises(envkit.SnapshotContractError, match=rule):
        envkit.check_snapshot_env(cls(max_steps=12), seed=4, options={"goal": 7, "length": 9}, make_fresh=cls)


def test_discard_bookkeeping_stays_bounded():
    """10k snapshot + discard cycles leave a constant-size ledger (a set of ids grew ~80 B per snapshot)."""
    env = ToyEnv()
    env.reset(seed=0)
    for _ in range(10_000):
        env.discard(env.snapshot())
    assert env._discarded.size() == 2  # one range [0, 10000)
    # groups discarded out of order (last first) merge back into one range once the group is done
    for _ in range(100):
        group = [env.snapshot() for _ in range(8)]
        for s in reversed(group):
            env.discard(s)
    assert env._discarded.size() == 2
    # the contract is unchanged: a discarded snapshot (old or new, or a pickled copy) is refused, a live one is not
    kept = env.snapshot()
    gone = env.snapshot()
    env.discard(gone)
    for s in (group[0], gone, pickle.loads(pickle.dumps(gone))):
        with pytest.raises(SnapshotError, match="discarded"):
            env.restore(s)
        with pytest.raises(SnapshotError, match="discarded"):
            env.discard(s)
    env.restore(kept)
    assert env._discarded.size() == 4  # `kept` splits the range in two
    # another instance's snapshots are its own: discarding one there does not touch this env's ledger
    other = ToyEnv()
    other.reset(seed=0)
    env.restore(other.snapshot())
    assert env._discarded.size() == 4


def test_replay_wrapper_discard_bookkeeping_stays_bounded():
    env = ReplaySnapshot(ToyEnv())
    env.reset(seed=0)
    for _ in range(10_000):
        env.discard(env.snapshot())
        env.reset(seed=0)  # a new state object; the discarded one is collected
    assert len(env._discarded) <= 1  # only the snapshot the wrapper still holds as its state
    s = env.snapshot()
    env.discard(s)
    with pytest.raises(SnapshotError, match="discarded"):
        env.restore(s)


# ----- each rule of check_snapshot_env is a function of its own: one broken env per rule -----------------------
class RngDrawingSnapshotEnv(ToyEnv):
    """Breaks rule 1: taking a snapshot draws from the env's random generator."""

    def _snapshot(self) -> Any:
        self.np_random.integers(10)
        return super()._snapshot()


class WrongObservationEnv(ToyEnv):
    """Breaks rule 2: restore returns an observation other than the one held."""

    def _restore(self, payload: Any, snapshot: Any) -> tuple[str, dict[str, Any]]:
        obs, info = super()._restore(payload, snapshot)
        return obs + " (restored)", info


class CounterOutsideEnv(ToyEnv):
    """Breaks rule 4: the step counter lives outside the snapshot (a restore keeps the live count)."""

    def _restore(self, payload: Any, snapshot: Any) -> tuple[str, dict[str, Any]]:
        t = self._t
        out = super()._restore(payload, snapshot)
        self._t = t
        return out


class AcceptsAnythingEnv(ToyEnv):
    """Breaks rule 5: restore() of a foreign object is silently accepted."""

    def restore(self, snapshot: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(snapshot, envkit.snapshot.Snapshot):
            return self._obs("?"), {}
        return super().restore(snapshot)


class NeverDiscardsEnv(ToyEnv):
    """Breaks rule 6: a discarded snapshot still restores."""

    def discard(self, snapshot: Any) -> None:
        return None


@pytest.mark.parametrize(
    ("cls", "rule", "message"),
    [
        (RngDrawingSnapshotEnv, checker.rule_1_snapshot_changes_nothing, "rule 1: snapshot() advanced"),
        (WrongObservationEnv, checker.rule_2_restore_returns_the_held_state, "rule 2: restore(s) returned"),
        (LeakyEnv, checker.rule_3_snapshots_are_isolated, "rule 3: stepping after restore mutated"),
        (CounterOutsideEnv, checker.rule_4_counters_are_state, "rule 4: the episode did not end the same way"),
        (AcceptsAnythingEnv, checker.rule_5_foreign_snapshots_are_refused, "rule 5: restore(object())"),
        (NeverDiscardsEnv, checker.rule_6_discard_releases, "rule 6"),
    ],
)
def test_each_rule_alone_catches_the_env_that_breaks_it(cls, rule, message):
    run = dict(seed=4, options={"goal": 7, "length": 9})
    with pytest.raises(envkit.SnapshotContractError, match=re.escape(message)):
        rule(checker.reference_run(cls(max_steps=12), **run))
    # and the same rule passes on the honest env
    assert rule(checker.reference_run(ToyEnv(max_steps=12), **run))


def test_the_declaration_is_checked_before_anything_runs():
    env = ToyEnv()
    env.metadata = {**env.metadata, "snapshot": "magic"}
    with pytest.raises(envkit.SnapshotContractError, match="rule 5: metadata"):
        checker.declared_kind(env)


def test_snapshot_env_returns_the_env_typed_and_names_what_lacks_snapshots():
    toy, replayed = gym.make("envkit/Toy-v0"), ReplaySnapshot(gym.make("CartPole-v1"))
    assert snapshot_env(toy) is toy and snapshot_env(replayed) is replayed
    with pytest.raises(SnapshotError, match=r"CartPole-v1\).*snapshot\(\) / restore\(\) / discard\(\).*ReplaySnapshot"):
        snapshot_env(gym.make("CartPole-v1"))
    limited = gym.make("envkit/Toy-v0", max_episode_steps=3)  # TimeLimit does not forward the env's methods
    with pytest.raises(SnapshotError, match=r"TimeLimit .*wraps ToyEnv.*max_steps=N.*envkit\.wrappers"):
        snapshot_env(limited)
    # the callers that used to fail with an AttributeError now say the same
    with pytest.raises(SnapshotError, match="TimeLimit"):
        dispatch(limited, "snapshot_step", ["right"], {})
    obs, info = limited.reset(seed=0)
    with pytest.raises(SnapshotError, match="TimeLimit"):
        play(limited, ScriptedPolicy(["right"]), obs, info, task=Task("t", seed=0), record_snapshots=True)
