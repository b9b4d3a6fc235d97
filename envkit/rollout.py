"""Run a policy in envs and record trajectories with per-step snapshots; branch from a snapshot.

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

from envkit.core import Step, Trajectory, env_success, jsonable
from envkit.policies import Policy, PolicyInput
from envkit.pool import EnvPool, Request, Result


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
    obs: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    first_obs: str = ""
    first_info: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)


def rollout(
    policy: Policy,
    pool: EnvPool,
    tasks: Sequence[Task],
    *,
    env_id: str = "",
    max_steps: int = 1000,
    record_snapshots: bool = True,
    progress: bool = False,
) -> list[Trajectory]:
    """Run one episode per task; returns trajectories in task order.

    Args:
        policy: Chooses actions in batches.
        pool: Where the envs live (any backend).
        tasks: Episodes to run.
        env_id: Recorded in each trajectory (default: the pool factory's id).
        max_steps: Safety cap on steps per episode (envs have their own limits).
        record_snapshots: Snapshot before every step (roots for SERO) and after the last one.
        progress: Show a progress bar.
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

    def finish(w: int, ep: _Episode, failed: str = "", final_snapshot: Any = None) -> None:
        last_info = ep.steps[-1].info if ep.steps else ep.first_info
        results[ep.index] = Trajectory(
            env_id=env_id,
            task_id=ep.task.task_id,
            seed=ep.task.seed,
            options=dict(ep.task.options),
            initial_observation=ep.first_obs,
            initial_info=ep.first_info,
            steps=tuple(ep.steps),
            success=not failed and env_success(last_info),
            failed=bool(failed),
            error=failed or None,
            final_snapshot=final_snapshot,
        )
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
                finish(w, ep, failed=res.error)
                continue
            ep.obs, ep.info = res.value
            ep.first_obs, ep.first_info = res.value
        if not active:
            continue
        workers = sorted(active)
        batch = [
            PolicyInput(active[w].obs, active[w].info, tuple(active[w].steps), active[w].task.task_id, active[w].index)
            for w in workers
        ]
        actions = policy.act(batch)
        if len(actions) != len(batch):
            raise ValueError(f"policy {policy.name!r} returned {len(actions)} actions for {len(batch)} inputs")
        method = "snapshot_step" if record_snapshots else "step"
        reqs: list[Request] = [(w, method, (a,), {}) for w, a in zip(workers, actions, strict=True)]
        answers: list[Result] = pool.call_many(reqs)
        ends = []
        for w, action, res in zip(workers, actions, answers, strict=True):
            ep = active[w]
            if not res.ok:
                finish(w, ep, failed=res.error)
                continue
            snap, out = res.value if record_snapshots else (None, res.value)
            obs, reward, term, trunc, info = out
            ep.steps.append(Step(ep.obs, action, reward, obs, term, trunc, info, snap))
            ep.obs, ep.info = obs, info
            if term or trunc or len(ep.steps) >= max_steps:
                ends.append(w)
        if ends and record_snapshots:
            snaps = pool.call_many([(w, "snapshot", (), {}) for w in ends])
            for w, res in zip(ends, snaps, strict=True):
                finish(w, active[w], final_snapshot=res.value if res.ok else None)
        else:
            for w in ends:
                finish(w, active[w])
    if bar is not None:
        bar.close()
    return [r for r in results if r is not None]


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
    """Play one episode in a single env from its current state (after reset or restore)."""
    steps: list[Step] = []
    first_obs, first_info = obs, jsonable(info)
    info = first_info
    for _ in range(max_steps):
        action = policy.act([PolicyInput(obs, info, tuple(steps), task.task_id, key)])[0]
        snap = env.snapshot() if record_snapshots else None  # type: ignore[attr-defined]
        nxt, reward, term, trunc, raw = env.step(action)
        info = jsonable(raw)
        steps.append(Step(obs, action, float(reward), nxt, bool(term), bool(trunc), info, snap))
        obs = nxt
        if term or trunc:
            break
    return Trajectory(
        env_id=env_id or str(getattr(env.spec, "id", "")),
        task_id=task.task_id,
        seed=task.seed,
        options=dict(task.options),
        initial_observation=first_obs,
        initial_info=first_info,
        steps=tuple(steps),
        success=env_success(steps[-1].info if steps else first_info),
    )


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
    for k in range(n):
        obs, info = env.restore(snapshot)  # type: ignore[attr-defined]
        out.append(play(env, policy, obs, info, task=task, max_steps=max_steps, key=k))
    return out
