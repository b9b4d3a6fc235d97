"""Run a policy in envs and record trajectories with per-step snapshots; branch from a snapshot.

Both loops record through `envkit.recorder.EpisodeRecorder` (the snapshot before each step, one final-snapshot
rule: the final state is snapshotted only when the episode was cut while the env was live, here by `max_steps`).

`rollout` schedules tasks over a pool's workers: every round, the policy gets one batch with the current
observation of every active env, then all envs step in parallel. A crashed worker's episode comes back with
``failed=True`` (the pool restarts the worker) and the other episodes carry on.

Example:
    >>> from envkit.pool import EnvFactory, make_pool
    >>> from envkit.policies import RandomAdmissiblePolicy
    >>> from envkit.rollout import Task, rollout
    >>> with make_pool(EnvFactory("envkit/Toy-v0"), size=2, backend="inprocess") as pool:
    ...     trajs = rollout(RandomAdmissiblePolicy(0), pool, [Task("t0", seed=0), Task("t1", seed=1)])
    >>> len(trajs)
    2
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from envkit.core import Trajectory
from envkit.policies import Policy, PolicyInput
from envkit.pool import EnvPool, Request, Result
from envkit.recorder import EpisodeRecorder
from envkit.snapshot import snapshot_env


@dataclass(frozen=True)
class Task:
    """One episode to run: ``reset(seed=seed, options=options)``; `task_id` names it in the records."""

    task_id: str
    seed: int
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Episode:
    index: int
    task: Task
    rec: EpisodeRecorder | None = None  # after the reset answered


def rollout(
    policy: Policy,
    pool: EnvPool,
    tasks: Sequence[Task],
    *,
    env_id: str = "",
    max_steps: int = 1000,
    record_snapshots: bool = True,
    progress: bool = False,
    retries: int = 0,
) -> list[Trajectory]:
    """Run one episode per task; returns trajectories in task order.

    Args:
        policy: Chooses actions in batches.
        pool: Where the envs live (any backend).
        tasks: Episodes to run.
        env_id: Recorded in each trajectory (default: the pool factory's id).
        max_steps: Safety cap on steps per episode (envs have their own limits).
        record_snapshots: Snapshot before every step (roots for SERO) and, when `max_steps` cut an episode the env
            had not ended, of its final state (`envkit.recorder`'s rule); a failed final snapshot fails the episode.
        progress: Show a progress bar.
        retries: An episode whose worker crashed (``Result.crashed``: a dead worker process, a lost fleet actor or
            node) starts again from reset up to this many times (its partial record is dropped; it held nothing
            that survived the worker); afterwards, or with 0, it ends ``failed`` with the reason. Env errors are
            never retried.
    """
    env_id = env_id or getattr(getattr(pool, "factory", None), "env_id", "")
    results: list[Trajectory | None] = [None] * len(tasks)
    queue: deque[int] = deque(range(len(tasks)))
    active: dict[int, _Episode] = {}
    free = deque(range(pool.size))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc="rollouts", unit="ep")

    tries = [0] * len(tasks)

    def crashed(w: int, ep: _Episode, res: Result) -> bool:
        """Requeue `ep` from reset when its worker crashed and retries are left (True: requeued)."""
        if not res.crashed or tries[ep.index] >= retries:
            return False
        tries[ep.index] += 1
        queue.appendleft(ep.index)
        del active[w]
        free.append(w)
        return True

    def finish(w: int, ep: _Episode, failed: str = "", final_snapshot: Any = None) -> None:
        rec = ep.rec or EpisodeRecorder("", {}, snapshots=False)  # a reset that failed: nothing was recorded
        rec.stop(final_snapshot, failed=failed or None)
        task = ep.task
        results[ep.index] = rec.trajectory(env_id=env_id, task_id=task.task_id, seed=task.seed, options=task.options)
        del active[w]
        free.append(w)
        if bar is not None:
            bar.update(1)

    while queue or active:
        # Start episodes on free workers.
        starts = []
        while free and queue:
            w = free.popleft()
            i = queue.popleft()
            active[w] = _Episode(i, tasks[i])
            starts.append((w, "reset", (), {"seed": tasks[i].seed, "options": dict(tasks[i].options)}))
        for (w, *_), res in zip(starts, pool.call_many(starts), strict=True):
            ep = active[w]
            if not res.ok:
                if not crashed(w, ep, res):
                    finish(w, ep, failed=res.error)
                continue
            ep.rec = EpisodeRecorder(*res.value, snapshots=record_snapshots)
        if not active:
            continue
        workers = sorted(active)
        recs = [_recorder(active[w]) for w in workers]
        batch = [
            PolicyInput(r.observation, r.info, r.steps, active[w].task.task_id, active[w].index)
            for w, r in zip(workers, recs, strict=True)
        ]
        actions = policy.act(batch)
        if len(actions) != len(batch):
            raise ValueError(f"policy {policy.name!r} returned {len(actions)} actions for {len(batch)} inputs")
        method = "snapshot_step" if record_snapshots else "step"
        reqs: list[Request] = [(w, method, (a,), {}) for w, a in zip(workers, actions, strict=True)]
        answers: list[Result] = pool.call_many(reqs)
        ends = []
        for w, rec, action, res in zip(workers, recs, actions, answers, strict=True):
            if not res.ok:
                if not crashed(w, active[w], res):
                    finish(w, active[w], failed=res.error)
                continue
            snap, out = res.value if record_snapshots else (None, res.value)
            rec.step(snap, action, *out)
            if rec.ended or len(rec) >= max_steps:
                ends.append(w)
        wanted = [w for w in ends if _recorder(active[w]).wants_final_snapshot]
        snaps = (
            dict(zip(wanted, pool.call_many([(w, "snapshot", (), {}) for w in wanted]), strict=True)) if wanted else {}
        )
        for w in ends:
            got = snaps.get(w)
            if got is not None and not got.ok:
                finish(w, active[w], failed=f"the final snapshot failed: {got.error}")
            else:
                finish(w, active[w], final_snapshot=got.value if got is not None else None)
    if bar is not None:
        bar.close()
    return [r for r in results if r is not None]


def _recorder(ep: _Episode) -> EpisodeRecorder:
    if ep.rec is None:
        raise RuntimeError(f"rollout: episode {ep.task.task_id!r} is active without a reset (a bug in rollout)")
    return ep.rec


def play(
    env: gym.Env[Any, Any],
    policy: Policy,
    obs: str,
    info: Mapping[str, Any],
    *,
    task: Task,
    env_id: str = "",
    max_steps: int = 1000,
    record_snapshots: bool = False,
    key: int = 0,
) -> Trajectory:
    """Play one episode in a single env from its current state (after reset or restore).

    With `record_snapshots`, a snapshot before every step and, when `max_steps` cut the episode, of its final state
    (`envkit.recorder`); the caller discards them (`envkit.lifetime.discard_many`).
    """
    rec = EpisodeRecorder(obs, info, snapshots=record_snapshots)
    snaps = snapshot_env(env) if record_snapshots else None
    for _ in range(max_steps):
        action = policy.act([PolicyInput(rec.observation, rec.info, rec.steps, task.task_id, key)])[0]
        snap = snaps.snapshot() if snaps is not None else None
        rec.step(snap, action, *env.step(action))
        if rec.ended:
            break
    rec.stop(snaps.snapshot() if snaps is not None and rec.wants_final_snapshot else None)
    env_id = env_id or str(getattr(env.spec, "id", ""))
    return rec.trajectory(env_id=env_id, task_id=task.task_id, seed=task.seed, options=task.options)


def branch(
    env: gym.Env[Any, Any],
    snapshot: Any,
    policy: Policy,
    n: int,
    *,
    task: Task | None = None,
    max_steps: int = 1000,
) -> list[Trajectory]:
    """Restore `snapshot` n times and play the policy from it each time (keys 0..n-1 vary sampling).

    Each returned trajectory starts at the snapshot's state (its ``initial_observation`` is the restored one).
    """
    if n < 1:
        raise ValueError(f"branch needs n >= 1, got {n}")
    task = task or Task("branch", seed=0)
    out = []
    snaps = snapshot_env(env)
    for k in range(n):
        obs, info = snaps.restore(snapshot)
        out.append(play(env, policy, obs, info, task=task, max_steps=max_steps, key=k))
    return out
