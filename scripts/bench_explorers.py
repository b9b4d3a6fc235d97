"""Wall time per training step of EDEN and XRPO relative to GRPO at the same rollout budget (one run, CPU).

Three local trainers (explorer none / eden / xrpo) start from the same weights (a short supervised warm-up on
the synthetic arithmetic task, or ``--init-from``) with the same prompts per step, group size, token cap and
loss settings. Their steps are interleaved round-robin (the order rotates every step) so machine noise hits
every arm alike; the per-step time is the median over the timed steps (the first ``--skip`` steps are not
timed). EDEN's one-off anchor-bank selection is reported separately (``eden_bank_selection_s``), not in the step.

Prints ONE JSON object, e.g. ``{"eden_vs_grpo": 1.02, "xrpo_vs_grpo": 1.04, ...}`` (target <= 1.05).
``xrpo_2phases_vs_grpo`` is XRPO with ``n_phases=2`` (one generate call fewer per step than the default 3);
``grpo_again_vs_grpo`` is a second, identical GRPO arm: how far from 1.0 it lands is the noise of the measurement.

The default workload (a ~1M-parameter model, 2-digit addition, 5-token answers) is CPU-sized; on it phased
generation and ICL-prefixed prompts dominate XRPO's step (docs/training.md). ``--model`` / ``--task`` /
``--max-new-tokens`` measure other workloads, e.g. on a GPU with a real model and realistic response lengths.

Usage:
    python scripts/bench_explorers.py --steps 20
    python scripts/bench_explorers.py --model smollm2 --task envkit/Math-v0 --device cuda --max-new-tokens 256 \
        --prompts-per-step 32 --steps 10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.explorers.eden import EdenBankConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.local.task_specs import make_task
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig
from envkit.trainers.local.warmup import sft_warmup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per arm")
    ap.add_argument("--skip", type=int, default=2, help="untimed first steps per arm")
    ap.add_argument("--prompts-per-step", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=200, help="supervised warm-up steps (arith tasks only)")
    ap.add_argument("--init-from", default=None, help="model folder to start from (skips the warm-up)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="tiny:arith", help="--model.path of the trainer (tiny:arith, smollm2, a folder)")
    ap.add_argument("--task", default="arith", help="arith, arith:<digits> or a single-turn envkit id")
    ap.add_argument("--env-kwargs", default="{}", help="JSON keyword arguments of an envkit task's env")
    ap.add_argument("--max-new-tokens", type=int, default=5)
    ap.add_argument(
        "--arms", nargs="+", default=["none", "eden", "xrpo", "grpo_again"],
        choices=["none", "eden", "xrpo", "xrpo_2phases", "xrpo_no_icl", "grpo_again"],
        help="arms in creation order (none = GRPO, the reference; it must be included)",
    )  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="bench_explorers_"))
    model_cfg = ModelConfig(path=args.model, device=args.device)
    init = args.init_from
    if init is None and args.task.startswith("arith") and args.warmup_steps > 0:
        model, tok = load_model(model_cfg)
        task = make_task(args.task)
        sft_warmup(model, tok, task, steps=args.warmup_steps, batch=64, lr=3e-3, seed=0)
        init = str(tmp / "warmup")
        model.save_pretrained(init)
        tok.save_pretrained(init)
    eden = EdenBankConfig(
        n_noisy=max(1, args.group_size // 4), n_anchors=4, candidate_percentiles=(0.0, 100.0), n_selection_prompts=32,
        max_scored=None,
    )  # fmt: skip
    xrpo = XrpoConfig(n0=max(2, args.group_size // 2), icl_backend="bm25")
    trainers: dict[str, LocalTrainer] = {}
    setup: dict[str, float] = {}
    arm_cfgs: dict[str, tuple[Any, XrpoConfig]] = {
        "none": ("none", xrpo),
        "eden": ("eden", xrpo),
        "xrpo": ("xrpo", xrpo),
    }
    arm_cfgs["xrpo_2phases"] = ("xrpo", dataclasses.replace(xrpo, n_phases=2))
    arm_cfgs["xrpo_no_icl"] = ("xrpo", dataclasses.replace(xrpo, icl=False))
    arm_cfgs["grpo_again"] = ("none", xrpo)  # a second, identical GRPO arm: the measurement's noise floor
    for arm in args.arms:
        explorer, xcfg = arm_cfgs[arm]
        cfg = TrainConfig(
            task=args.task, env_kwargs=args.env_kwargs, model=model_cfg, run_dir=str(tmp / arm),
            steps=args.skip + args.steps, seed=0, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
            max_new_tokens=args.max_new_tokens, explorer=explorer,
            eden=eden, xrpo=xcfg, init_from=init, tensorboard=False, plot=False, progress=False,
        )  # type: ignore[arg-type]  # fmt: skip
        t0 = time.perf_counter()
        trainers[arm] = LocalTrainer(cfg)
        setup[arm] = time.perf_counter() - t0
    times: dict[str, list[float]] = {a: [] for a in trainers}
    rollout_times: dict[str, list[float]] = {a: [] for a in trainers}
    rollouts: dict[str, list[int]] = {a: [] for a in trainers}
    lengths: dict[str, list[float]] = {a: [] for a in trainers}
    loss_rows: dict[str, list[int]] = {a: [] for a in trainers}
    arms = list(trainers)
    for step in tqdm(range(1, args.skip + args.steps + 1), desc="bench"):
        order = arms[step % len(arms) :] + arms[: step % len(arms)]
        for arm in order:
            t0 = time.perf_counter()
            m: dict[str, Any] = trainers[arm].step(step)
            dt = time.perf_counter() - t0
            rollouts[arm].append(int(m["rollouts"]))
            lengths[arm].append(float(m["response_length"]))
            loss_rows[arm].append(int(m["rows_in_loss"]))
            if step > args.skip:
                times[arm].append(dt)
                rollout_times[arm].append(float(m["time_rollout_s"]))
    med = {a: statistics.median(v) for a, v in times.items()}

    def name(arm: str) -> str:
        return "grpo" if arm == "none" else arm

    med_roll = {a: statistics.median(v) for a, v in rollout_times.items()}
    out = {
        **{f"{a}_vs_grpo": round(med[a] / med["none"], 3) for a in args.arms if a != "none"},
        "target": 1.05,
        "step_s_median": {("grpo" if a == "none" else a): round(v, 4) for a, v in med.items()},
        "rollout_s_median": {("grpo" if a == "none" else a): round(v, 4) for a, v in med_roll.items()},
        "rollouts_per_step": {("grpo" if a == "none" else a): sorted(set(v)) for a, v in rollouts.items()},
        "response_length_mean": {name(a): round(statistics.mean(v), 2) for a, v in lengths.items()},
        "rows_in_loss_mean": {name(a): round(statistics.mean(v), 1) for a, v in loss_rows.items()},
        "eden_bank_selection_s": round(trainers["eden"].explorer_setup_s, 2) if "eden" in trainers else None,
        "trainer_setup_s": {("grpo" if a == "none" else a): round(v, 2) for a, v in setup.items()},
        "timed_steps": args.steps,
        "prompts_per_step": args.prompts_per_step,
        "group_size": args.group_size,
        "device": args.device,
        "model": args.model,
        "task": args.task,
        "max_new_tokens": args.max_new_tokens,
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
