"""Compare GRPO, EDEN and XRPO on the synthetic arithmetic task (CPU, minutes), branching from one warm-up.

One supervised warm-up of a ~0.8M-parameter Qwen2 (char-level tokenizer, output vocabulary = the task's 15
tokens) is saved once; every arm (explorer none / eden / xrpo) starts from that checkpoint with the same seed,
the same prompts per step and the same rollout budget per step (prompts_per_step * group_size), and the same
loss settings. Each arm is evaluated before and after on a fixed held-out set (sampled at temperature 1: mean
reward = pass@1; and greedy accuracy). Writes ``<out>/compare.json`` and ``<out>/compare.png`` (reward,
zero-advantage group fraction and entropy over steps, one line per arm and seed).

Usage:
    python scripts/compare_explorers.py --out runs/compare --steps 100 --seeds 0 1 2

What it can show: on this small task and budget, whether an explorer changes the learning curve, the share of
all-equal (zero-advantage) groups, and entropy. What it cannot show: anything about large models or hard
benchmarks; differences within the seed-to-seed spread are noise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.explorers.eden import EdenBankConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.local.generation import sample
from envkit.trainers.local.metrics import read_metrics
from envkit.trainers.local.prompt_encoding import decode, encode_prompt
from envkit.trainers.local.tasks import ArithmeticTask
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig
from envkit.trainers.local.warmup import sft_warmup

if TYPE_CHECKING:  # transformers' types for the annotations only
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ARMS = ("none", "eden", "xrpo")


def evaluate(
    model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: ArithmeticTask, n: int = 512, seed: int = 12345
) -> dict[str, float]:
    """Mean reward on a fixed held-out set: one sample at temperature 1 (pass@1) and greedy (temperature ~0)."""
    problems = task.sample(np.random.default_rng(seed), n)
    prompts = [encode_prompt(tok, p.prompt, raw=True) for p in problems]
    model.eval()
    out = {}
    for name, temp in (("pass1", 1.0), ("greedy", 1e-4)):
        s = sample(model, tok, prompts, [temp] * n, max_new_tokens=5, seed=seed)
        out[name] = float(np.mean(task.score(problems, [decode(tok, t) for t in s.tokens])))
    return out


def warm_up(out: Path, model_cfg: ModelConfig, task: ArithmeticTask, steps: int, seed: int) -> Path:
    """Train (or reuse) the shared warm-up checkpoint."""
    folder = out / "warmup"
    if (folder / "config.json").exists():
        return folder
    torch.set_num_threads(1)
    model, tok = load_model(model_cfg)
    t0 = time.perf_counter()
    losses = sft_warmup(model, tok, task, steps=steps, batch=64, lr=3e-3, seed=seed)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    (folder / "warmup.json").write_text(
        json.dumps(
            {
                "steps": steps,
                "final_loss": losses[-1],
                "seconds": time.perf_counter() - t0,
                **evaluate(model, tok, task),
            }
        )
    )
    return folder


def write_results(out: Path, results: dict[str, Any], runs: dict[str, list[dict[str, Any]]], arms: list[str]) -> dict:
    """Summarise the finished arms (mean and std over seeds) and (re)write compare.json and compare.png."""
    summary = {}
    for arm in arms:
        rows = [v for v in results["arms"].values() if v["explorer"] == arm]
        if not rows:
            continue
        summary[arm] = {
            "seeds": len(rows),
            "pass1_before_mean": float(np.mean([r["eval_before"]["pass1"] for r in rows])),
            "pass1_after_mean": float(np.mean([r["eval_after"]["pass1"] for r in rows])),
            "pass1_after_std": float(np.std([r["eval_after"]["pass1"] for r in rows])),
            "greedy_after_mean": float(np.mean([r["eval_after"]["greedy"] for r in rows])),
            "train_reward_last20pct_mean": float(np.mean([r["train_reward_last20pct"] for r in rows])),
            "zero_adv_fraction_mean": float(np.mean([r["zero_adv_fraction_mean"] for r in rows])),
            "entropy_last_mean": float(np.mean([r["entropy_last"] for r in rows])),
            "step_time_median_s": float(np.mean([r["step_time_median_s"] for r in rows])),
        }
    results["summary"] = summary
    (out / "compare.json").write_text(json.dumps(results, indent=2))
    plot_arms(runs, out / "compare.png")
    return summary


def plot_arms(runs: dict[str, list[dict[str, Any]]], png: Path, window: int = 10) -> None:
    """One panel per curve (reward, zero-advantage fraction, entropy): faint per-seed lines, bold seed mean
    smoothed over `window` steps, one colour per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = {"none": "GRPO", "eden": "EDEN", "xrpo": "XRPO"}
    colours = {"none": "tab:blue", "eden": "tab:orange", "xrpo": "tab:green"}
    keys = ("reward_mean", "zero_adv_fraction", "entropy")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, key in zip(axes, keys):
        for arm in names:
            curves = [[r[key] for r in recs] for k, recs in runs.items() if k.split("/")[0] == arm]
            if not curves:
                continue
            n = min(len(c) for c in curves)
            for c in curves:
                ax.plot(range(1, n + 1), c[:n], color=colours[arm], alpha=0.2, linewidth=0.8)
            mean = np.mean([c[:n] for c in curves], axis=0)
            w = max(1, min(window, n))  # a run shorter than the window is smoothed over its own length
            smooth = np.convolve(mean, np.ones(w) / w, mode="valid")
            ax.plot(range(w, n + 1), smooth, color=colours[arm], linewidth=2.2,
                    label=f"{names[arm]} (mean of {len(curves)} seeds)")  # fmt: skip
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Same warm-up, seed and rollout budget per step: GRPO vs EDEN vs XRPO (synthetic 2-digit addition)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/compare_explorers")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--warmup-steps", type=int, default=600)
    ap.add_argument("--prompts-per-step", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--lr-warmup-steps", type=int, default=20)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--replot", action="store_true", help="only redraw compare.png from the runs in --out")
    args = ap.parse_args()
    out = Path(args.out)
    if args.replot:
        done = json.loads((out / "compare.json").read_text())["arms"]
        stored = {k: read_metrics(out / f"{v['explorer']}_seed{v['seed']}" / "metrics.jsonl") for k, v in done.items()}
        plot_arms(stored, out / "compare.png")
        return
    out.mkdir(parents=True, exist_ok=True)
    task = ArithmeticTask(digits=2)
    model_cfg = ModelConfig(path="tiny:arith", device="cpu")
    warm = warm_up(out, model_cfg, task, args.warmup_steps, seed=0)
    warm_stats = json.loads((warm / "warmup.json").read_text())
    print(f"warm-up: {warm_stats}", flush=True)
    # EDEN on this task: n_noisy = 25% of the group; every non-special token is an anchor candidate (15-token
    # vocabulary), hence the full norm band and 4 anchors.
    eden = EdenBankConfig(
        n_noisy=max(1, args.group_size // 4), n_anchors=4, candidate_percentiles=(0.0, 100.0), n_selection_prompts=64,
        max_scored=None,
    )  # fmt: skip
    xrpo = XrpoConfig(n0=max(2, args.group_size // 2))
    runs: dict[str, list[dict[str, Any]]] = {}
    results: dict[str, Any] = {"warmup": warm_stats, "arms": {}, "config": {}}
    for seed in args.seeds:
        for arm in args.arms:
            cfg = TrainConfig(
                task="arith", model=model_cfg, run_dir=str(out / f"{arm}_seed{seed}"), steps=args.steps, seed=seed,
                prompts_per_step=args.prompts_per_step, group_size=args.group_size, max_new_tokens=5,
                explorer=arm, lr=args.lr, lr_warmup_steps=args.lr_warmup_steps, eden=eden, xrpo=xrpo, init_from=str(warm), tensorboard=False,
            )  # type: ignore[arg-type]  # fmt: skip
            t0 = time.perf_counter()
            trainer = LocalTrainer(cfg)
            before = evaluate(trainer.model, trainer.tok, task)
            records = trainer.train()
            after = evaluate(trainer.model, trainer.tok, task)
            wall = time.perf_counter() - t0
            key = f"{arm}/seed{seed}"
            runs[key] = records
            tail = records[-max(1, len(records) // 5) :]
            results["arms"][key] = {
                "explorer": arm,
                "seed": seed,
                "eval_before": before,
                "eval_after": after,
                "train_reward_last20pct": float(np.mean([r["reward_mean"] for r in tail])),
                "zero_adv_fraction_mean": float(np.mean([r["zero_adv_fraction"] for r in records])),
                "entropy_last": records[-1]["entropy"],
                "step_time_median_s": float(np.median([r["time_step_s"] for r in records])),
                "wall_s": wall,
            }
            print(key, json.dumps(results["arms"][key]), flush=True)
            write_results(out, results, runs, args.arms)
            if cfg.task == "arith":
                results["config"] = {
                    k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("run_dir", "seed", "explorer")
                }
            del trainer
    summary = write_results(out, results, runs, args.arms)
    print(json.dumps(summary, indent=2))
    print(f"wrote {out / 'compare.json'} and {out / 'compare.png'}")


if __name__ == "__main__":
    main()
