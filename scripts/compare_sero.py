"""GraphGPO with and without SERO from the same random model, on CPU: does an all-fail start learn?

Two `envkit-train local` runs on a multi-turn env (default ``envkit/Toy-v0``) from the same randomly initialised
byte-level model, same seed, same tasks and rollout budget per step; one adds SERO's oracle continuations
(`envkit.trainers.local.sero`). A random model emits no valid action, so every group starts all-fail: without SERO
every advantage is zero and nothing can be learned; with SERO, restored roots + oracle continuations give the
group successful rows (reachability-weighted) to learn from.

Writes ``<out>/compare_sero.json`` (per-arm curves and a summary) and ``<out>/compare_sero.png`` (success
rate, zero-advantage group fraction, invalid-action share and oracle rows per step).

Usage:
    python scripts/compare_sero.py --out runs/sero --steps 120
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from envkit.runtime.models import ModelConfig
from envkit.trainers.local.multi_turn import AgentConfig
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig

CURVES = ("success_rate", "zero_adv_fraction", "invalid_share", "sero_rows")


def run_arm(args: argparse.Namespace, sero: bool) -> dict[str, Any]:
    """One training run; returns its per-step records and wall time."""
    cfg = TrainConfig(
        task=args.env, model=ModelConfig(path="tiny:bytes", hidden_size=64, layers=2, device=args.device),
        run_dir=str(Path(args.out) / ("sero" if sero else "graphgpo")), steps=args.steps, seed=args.seed,
        prompts_per_step=args.prompts_per_step, group_size=args.group_size, max_new_tokens=8, lr=args.lr,
        agent=AgentConfig(max_turns=args.max_turns, max_context_tokens=2000, estimator="graphgpo", sero=sero),
        tensorboard=False, plot=True, progress=True,
    )  # fmt: skip
    t0 = time.perf_counter()
    records = LocalTrainer(cfg).train()
    return {"records": records, "wall_s": time.perf_counter() - t0}


def first_step_at(records: list[dict[str, Any]], key: str, level: float) -> int | None:
    """The first step whose `key` reaches `level` (None if never)."""
    return next((int(r["step"]) for r in records if r.get(key, 0.0) >= level), None)


def plot(arms: dict[str, list[dict[str, Any]]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.6))
    for ax, key in zip(axes, CURVES, strict=True):
        for name, recs in arms.items():
            ax.plot([r["step"] for r in recs], [r.get(key, 0.0) for r in recs], label=name, linewidth=1.6)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Same random model, seed and budget: GraphGPO vs GraphGPO + SERO")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/compare_sero")
    ap.add_argument("--env", default="envkit/Toy-v0", help="a multi-turn envkit id with an oracle")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {"GraphGPO": run_arm(args, sero=False), "GraphGPO + SERO": run_arm(args, sero=True)}
    arms = {name: run["records"] for name, run in runs.items()}
    summary = {
        name: {
            "success_first_10_steps": sum(r["success_rate"] for r in recs[:10]) / max(1, len(recs[:10])),
            "success_last_10_steps": sum(r["success_rate"] for r in recs[-10:]) / max(1, len(recs[-10:])),
            "first_step_success_ge_0.5": first_step_at(recs, "success_rate", 0.5),
            "invalid_share_last_10_steps": sum(r["invalid_share"] for r in recs[-10:]) / max(1, len(recs[-10:])),
            "wall_s": round(runs[name]["wall_s"], 1),
        }
        for name, recs in arms.items()
    }
    keep = ("step", *CURVES, "sero_succeeded", "sero_weight_mean", "reward_mean")
    result = {
        "config": vars(args),
        "summary": summary,
        "curves": {name: [{k: r[k] for k in keep if k in r} for r in recs] for name, recs in arms.items()},
    }
    (out / "compare_sero.json").write_text(json.dumps(result, indent=1))
    plot(arms, out / "compare_sero.png")
    print(json.dumps(summary, indent=1))
    print(
        f"wrote {out / 'compare_sero.json'} and {out / 'compare_sero.png'} (runs: {out / 'graphgpo'}, {out / 'sero'})"
    )


if __name__ == "__main__":
    main()
