"""How long each console script takes to answer ``--help`` (what a new user types first). Target: < 2 s.

Prints one JSON object: per command the best of `--repeat` wall times and the CPU (user + sys) time of that run,
and `python -c pass` measured side by side as the interpreter's own floor (on a loaded machine compare CPU times
and the ratio to the floor, not wall times).

    python scripts/bench_help.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (
    ("envkit-oracle", "--help"),
    ("envkit-oracle", "rollout", "--help"),
    ("envkit-oracle", "envs", "--help"),
    ("envkit-train", "--help"),
    ("envkit-train", "local", "--help"),
    ("envkit-train", "openrlhf", "--help"),
    ("envkit-serve", "--help"),
)
TARGET_S = 2.0


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bindir = Path(sys.executable).parent
    floor = min(timed([sys.executable, "-c", "pass"]) for _ in range(args.repeat))
    out: dict[str, object] = {
        "target_s": TARGET_S,
        "python_floor": {"wall_s": round(floor[0], 3), "cpu_s": round(floor[1], 3)},
    }
    for cmd in COMMANDS:
        best = min(timed([str(bindir / cmd[0]), *cmd[1:]]) for _ in range(args.repeat))
        out[" ".join(cmd)] = {
            "wall_s": round(best[0], 3),
            "cpu_s": round(best[1], 3),
            "cpu_vs_floor": round(best[1] / max(floor[1], 1e-3), 1),
            "under_target": best[0] < TARGET_S,
        }
    out["load_average"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
