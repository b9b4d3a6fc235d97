"""Env-pool throughput vs serial on the toy env with a simulated per-step cost (default 5 ms).

Prints one JSON object: steps/s serial (one in-process env), steps/s with subprocess workers, and their ratio,
measured side by side in one run. Target on 2 cores with a 5 ms step: >= 1.8x.

    python scripts/bench_pool.py --episodes 40 --workers 2 --step-ms 5
"""

from __future__ import annotations

import argparse
import json
import os
import time

from envkit.policies import RandomAdmissiblePolicy
from envkit.pool import EnvFactory, make_pool
from envkit.rollout import Task, rollout


def measure(backend: str, workers: int, tasks: list[Task], step_ms: float) -> dict[str, float]:
    factory = EnvFactory("envkit/Toy-v0", {"step_delay": step_ms / 1000, "max_steps": 40})
    with make_pool(factory, size=workers, backend=backend) as pool:
        rollout(RandomAdmissiblePolicy(0), pool, tasks[:workers], record_snapshots=False)  # warm-up
        t0 = time.perf_counter()
        trajs = rollout(RandomAdmissiblePolicy(0), pool, tasks, record_snapshots=False)
        dt = time.perf_counter() - t0
    steps = sum(t.length for t in trajs)
    return {"steps": steps, "seconds": round(dt, 3), "steps_per_s": round(steps / dt, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--step-ms", type=float, default=5.0)
    args = ap.parse_args()
    tasks = [Task(f"t{i}", seed=i, options={"length": 30, "goal": 29}) for i in range(args.episodes)]
    serial = measure("inprocess", 1, tasks, args.step_ms)
    pooled = measure("subprocess", args.workers, tasks, args.step_ms)
    print(
        json.dumps(
            {
                "bench": "pool",
                "cpus": os.cpu_count(),
                "step_ms": args.step_ms,
                "episodes": args.episodes,
                "serial_inprocess": serial,
                f"subprocess_{args.workers}_workers": pooled,
                "speedup": round(pooled["steps_per_s"] / serial["steps_per_s"], 2),
                "target_speedup": 1.8,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
