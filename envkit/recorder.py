"""`EpisodeRecorder`: the one record of an episode's steps, fed values, never calling the env.

Every loop that plays an episode (`envkit.rollout`'s pool rollout and `play`, the local trainer's multi-turn
`play_specs`, the OpenRLHF executor's async episode) feeds it what it already has: the reset's observation and
info, then per step the snapshot it took of the state *before* the action (or None where snapshots are off), the
action and what ``env.step`` returned. The recorder owns the bookkeeping: the `envkit.core.Step` values, the
current observation, whether the env ended the episode, and the final-snapshot rule below. It never touches an
env, so it runs the same in a pool worker's caller, a thread, or OpenRLHF's asyncio rollout actor.

Final-snapshot rule (one for every loop): the final state is snapshotted exactly when snapshots are recorded
and the episode stopped while the env was still live: it was cut by the caller (a step cap, a context limit,
no turns at all), not ended by the env (``terminated`` or ``truncated`` on the last step), and it did not fail.
Why: the only reader of ``Trajectory.final_snapshot`` is a root at t == length (`Trajectory.snapshot_at`), and
`envkit.credit.sero.select_roots` never picks the final state of a done trajectory ("a terminal state cannot be
continued"; an env-truncated state has no budget left). A final snapshot of a done episode is never restored;
with ``holds_resources`` envs (SWE overlay layers) it is a resource held until the group is discarded
(`envkit.lifetime`). The loops used to differ: the pool rollout took one at every end, `play` never, the two
trainers only after a caller's cut; they now all follow the trainers' rule (see ARCHITECTURE.md, "Recording").

Use: ``rec = EpisodeRecorder(obs, info, snapshots=True)``; per step ``rec.step(snap, action,
*env.step(action))``; when the loop stops, ``rec.stop(env.snapshot() if rec.wants_final_snapshot else None)``;
then ``rec.trajectory(...)``. Once the episode's snapshots are no longer needed, ``discard_many(env, rec.snapshots())``.

Example:
    >>> rec = EpisodeRecorder("s0", {}, snapshots=False)
    >>> _ = rec.step(None, "go", "s1", 0.0, False, False, {"success": False})
    >>> _ = rec.step(None, "go", "s2", 1.0, True, False, {"success": True})
    >>> rec.wants_final_snapshot, rec.ended
    (False, True)
    >>> rec.stop()
    >>> t = rec.trajectory(env_id="envkit/Toy-v0", task_id="t", seed=0)
    >>> t.length, t.success, t.final_snapshot
    (2, True, None)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, SupportsFloat

from envkit.core import Step, Trajectory, env_success, jsonable
from envkit.errors import RecorderError
from envkit.lifetime import taken_snapshots

__all__ = ["EpisodeRecorder", "RecorderError"]


class EpisodeRecorder:
    """The steps of one episode, from values (see the module docstring).

    Args:
        observation: The observation the episode starts from (``reset``'s, or a restored state's).
        info: The info that came with it (its JSON-able part is kept).
        snapshots: Whether each step comes with a snapshot of the state before its action (and the final state
            with one, by the final-snapshot rule). False: steps carry None (an env without snapshots: SERO then
            restores by verified replay).
    """

    def __init__(self, observation: Any, info: Mapping[str, Any], *, snapshots: bool) -> None:
        if not isinstance(info, Mapping):
            raise RecorderError(
                f"EpisodeRecorder: info must be a mapping (env.reset's info), got {type(info).__name__}"
            )
        self.snapshots_on = bool(snapshots)
        self.initial_observation = str(observation)
        self.initial_info = jsonable(info)
        self.observation = self.initial_observation
        self.info: dict[str, Any] = self.initial_info
        self._steps: list[Step] = []
        self._stopped = False
        self._failed: str | None = None
        self.final_snapshot: Any = None

    # ----- what it holds --------------------------------------------------------------------------------------
    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def ended(self) -> bool:
        """The env ended the episode: the last step was terminated or truncated."""
        return bool(self._steps) and self._steps[-1].done

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def wants_final_snapshot(self) -> bool:
        """Whether `stop` needs a snapshot of the current state: snapshots on, the env not ended, not failed."""
        return self.snapshots_on and not self.ended and self._failed is None

    def snapshots(self) -> list[Any]:
        """Every snapshot this episode took (before each step, and the final one), for `envkit.lifetime`."""
        return taken_snapshots(self._steps, self.final_snapshot)

    # ----- feeding it -----------------------------------------------------------------------------------------
    def step(
        self,
        snapshot: Any,
        action: str,
        next_observation: Any,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
        info: Mapping[str, Any],
        *,
        is_oracle: bool = False,
    ) -> Step:
        """Record one ``env.step(action)``: `snapshot` is of the state before it (None when snapshots are off), the
        rest is what ``env.step`` returned, in its order: ``rec.step(snap, action, *env.step(action))``.

        Raises:
            RecorderError: the episode already ended or was stopped; a snapshot is missing (snapshots on) or was
                given although snapshots are off; the reward is not a finite number; info is not a mapping.
        """
        if self._stopped:
            raise RecorderError(
                f"EpisodeRecorder: step {len(self._steps)} after stop(); start a new EpisodeRecorder for a new episode"
            )
        if self.ended:
            last = self._steps[-1]
            how = "terminated" if last.terminated else "truncated"
            raise RecorderError(
                f"EpisodeRecorder: step {len(self._steps)} after the env {how} the episode at step "
                f"{len(self._steps) - 1}; reset (or restore) the env and start a new EpisodeRecorder"
            )
        if self.snapshots_on and snapshot is None:
            raise RecorderError(
                f"EpisodeRecorder: step {len(self._steps)} has no snapshot of the state before it; take "
                "env.snapshot() before env.step, or make the recorder with snapshots=False"
            )
        if not self.snapshots_on and snapshot is not None:
            raise RecorderError(
                f"EpisodeRecorder: step {len(self._steps)} came with a snapshot but the recorder was made with "
                "snapshots=False (nobody would discard it); pass None or make it with snapshots=True"
            )
        if not isinstance(info, Mapping):
            raise RecorderError(f"EpisodeRecorder: step info must be a mapping (env.step's), got {type(info).__name__}")
        try:
            r = float(reward)
        except (TypeError, ValueError) as exc:
            raise RecorderError(f"EpisodeRecorder: reward {reward!r} is not a number") from exc
        if not math.isfinite(r):
            raise RecorderError(f"EpisodeRecorder: reward {r} is not finite; the env must return a finite reward")
        nxt, clean = str(next_observation), jsonable(info)
        s = Step(
            self.observation, str(action), r, nxt, bool(terminated), bool(truncated), clean, snapshot,
            is_oracle=is_oracle,
        )  # fmt: skip
        self._steps.append(s)
        self.observation, self.info = nxt, clean
        return s

    def stop(self, final_snapshot: Any = None, *, failed: str | None = None) -> None:
        """The loop stops here (the env ended it, or the caller cut it). `final_snapshot`: the current state's,
        exactly when `wants_final_snapshot` (take it only then). `failed`: why the episode could not run to
        the end (a worker crash); a failed episode takes no final snapshot.

        Raises:
            RecorderError: stopped twice; a final snapshot missing or one given that the rule does not want.
        """
        if self._stopped:
            raise RecorderError("EpisodeRecorder: stop() called twice; one episode stops once")
        if failed is not None:
            self._failed = str(failed) or "failed"
        if self.wants_final_snapshot and final_snapshot is None:
            raise RecorderError(
                "EpisodeRecorder: the episode was cut while the env is live, so the rule wants a final snapshot "
                "(a root with budget left); pass stop(env.snapshot()), or stop(failed=...) if it could not be taken"
            )
        if not self.wants_final_snapshot and final_snapshot is not None:
            why = "snapshots are off" if not self.snapshots_on else "the env ended the episode or it failed"
            raise RecorderError(
                f"EpisodeRecorder: stop() got a final snapshot but {why}: no root can use it; take it only when "
                "rec.wants_final_snapshot (discard this one in its env: envkit.lifetime.discard_many)"
            )
        self.final_snapshot = final_snapshot
        self._stopped = True

    # ----- the value --------------------------------------------------------------------------------------------
    def trajectory(
        self,
        *,
        env_id: str,
        task_id: str,
        seed: int | None,
        options: Mapping[str, Any] | None = None,
        success: bool | None = None,
    ) -> Trajectory:
        """The episode as an `envkit.core.Trajectory` (after `stop`). `success` None: the env's verdict on the
        last info (`envkit.core.env_success`); a failed episode never succeeds.

        Raises:
            RecorderError: called before `stop`.
        """
        if not self._stopped:
            raise RecorderError("EpisodeRecorder: trajectory() before stop(); stop the episode first")
        won = env_success(self.info) if success is None else bool(success)
        return Trajectory(
            env_id=env_id,
            task_id=task_id,
            seed=seed,
            options=dict(options or {}),
            initial_observation=self.initial_observation,
            initial_info=self.initial_info,
            steps=tuple(self._steps),
            success=won and self._failed is None,
            failed=self._failed is not None,
            error=self._failed,
            final_snapshot=self.final_snapshot,
        )
