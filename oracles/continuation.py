"""SERO restore and continuation, run inside env-pool workers (docs/methods.md section 4, steps 2-3).

`continue_from_root(env, job)` restores a root in `env` and lets the env's domain oracle act through
`envkit.oracles.base.run_oracle`; `run_continuations(pool, jobs)` deals jobs to the pool's workers with the pool's
``call`` request (one request per worker per round). Restore order: native ``env.restore(snapshot)`` (the env may
itself fall back to verified replay: ``env.unwrapped.last_restore_kind`` says which); without a usable snapshot,
`envkit.snapshot.replay` of the recorded action prefix with every observation hash checked (a mismatch drops the
root, counted as diverged). A restored root the oracle's optional ``dead_end(env)`` check proves unwinnable is not
continued (``ContinuationOutcome.dead_end``). With an `envkit.lifetime.OwnerTrackingPool`, roots go to the worker
that made their snapshot (snapshot lifetimes and discards: `envkit.lifetime`).

Example:
    >>> import gymnasium, envkit
    >>> from envkit.core import Root
    >>> env = gymnasium.make("envkit/Toy-v0")
    >>> obs, info = env.reset(seed=0, options={"goal": 3})
    >>> root = Root(0, 0, 0, obs, env.snapshot(), (), 20)
    >>> out = continue_from_root(gymnasium.make("envkit/Toy-v0"), ContinuationJob(root, None, "envkit/Toy-v0", 20))
    >>> out.restored_by, out.success, [s.action for s in out.steps]
    ('native', True, ['right', 'right', 'right'])
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from envkit.core import Root, Step, Trajectory, jsonable
from envkit.errors import ReplayDivergenceError, SnapshotError
from envkit.oracles.base import Oracle, dead_end_reason, make_oracle, oracle_run_from_json, run_oracle
from envkit.pool import EnvPool, Request
from envkit.snapshot import ReplayState, observation_hash, replay, snapshot_env


def replay_state_at(traj: Trajectory, t: int) -> ReplayState | None:
    """The verified-replay recipe of the state before step t, from the recorded trajectory (None: no seed)."""
    if traj.seed is None:
        return None
    obs = traj.observations()
    hashes = [observation_hash(obs[0])] + [observation_hash(obs[k + 1], traj.steps[k].reward) for k in range(t)]
    return ReplayState(int(traj.seed), dict(traj.options), tuple(s.action for s in traj.steps[:t]), tuple(hashes))


@dataclass(frozen=True)
class ContinuationJob:
    """What a worker needs to continue from one root (picklable).

    Attributes:
        root: The root (its snapshot, when recorded, is restored natively).
        replay: The verified-replay recipe (used when there is no snapshot or the native restore is refused).
        env_id: Id of the env (picks the oracle: its ``EnvEntry.oracle``).
        max_steps: Step budget of the continuation.
        oracle_kwargs: Keyword arguments of the oracle's constructor.
    """

    root: Root
    replay: ReplayState | None
    env_id: str
    max_steps: int
    oracle_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContinuationOutcome:
    """What happened at one root.

    Attributes:
        root: The root (snapshot dropped).
        restored_by: ``"native"`` or ``"replay"``; ``""`` when the root could not be restored.
        diverged: Replay did not reproduce the recorded observations (the root was dropped).
        steps: The oracle's transitions (``is_oracle`` True).
        success: The env confirmed success at the end.
        reason: Why it stopped without success ("" on success).
        root_info: JSON-able info at the restored root (admissible actions for the first oracle step).
        restore_s: Seconds spent restoring.
        oracle_s: Seconds spent in the oracle's ``start``/``act`` (planning).
        env_s: Seconds spent in ``env.step`` during the continuation.
        dead_end: The oracle's ``dead_end`` check proved the root cannot be won, so the oracle never ran there
            (`reason` says why); such roots are replaced by the next candidates (`envkit.oracles.pipeline`).
    """

    root: Root
    restored_by: str
    diverged: bool = False
    steps: tuple[Step, ...] = ()
    success: bool = False
    reason: str = ""
    root_info: Mapping[str, Any] = field(default_factory=dict)
    restore_s: float = 0.0
    oracle_s: float = 0.0
    env_s: float = 0.0
    dead_end: bool = False


class _TimedOracle:
    """Wraps an oracle and accumulates the seconds spent in it."""

    def __init__(self, oracle: Oracle):
        self.oracle = oracle
        self.name = oracle.name
        self.seconds = 0.0

    def start(self, env: gym.Env[Any, Any], observation: str, info: Mapping[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            self.oracle.start(env, observation, info)
        finally:
            self.seconds += time.perf_counter() - t0

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        t0 = time.perf_counter()
        try:
            return self.oracle.act(observation, info)
        finally:
            self.seconds += time.perf_counter() - t0


_ORACLE_CACHE: dict[tuple[str, str], Oracle] = {}


def _oracle(env_id: str, kwargs: Mapping[str, Any]) -> Oracle:
    key = (env_id, repr(sorted(kwargs.items())))
    if key not in _ORACLE_CACHE:
        _ORACLE_CACHE[key] = make_oracle(env_id, **dict(kwargs))
    return _ORACLE_CACHE[key]


def _restore(env: gym.Env[Any, Any], job: ContinuationJob) -> tuple[str, Any, dict[str, Any]]:
    """Restore the root; returns (kind, obs, info). Raises ReplayDivergenceError / SnapshotError."""
    snap = job.root.snapshot
    if snap is not None:
        try:
            obs, info = snapshot_env(env).restore(snap)
            kind = getattr(env.unwrapped, "last_restore_kind", "") or str(env.metadata.get("snapshot", "native"))
            return kind, obs, info
        except ReplayDivergenceError:
            raise
        except SnapshotError:
            if job.replay is None:
                raise
    if job.replay is None:
        raise SnapshotError(
            "the root has neither a snapshot nor a replay recipe (its episode was reset without a seed)"
        )
    obs, info = replay(env, job.replay)
    return "replay", obs, info


def continue_from_root(env: gym.Env[Any, Any], job: ContinuationJob) -> ContinuationOutcome:
    """Restore `job.root` in `env` and let the env's oracle continue (run it in a worker: pool ``call``).

    An env of an env fleet (`envkit.fleet.env.FleetEnv`, which has ``call_at``) runs all of it on the fleet actor
    holding the root's snapshot, where the oracle reads the live env's privileged state.
    """
    on_actor = getattr(env, "call_at", None)
    if callable(on_actor):
        outcome: ContinuationOutcome = on_actor(job.root.snapshot, continue_from_root, job)
        return outcome
    root = _bare(job.root)
    t0 = time.perf_counter()
    try:
        kind, obs, raw_info = _restore(env, job)
    except ReplayDivergenceError as exc:
        return ContinuationOutcome(root, "", diverged=True, reason=str(exc), restore_s=time.perf_counter() - t0)
    except SnapshotError as exc:
        return ContinuationOutcome(root, "", reason=f"restore failed: {exc}", restore_s=time.perf_counter() - t0)
    restore_s = time.perf_counter() - t0
    if obs != job.root.observation:
        return ContinuationOutcome(
            root, "", diverged=True, reason="the restored observation differs from the root's", restore_s=restore_s
        )
    info = jsonable(raw_info)
    remote = getattr(env.unwrapped, "run_oracle", None)
    if callable(remote):  # envkit.remote.RemoteEnv: the oracle reads privileged state, so it runs on the server
        t1 = time.perf_counter()
        answer = remote(job.max_steps, job.oracle_kwargs)
        total = time.perf_counter() - t1
        if answer.get("dead_end"):
            return ContinuationOutcome(root, kind, reason=answer["reason"], root_info=info, restore_s=restore_s,
                                       dead_end=True)  # fmt: skip
        run = oracle_run_from_json(answer)
        return ContinuationOutcome(
            root, kind, False, run.steps, run.success and bool(run.steps),
            run.reason or ("" if run.steps else "no steps"), info, restore_s, 0.0, total,
        )  # fmt: skip
    oracle = _oracle(job.env_id, job.oracle_kwargs)
    why = dead_end_reason(oracle, env)
    if why is not None:
        return ContinuationOutcome(
            root, kind, reason=f"dead root skipped: {why}", root_info=info, restore_s=restore_s, dead_end=True
        )
    timed = _TimedOracle(oracle)
    t1 = time.perf_counter()
    run = run_oracle(env, timed, obs, info, max_steps=job.max_steps)
    total = time.perf_counter() - t1
    return ContinuationOutcome(
        root,
        kind,
        False,
        run.steps,
        run.success and bool(run.steps),
        run.reason or ("" if run.steps else "no steps"),
        info,
        restore_s,
        timed.seconds,
        max(0.0, total - timed.seconds),
    )


def job_for(root: Root, traj: Trajectory, env_id: str, horizon: int, **oracle_kwargs: Any) -> ContinuationJob:
    """The job for one root of `traj` (budget: ``horizon - root.t``)."""
    return ContinuationJob(root, replay_state_at(traj, root.t), env_id, max(1, horizon - root.t), oracle_kwargs)


def _bare(root: Root) -> Root:
    return Root(root.group, root.trajectory, root.t, root.observation, None, root.actions, root.budget_left)


def continue_many(env: gym.Env[Any, Any], jobs: Sequence[ContinuationJob]) -> list[ContinuationOutcome]:
    """`continue_from_root` for several jobs in one worker call; an error in one job is kept as its reason."""
    out = []
    for job in jobs:
        try:
            out.append(continue_from_root(env, job))
        except Exception as exc:  # an env/oracle bug ends that continuation, not the batch
            out.append(ContinuationOutcome(_bare(job.root), "", reason=f"error: {type(exc).__name__}: {exc}"))
    return out


def _deal(n_jobs: int, size: int, owners: Sequence[tuple[int, int] | None]) -> list[list[int]]:
    """Job indices per worker: each job to the worker that made its root's snapshot while that worker has fewer
    than its fair share (latest snapshots claim their owner first: the env most likely still holds that episode,
    so a native restore that is only valid there succeeds), the rest to the least loaded worker; within a worker,
    latest snapshots run first."""

    def seq(i: int) -> int:
        own = owners[i] if i < len(owners) else None
        return -1 if own is None else own[1]

    cap = -(-n_jobs // size)
    batches: list[list[int]] = [[] for _ in range(size)]
    rest = []
    for i in sorted(range(n_jobs), key=lambda i: -seq(i)):
        own = owners[i] if i < len(owners) else None
        if own is not None and 0 <= own[0] < size and len(batches[own[0]]) < cap:
            batches[own[0]].append(i)
        else:
            rest.append(i)
    for i in sorted(rest):
        min(batches, key=len).append(i)
    for b in batches:
        b.sort(key=lambda i: (-seq(i), i))
    return batches


def run_continuations(
    pool: EnvPool, jobs: Sequence[ContinuationJob], *, per_call: int | None = None, on_done: Any = None
) -> list[ContinuationOutcome]:
    """Run jobs on the pool's workers; outcomes in job order.

    Jobs go to the worker that made their root's snapshot when `pool` is an `OwnerTrackingPool` (so envs whose
    native snapshots are valid only in their own instance, like ALFWorld, restore natively), balanced across the
    workers; otherwise round-robin. Each worker gets up to `per_call` jobs per request (default: all of them in
    one request, one inter-process round trip per worker). A crashed worker's jobs come back with a reason; the
    pool restarts the worker. `on_done(n)` is called after each round.
    """
    out: list[ContinuationOutcome | None] = [None] * len(jobs)
    owner_of = getattr(pool, "owner_of", None)
    owners = [owner_of(j.root.snapshot) if owner_of else None for j in jobs]
    batches = _deal(len(jobs), pool.size, owners)
    per = per_call or max(1, max((len(b) for b in batches), default=1))
    for r in range(0, max((len(b) for b in batches), default=0), per):
        parts = [b[r : r + per] for b in batches]
        reqs: list[Request] = [
            (w, "call", (continue_many, [jobs[i] for i in part]), {}) for w, part in enumerate(parts) if part
        ]
        results = pool.call_many(reqs)
        for (w, *_), res in zip(reqs, results, strict=True):
            if res.ok:
                for i, o in zip(parts[w], res.value, strict=True):
                    out[i] = o
            else:
                last = res.error.strip().splitlines()[-1] if res.error.strip() else "unknown error"
                for i in parts[w]:
                    out[i] = ContinuationOutcome(_bare(jobs[i].root), "", reason=f"worker error: {last}")
        if on_done is not None:
            on_done(sum(len(p) for p in parts))
    return [o for o in out if o is not None]
