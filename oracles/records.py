"""Step records, per-task counters and the run summary of ``envkit-oracle rollout`` (`envkit.oracles.pipeline`).

`task_records` turns one task group (policy trajectories, SERO continuations, their weights and GraphGPO credit)
into one record per step with the fields of `STEP_FIELDS`; `task_stats` counts what happened (roots tried,
dead roots skipped, restored native/replay, diverged, continued to success, ...); `summarize` adds the counters of every task (kept in
the journal, so a resumed run's summary covers all tasks) and derives the rates.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envkit.core import Trajectory
from envkit.io import RecordStore, write_parquet
from envkit.oracles.continuation import ContinuationOutcome

STEP_FIELDS = (
    "env_id",
    "task_id",
    "env_task_id",
    "task",
    "seed",
    "group",
    "trajectory",
    "step",
    "observation",
    "action",
    "reward",
    "next_observation",
    "terminated",
    "truncated",
    "invalid",
    "admissible_actions",
    "success",
    "is_oracle",
    "root_id",
    "root_trajectory",
    "root_step",
    "oracle_loglik",
    "reach_weight",
    "distance",
    "distance_before",
    "step_reward",
    "graph_advantage",
    "episode_advantage",
    "advantage",
    "weighted_advantage",
    "episode_return",
)


@dataclass(frozen=True)
class StepCredit:
    """The SERO credit of one step record (`envkit.credit.sero_advantages.sero_advantages`' values of its row).

    Attributes:
        distance: d(s') in the graph with the rescues.
        distance_before: d(s') in the policy-only graph (None for oracle rows).
        step_reward: ``R_G``.
        graph_advantage: ``A_G``.
        episode_advantage: ``A_E`` (policy rows: over the policy episodes only).
        advantage: ``beta_g * A_G + beta_e * A_E``, before the weight.
        weight: The reachability weight (1 for policy rows).
    """

    distance: int
    distance_before: int | None
    step_reward: float
    graph_advantage: float
    episode_advantage: float
    advantage: float
    weight: float


def summary_path(out: str | os.PathLike[str]) -> Path:
    """Where a run's summary lives: ``<out>.summary.json``."""
    p = Path(out)
    return p.with_name(p.name + ".summary.json")


def task_records(
    env_id: str,
    index: int,
    seed: int,
    terminal_reward: float,
    trajs: Sequence[Trajectory],
    outcomes: Sequence[ContinuationOutcome],
    weighted: Sequence[Any],
    credit: tuple[dict[Any, Any], dict[Any, Any]],
) -> list[dict[str, Any]]:
    pol, ora = credit
    task_id = f"task-{index}"
    # the env's own id of the task (WebShop goal, SWE instance, ALFWorld game): joins records with task metadata
    env_task = next((str(t.initial_info["task_id"]) for t in trajs if t.initial_info.get("task_id") is not None), None)
    base = {"env_id": env_id, "task_id": task_id, "env_task_id": env_task, "task": index, "seed": seed, "group": index}
    recs: list[dict[str, Any]] = []

    def row(traj_id: int, t: int, st: Any, info_before: Mapping[str, Any], success: bool, **extra: Any) -> None:
        c = extra.pop("credit", None)
        recs.append(
            {
                **base,
                "trajectory": traj_id,
                "step": t,
                "observation": st.observation,
                "action": st.action,
                "reward": float(st.reward),
                "next_observation": st.next_observation,
                "terminated": st.terminated,
                "truncated": st.truncated,
                "invalid": bool(st.info.get("invalid", False)),
                "admissible_actions": [str(a) for a in info_before.get("admissible_actions") or []],
                "success": success,
                "distance": None if c is None else c.distance,
                "distance_before": None if c is None else c.distance_before,
                "step_reward": None if c is None else c.step_reward,
                "graph_advantage": None if c is None else c.graph_advantage,
                "episode_advantage": None if c is None else c.episode_advantage,
                "advantage": None if c is None else c.advantage,
                "episode_return": terminal_reward * success,
                **extra,
            }
        )
        r = recs[-1]
        r["weighted_advantage"] = None if r["advantage"] is None else r["advantage"] * r["reach_weight"]

    for i, traj in enumerate(trajs):
        info = traj.initial_info
        for t, st in enumerate(traj.steps):
            row(
                i,
                t,
                st,
                info,
                traj.success,
                credit=pol.get((i, t)),
                is_oracle=False,
                root_id="",
                root_trajectory=-1,
                root_step=-1,
                oracle_loglik=None,
                reach_weight=1.0,
            )
            info = st.info
    k_ok = 0
    for k, (o, w) in enumerate(zip(outcomes, weighted, strict=True)):
        if not o.success:
            continue
        info = o.root_info
        rid = f"{task_id}/traj-{o.root.trajectory}/step-{o.root.t}"
        for j, st in enumerate(o.steps):
            row(
                len(trajs) + k_ok,
                o.root.t + j,
                st,
                info,
                True,
                credit=ora.get((k, j)),
                is_oracle=True,
                root_id=rid,
                root_trajectory=o.root.trajectory,
                root_step=o.root.t,
                oracle_loglik=w.loglik[j],
                reach_weight=ora[(k, j)].weight if (k, j) in ora else w.weights[j],
            )
            info = st.info
        k_ok += 1
    return [{k: r[k] for k in STEP_FIELDS} for r in recs]


def task_stats(
    trajs: Sequence[Trajectory], outcomes: Sequence[ContinuationOutcome], weighted: Sequence[Any]
) -> dict[str, Any]:
    ok = [t for t in trajs if not t.failed]
    wts = [v for w, o in zip(weighted, outcomes, strict=True) if o.success for v in w.weights]
    dead = sum(o.dead_end for o in outcomes)
    outcomes = [o for o in outcomes if not o.dead_end]  # proved unwinnable and never continued
    rescued = {o.root.trajectory for o in outcomes if o.success}
    return {
        "trajectories": len(trajs),
        "failed_to_run": len(trajs) - len(ok),
        "policy_steps": sum(t.length for t in trajs),
        "policy_successes": sum(t.success for t in ok),
        "rescued_trajectories": len(rescued),
        "roots_tried": len(outcomes),
        "dead_roots_skipped": dead,
        "restored_native": sum(o.restored_by == "native" for o in outcomes),
        "restored_replay": sum(o.restored_by == "replay" for o in outcomes),
        "replay_diverged": sum(o.diverged for o in outcomes),
        "restore_failed": sum(not o.restored_by and not o.diverged for o in outcomes),
        "continued_to_success": sum(o.success for o in outcomes),
        "oracle_steps": sum(len(o.steps) for o in outcomes),
        "oracle_rows": sum(len(o.steps) for o in outcomes if o.success),
        "weight_sum": float(sum(wts)),
        "choice_fallbacks": sum(w.choice_fallbacks for w in weighted),
        "group_success_before": any(t.success for t in ok),
        "group_success_after": any(t.success for t in ok) or bool(rescued),
        "zero_adv_before": len({t.success for t in ok}) <= 1,
        # the group's episodes for training: its policy episodes plus the successful oracle continuations
        "zero_adv_after": len({t.success for t in ok} | ({True} if rescued else set())) <= 1,
        "stop_reasons": dict(Counter(o.reason for o in outcomes if not o.success)),  # whole reasons
        "restore_s": sum(o.restore_s for o in outcomes),
        "oracle_s": sum(o.oracle_s for o in outcomes),
        "oracle_env_s": sum(o.env_s for o in outcomes),
    }


def summarize(stats: Sequence[Mapping[str, Any]], session: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run summary: counters summed over tasks, derived rates, and this session's timing."""
    keys = [
        k for k in (stats[0] if stats else {}) if isinstance(stats[0][k], int | float | bool) and k != "stop_reasons"
    ]
    tot: dict[str, Any] = {k: sum(s.get(k, 0) for s in stats) for k in keys}  # older journals lack new keys
    for k in ("group_success_before", "group_success_after", "zero_adv_before", "zero_adv_after"):
        if k in tot:
            tot[k] = int(tot[k])
    reasons: Counter[str] = Counter()
    for s in stats:
        reasons.update(s.get("stop_reasons", {}))
    n = max(1, tot.get("trajectories", 0) - tot.get("failed_to_run", 0))
    tot.update(
        tasks=len(stats),
        success_rate_before=tot.get("policy_successes", 0) / n,
        success_rate_after=(tot.get("policy_successes", 0) + tot.get("rescued_trajectories", 0)) / n,
        mean_reach_weight=tot.get("weight_sum", 0.0) / max(1, tot.get("oracle_rows", 0)),
        w_min_share=tot.get("oracle_rows_at_w_min", 0.0) / max(1, tot.get("oracle_rows", 0)),
        first_loglik_mean=tot.get("first_loglik_sum", 0.0) / max(1, tot.get("continued_to_success", 0)),
        stop_reasons=dict(sorted(reasons.items())),
    )
    return {"totals": tot, "session": dict(session or {})}


def write_output(store: RecordStore, path: Path) -> int:
    recs = [r for r in store.records() if "__stats__" not in r]
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".jsonl":
        with open(tmp, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    else:
        write_parquet(recs, tmp, meta=store.meta)
    os.replace(tmp, path)
    return len(recs)
