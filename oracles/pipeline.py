"""The ``envkit-oracle rollout`` engine: policy groups -> SERO roots -> oracle continuations -> step records.

`run(RunConfig(...))` runs G policy rollouts per task through an env pool, selects roots per group, restores and
continues them with the domain oracle inside the pool's workers (replacing roots the oracle proves dead:
`continue_roots`), computes reachability weights (a policy scorer in
this process) and GraphGPO credit, and appends one record unit per task to a resumable `envkit.io.RecordStore`.
A killed run resumes where it stopped (finished tasks are skipped, none is duplicated) and produces the identical
output file: every task's result depends only on (seed, task index), never on the chunking or the worker count.

Outputs: ``<out>`` (.parquet or .jsonl; one record per step, see `STEP_FIELDS`), ``<out>.summary.json`` (counters
of all tasks plus this session's timing), ``<out>.journal.jsonl`` (the resumable journal).

Example:
    >>> summary = run(RunConfig(env_id="envkit/Toy-v0", tasks=4, group=4, out="runs/toy.parquet"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from envkit.capability import capability_from_metadata
from envkit.core import Trajectory
from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.sero import RootRounds, SeroConfig, root_rounds
from envkit.credit.sero_advantages import Rescue, SeroAdvantages, sero_advantages
from envkit.credit.state_keys import StateKeyKind
from envkit.credit.step_table import StepTable, trajectories_state_key
from envkit.io import RecordStore
from envkit.lifetime import OwnerTrackingPool
from envkit.oracles.continuation import ContinuationOutcome, job_for, run_continuations
from envkit.oracles.reach_weights import Weighted, reach_weights
from envkit.oracles.records import (
    STEP_FIELDS,
    StepCredit,
    summarize,
    summary_path,
    task_records,
    task_stats,
    write_output,
)
from envkit.oracles.run_config import DEFAULT_ENV, RunConfig
from envkit.policies import Policy, PolicyInput
from envkit.pool import EnvFactory, make_pool
from envkit.rollout import Task, rollout

__all__ = [
    "DEFAULT_ENV",
    "STEP_FIELDS",
    "RunConfig",
    "credit_state_key",
    "credit_task",
    "run",
    "summarize",
    "summary_path",
    "task_seed",
]


def continue_roots(
    pool: OwnerTrackingPool,
    env_id: str,
    sero: SeroConfig,
    idx: Sequence[int],
    groups: Sequence[Sequence[Trajectory]],
) -> list[list[ContinuationOutcome]]:
    """Select the roots of each group and continue them; dead roots are replaced (outcomes per group).

    A root the oracle's ``dead_end`` check proves unwinnable comes back at once with ``dead_end`` set (no oracle
    step is spent on it); the group then gets its next root candidate in its place (`envkit.credit.sero.RootRounds`:
    never one already tried, up to ``DEAD_ROOT_ROUNDS`` rounds), so dead ends do not use up a group's
    ``roots_per_group``. The dead outcomes stay in the list (counted as ``dead_roots_skipped``). Depends only on
    the groups, not on the pool.
    """
    per_task: list[list[ContinuationOutcome]] = [[] for _ in idx]
    pickers = [RootRounds(g, i, sero) for i, g in zip(idx, groups, strict=True)]
    for picks in root_rounds(pickers):  # the one rounds loop (both trainers' too)
        jobs = [job_for(r, groups[k][r.trajectory], env_id, sero.horizon, **sero.oracle_kwargs) for k, r in picks]
        for (k, _), o in zip(picks, run_continuations(pool, jobs), strict=True):
            per_task[k].append(o)
            pickers[k].settle(dead=o.dead_end, root=o.root)
    return per_task


def credit_task(
    trajs: Sequence[Trajectory],
    outcomes: Sequence[ContinuationOutcome],
    weighted: Sequence[Weighted],
    sero: SeroConfig,
    adv: AdvantageOptions | None = None,
) -> tuple[SeroAdvantages, dict[tuple[int, int], StepCredit], dict[tuple[int, int], StepCredit]]:
    """SERO credit of one task group (`envkit.credit.sero_advantages.sero_advantages`, as both trainers use it).

    The policy rows are the group's trajectories (`StepTable.from_trajectories`: episode return
    ``terminal_reward * success``, each step's recorded next state); the rescues its successful continuations
    with their l_j. States are anchors under `credit_state_key` (an oracle step's follows the path from reset
    through its root, `Rescue.from_path`). ``adv``: GraphGPO's options (default: the defaults with the run's gamma_g and
    terminal reward, what ``envkit-oracle rollout`` uses). Returns the result and its rows keyed (trajectory,
    step) and (index in `outcomes`, oracle step).
    """
    adv = adv or AdvantageOptions(gamma_g=sero.gamma_g, terminal_reward=sero.terminal_reward)
    kind = credit_state_key(trajs, outcomes, adv)
    table = StepTable.from_trajectories([trajs], terminal_reward=sero.terminal_reward, state_key=kind)
    kept = [k for k, o in enumerate(outcomes) if o.success and o.steps]
    rescues: list[Rescue] = []
    for k in kept:
        out, base = outcomes[k], trajs[outcomes[k].root.trajectory]
        rescues.append(
            Rescue.from_path(
                kind, (base.initial_observation, base.initial_info), base.steps[: out.root.t], out.steps, group=0,
                trajectory=out.root.trajectory, t=out.root.t, loglik=weighted[k].loglik,
                episode_return=sero.terminal_reward,
            )
        )  # fmt: skip
    res = sero_advantages(table, rescues, adv, sero)
    p, o = res.policy, res.oracle
    pol = {
        (int(table.trajectory[r]), int(table.step[r])): StepCredit(
            int(p.distance[r]), int(p.distance_before[r]), float(p.step_reward[r]), float(p.graph_adv[r]),
            float(p.episode[r]), float(p.advantages[r]), 1.0,
        )
        for r in range(len(table))
    }  # fmt: skip
    ora = {
        (kept[int(o.rescue[r])], int(o.step[r])): StepCredit(
            int(o.distance[r]), None, float(o.step_reward[r]), float(o.graph_adv[r]), float(o.episode[r]),
            float(o.advantages[r]), float(o.weights[r]),
        )
        for r in range(len(o.advantages))
    }  # fmt: skip
    return res, pol, ora


def credit_state_key(
    trajs: Sequence[Trajectory], outcomes: Sequence[ContinuationOutcome], adv: AdvantageOptions
) -> StateKeyKind:
    """The state key of a task's credit: ``adv.state_key``; unset: ``env`` when every policy state and every
    successful continuation's state has the env's exact key, else ``observation``."""
    steps = [s for o in outcomes if o.success for s in o.steps]
    return trajectories_state_key(adv.state_key, trajs, steps)


def _credit_sums(res: SeroAdvantages) -> dict[str, float]:
    """Per-task sums of the SERO diagnostics (`summarize` adds them over tasks and derives the shares)."""
    m = res.metrics()
    return {
        "oracle_rows_at_w_min": m["sero_w_min_share"] * m["sero_oracle_actions"],
        "first_loglik_sum": m["sero_first_loglik"] * m["sero_rescues"],
        "policy_adv_sum": m["sero_policy_mass"],
        "policy_adv_sum_plain": m["sero_policy_mass_plain"],
        "oracle_adv_sum": m["sero_oracle_mass"],
    }


def task_seed(seed: int, index: int) -> int:
    """Seed of task `index` in a run with `seed` (independent streams per task)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] & 0x7FFFFFFF)


class _StableKeys:
    """Gives each episode a key that depends only on (task index, rollout index), not on the batch layout."""

    def __init__(self, policy: Policy, keys: Sequence[int]):
        self.policy = policy
        self.name = policy.name
        self.keys = list(keys)

    def act(self, batch: Sequence[PolicyInput]) -> list[str]:
        return self.policy.act([dataclasses.replace(x, key=self.keys[x.key]) for x in batch])


def _finish_chunk(
    cfg: RunConfig,
    scorer: Any,
    store: RecordStore,
    idx: Sequence[int],
    groups: Sequence[Sequence[Trajectory]],
    per_task: Sequence[Sequence[ContinuationOutcome]],
) -> dict[str, float]:
    """Reachability weights, GraphGPO credit and records of one chunk, appended to the journal task by task."""
    sero = cfg.sero_config
    t_score = t_credit = t_io = 0.0
    for i, g, outs in zip(idx, groups, per_task, strict=True):
        ts = time.perf_counter()
        ws = [
            reach_weights(
                scorer, g[o.root.trajectory].steps[: o.root.t], o, sero, f"task-{i}", weighting=cfg.sero.weighting
            )
            if o.success
            else Weighted((), ())
            for o in outs
        ]
        tc = time.perf_counter()
        adv = AdvantageOptions(gamma_g=sero.gamma_g, terminal_reward=sero.terminal_reward, state_key=cfg.state_key)
        res, pol, ora = credit_task(g, outs, ws, sero, adv)
        recs = task_records(cfg.env_id, i, task_seed(cfg.seed, i), sero.terminal_reward, g, outs, ws, (pol, ora))
        ti = time.perf_counter()
        kind = f"state_key_{credit_state_key(g, outs, adv)}"
        store.append(f"task-{i}", [*recs, {"__stats__": {**task_stats(g, outs, ws), **_credit_sums(res), kind: 1}}])
        t_score += tc - ts
        t_credit += ti - tc
        t_io += time.perf_counter() - ti
    return {"scoring_s": t_score, "credit_s": t_credit, "io_s": t_io}


def run(
    cfg: RunConfig, *, policy: Policy | None = None, scorer: Any = None, on_chunk: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Run (or resume) a rollout; returns the summary (also written to ``<out>.summary.json``).

    Args:
        cfg: Settings.
        policy: A ready policy (default: built from ``cfg.policy``).
        scorer: A ready scorer (default: built from ``cfg.scorer``).
        on_chunk: Called with the number of finished tasks after each chunk (tests use it to kill mid-run).
    """
    from envkit.oracles.model_policies import make_policy
    from envkit.oracles.scorers import make_scorer

    t_start = time.perf_counter()
    out = Path(cfg.out)
    fresh = not out.with_name(out.name + ".journal.jsonl").exists()
    store = RecordStore(out, meta=cfg.meta())
    pending = [i for i in range(cfg.tasks) if f"task-{i}" not in store.done]
    sero = cfg.sero_config
    timing: dict[str, float] = dict.fromkeys(("rollout_s", "continue_s", "scoring_s", "credit_s", "io_s"), 0.0)
    counts: dict[str, int] = dict.fromkeys(
        ("tasks_run", "policy_steps", "continuations", "oracle_steps", "snapshots_released", "worker_restarts"), 0
    )
    per_chunk = cfg.chunk_tasks or max(
        1, -(-cfg.workers // cfg.group), -(-cfg.workers // max(1, cfg.sero.roots_per_group))
    )
    bar = _Bar(cfg.progress, cfg.tasks, cfg.tasks - len(pending))
    if pending:
        post = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sero-post")
        in_flight: Future[dict[str, float]] | None = None

        def settle() -> None:
            nonlocal in_flight
            if in_flight is not None:
                for k, v in in_flight.result().items():  # re-raises an error of the post-processing thread
                    timing[k] += v
                in_flight = None

        try:
            policy = policy or make_policy(cfg.policy, seed=cfg.seed, device=cfg.device)
            scorer = scorer or (make_scorer(cfg.scorer, device=cfg.device) if cfg.sero.roots_per_group else None)
            where = {"fleet": cfg.fleet} if cfg.backend == "fleet" else {}
            pool_cm = make_pool(EnvFactory(cfg.env_id, dict(cfg.env_kwargs)), cfg.workers, cfg.backend, **where)
            with pool_cm as raw_pool:
                md = raw_pool.call(0, "metadata").value or {}
                cap = capability_from_metadata(md)
                pool = OwnerTrackingPool(raw_pool)  # roots go to the worker that made them
                snaps = cfg.backend in ("inprocess", "fleet") or cap.picklable  # fleet: handles, held in the actors
                for c in range(0, len(pending), per_chunk):
                    idx = pending[c : c + per_chunk]
                    t0 = time.perf_counter()
                    bar.phase(f"policy rollouts of tasks {idx[0]}..{idx[-1]}")
                    tasks = [Task(f"task-{i}", task_seed(cfg.seed, i)) for i in idx for _ in range(cfg.group)]
                    keys = [i * cfg.group + g for i in idx for g in range(cfg.group)]
                    trajs = rollout(
                        _StableKeys(policy, keys),
                        pool,
                        tasks,
                        env_id=cfg.env_id,
                        max_steps=sero.horizon,
                        record_snapshots=snaps,
                        retries=cfg.retries,
                    )
                    groups = [trajs[k * cfg.group : (k + 1) * cfg.group] for k in range(len(idx))]
                    t1 = time.perf_counter()
                    bar.phase("restoring + oracle on the roots")
                    per_task = continue_roots(pool, cfg.env_id, sero, idx, groups)
                    # snapshots that hold resources (SWE layers, ALFWorld registries) are released where they live
                    counts["snapshots_released"] += pool.release(discard=cap.holds_resources or cfg.backend == "fleet")
                    t2 = time.perf_counter()
                    outs = [o for part in per_task for o in part]
                    bare = [[t.without_snapshots() for t in g] for g in groups]
                    timing["rollout_s"] += t1 - t0
                    timing["continue_s"] += t2 - t1
                    for k, n in (
                        ("tasks_run", len(idx)),
                        ("policy_steps", sum(t.length for t in trajs)),
                        ("continuations", sum(not o.dead_end for o in outs)),
                        ("oracle_steps", sum(len(o.steps) for o in outs)),
                    ):
                        counts[k] += n
                    # Weights, credit and the journal append of this chunk overlap the next chunk's env work.
                    settle()
                    in_flight = post.submit(_finish_chunk, cfg, scorer, store, idx, bare, per_task)
                    bar.advance(len(idx), sum(not o.dead_end for o in outs), sum(o.success for o in outs))
                    if on_chunk is not None:
                        on_chunk(len(idx))
                settle()
                counts["worker_restarts"] += getattr(raw_pool, "restarts", 0)
        except BaseException:
            bar.stop()
            post.shutdown(wait=True)
            if fresh and not store.done:  # nothing stored: do not leave a journal that pins these settings
                store.journal.unlink(missing_ok=True)
            raise
        post.shutdown(wait=True)
    bar.stop()
    t5 = time.perf_counter()
    n_rows = write_output(store, out)
    timing["io_s"] += time.perf_counter() - t5
    wall = time.perf_counter() - t_start
    session = {
        **dict(timing),
        **dict(counts),
        "wall_s": wall,
        "rows": n_rows,
        "continuations_per_min": 60 * counts["continuations"] / timing["continue_s"] if timing["continue_s"] else None,
        "policy_steps_per_s": counts["policy_steps"] / timing["rollout_s"] if timing["rollout_s"] else None,
        "workers": cfg.workers,
        "backend": cfg.backend,
    }
    stats = [r["__stats__"] for r in store.records() if "__stats__" in r]
    summary = summarize(stats, session)
    summary["settings"] = {**cfg.meta(), "out": str(out), "tasks": cfg.tasks}
    tmp = summary_path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str))
    os.replace(tmp, summary_path(out))
    return summary


class _Bar:
    """Progress over tasks with the current phase and the running rescue count: a rich bar on a terminal,
    plain lines (`envkit.progress.ProgressLines`, every 10 s) when the output is piped or redirected."""

    def __init__(self, enabled: bool, total: int, done: int):
        from envkit.progress import ProgressLines, is_terminal

        self.prog: Any = None
        self.lines: ProgressLines | None = None
        self.rescued = self.tried = 0
        if not enabled or total == done:
            return
        if not is_terminal():
            self.lines = ProgressLines("SERO tasks", total=total, done=done)
            self.lines.print("starting")
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.prog = Progress(
            TextColumn("[bold]SERO tasks"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
        )
        self.prog.start()
        self.tid = self.prog.add_task("", total=total, completed=done)

    def phase(self, text: str) -> None:
        if self.prog is not None:
            self.prog.update(self.tid, description=f"{text} | rescued {self.rescued}/{self.tried} roots")

    def advance(self, n: int, tried: int, rescued: int) -> None:
        self.tried += tried
        self.rescued += rescued
        if self.lines is not None:
            self.lines.advance(n, note=f"rescued {self.rescued}/{self.tried} roots")
        if self.prog is not None:
            self.prog.update(self.tid, advance=n)
            self.phase("")

    def stop(self) -> None:
        if self.prog is not None:
            self.prog.stop()
