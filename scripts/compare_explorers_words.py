"""GRPO vs EDEN (and its four ablations) vs XRPO on a task over a vocabulary of WORDS, from one warm-up (CPU).

The task (`envkit.trainers.local.word_tasks.WordSequenceTask`, ``--task words``): continue an ordered list of words
(``"tuesday thursday then" -> "saturday monday"``; days, months, numbers, planets, rainbow, NATO alphabet,
stride 1 or 2, forwards or backwards), ~390 train problems and ~84 held-out ones. The model is a tiny Llama
(hidden 128, 4 layers) on a word-level tokenizer, so EDEN's anchor candidates are words (single-word alphabetic
tokens, the METHODS rule), not answer digits as on the arithmetic task of `compare_explorers.py`.

One supervised warm-up (``--warmup-steps``) leaves the model partly solving the task. Half of its rows
(``--warmup-distractor-share``) get one random vocabulary word appended to the prompt, outside the loss, so the
model learns to answer past one extra input position, as a pretrained LLM does: EDEN's noisy rollouts append one
such position, and a model trained without it reads that position as the first word of its answer (with
``--warmup-distractor-share 0`` every noisy rollout fails). Every arm starts from
that checkpoint with the same seed, prompts per step, rollout budget per step (prompts_per_step * group_size)
and loss settings:

    grpo                  plain groups
    eden                  EDEN (anchored noise, METHODS section 5)
    eden_rho0             ablation: the bare anchor row (rho = 0)
    eden_no_anchor        ablation: norm-matched isotropic noise, no anchor direction
    eden_random_anchor    ablation: each noisy rollout draws its own anchor
    eden_fixed_anchor     ablation: one anchor for every prompt
    xrpo                  XRPO (phased allocation, ICL seeding, sharpening)

Every ``--eval-every`` steps each run is evaluated on the held-out problems (``--eval-samples`` samples per
problem at temperature 1: pass@1 and the unbiased pass@k for k in ``--ks``; greedy accuracy) and on a fixed
subset of train problems. Per step the trainer logs entropy and the zero-advantage group fraction.

Writes ``<out>/compare_explorers_words.json`` (config, warm-up, per-run curves and evals, a summary with mean
and std over seeds) and ``<out>/compare_explorers_words.png``.

Usage:
    python scripts/compare_explorers_words.py --out docs/results   # defaults: 7 arms x 3 seeds, 2 processes
    python scripts/compare_explorers_words.py --out /tmp/w --steps 2 --seeds 0 --warmup-steps 5 --eval-every 1

What it can show: at this budget, whether an explorer or ablation moves held-out pass@1 / pass@k, entropy and
the zero-advantage fraction, relative to the seed-to-seed spread. What it cannot show: anything about large
models, long reasoning or hard benchmarks.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.explorers.anchors import decoded_vocab
from envkit.trainers.explorers.eden import EdenBankConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.local.generation import sample
from envkit.trainers.local.prompt_encoding import decode, encode_prompt
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig
from envkit.trainers.local.warmup import sft_warmup
from envkit.trainers.local.word_tasks import WordSequenceTask, save_word_model

if TYPE_CHECKING:  # transformers' types for the annotations only
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: arm -> (explorer, EDEN ablation)
ARMS: dict[str, tuple[Any, Any]] = {
    "grpo": ("none", "anchored"),
    "eden": ("eden", "anchored"),
    "eden_rho0": ("eden", "rho0"),
    "eden_no_anchor": ("eden", "no_anchor"),
    "eden_random_anchor": ("eden", "random_anchor_per_rollout"),
    "eden_fixed_anchor": ("eden", "fixed_anchor"),
    "xrpo": ("xrpo", "anchored"),
}
CURVES = ("reward_mean", "zero_adv_fraction", "entropy")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    task: WordSequenceTask,
    n: int,
    ks: list[int],
    seed: int = 12345,
) -> dict:
    """Held-out pass@1 / pass@k (n samples per problem at temperature 1) and greedy accuracy; train pass@1 on a
    fixed subset of the train problems (as many as held-out)."""
    model.eval()
    out: dict[str, float] = {}
    heldout, train = list(task.heldout), list(task.train[:: max(1, len(task.train) // len(task.heldout))])
    for name, probs in (("heldout", heldout), ("train", train)):
        prompts = [encode_prompt(tok, p.prompt, raw=True) for p in probs]
        rows = [x for x in prompts for _ in range(n)]
        s = sample(model, tok, rows, [1.0] * len(rows), max_new_tokens=task.answer_len + 1, seed=seed)
        correct = np.array(task.score([p for p in probs for _ in range(n)], [decode(tok, t) for t in s.tokens]))
        c = correct.reshape(len(probs), n).sum(axis=1)
        out[f"{name}_pass1"] = float(np.mean([pass_at_k(n, int(ci), 1) for ci in c]))
        if name == "heldout":
            for k in ks:
                out[f"heldout_pass{k}"] = float(np.mean([pass_at_k(n, int(ci), k) for ci in c]))
            g = sample(model, tok, prompts, [1e-4] * len(prompts), max_new_tokens=task.answer_len + 1, seed=seed)
            out["heldout_greedy"] = float(np.mean(task.score(probs, [decode(tok, t) for t in g.tokens])))
    return out


def word_ids(tok: PreTrainedTokenizerBase) -> list[int]:
    """Ids of the vocabulary's alphabetic words (the warm-up's distractors; EDEN's anchor candidates are among
    them)."""
    return [i for i, w in enumerate(decoded_vocab(tok)) if w.isascii() and w.isalpha() and len(w) >= 2]


def extra_position_accuracy(
    model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: WordSequenceTask, seed: int = 12345
) -> float:
    """Greedy held-out accuracy with one random vocabulary word appended to each prompt: how well the model
    answers past one extra input position (what an EDEN noisy rollout adds; rho = 0 is exactly this)."""
    rng = np.random.default_rng(seed)
    ids = word_ids(tok)
    probs = list(task.heldout)
    prompts = [[*encode_prompt(tok, p.prompt, raw=True), int(rng.choice(ids))] for p in probs]
    g = sample(model, tok, prompts, [1e-4] * len(prompts), max_new_tokens=task.answer_len + 1, seed=seed)
    return float(np.mean(task.score(probs, [decode(tok, t) for t in g.tokens])))


def warm_up(out: Path, task: WordSequenceTask, args: argparse.Namespace) -> tuple[Path, dict]:
    """Build the word model and train (or reuse) the shared warm-up checkpoint."""
    folder = out / "warmup"
    if (folder / "warmup.json").exists():
        return folder, json.loads((folder / "warmup.json").read_text())
    save_word_model(folder, task.words, hidden_size=args.hidden_size, layers=args.layers)
    model, tok = load_model(ModelConfig(path=str(folder), device="cpu"))
    t0 = time.perf_counter()
    losses = sft_warmup(model, tok, task, steps=args.warmup_steps, batch=64, lr=3e-3, seed=0, progress=False,
                        distractor_ids=word_ids(tok), distractor_share=args.warmup_distractor_share)  # fmt: skip
    model.save_pretrained(folder)
    stats = {"steps": args.warmup_steps, "distractor_share": args.warmup_distractor_share,
             "final_loss": losses[-1] if losses else None, "seconds": time.perf_counter() - t0,
             "heldout_greedy_extra_position": extra_position_accuracy(model, tok, task),
             **evaluate(model, tok, task, args.eval_samples, args.ks)}  # fmt: skip
    (folder / "warmup.json").write_text(json.dumps(stats))
    return folder, stats


def run_arm(arm: str, seed: int, warm: Path, task: WordSequenceTask, args: argparse.Namespace) -> dict[str, Any]:
    """One run from the warm-up: per-step records and the evaluations every `eval_every` steps."""
    explorer, ablation = ARMS[arm]
    eden = EdenBankConfig(
        n_noisy=max(1, args.group_size // 4), n_anchors=args.n_anchors, ablation=ablation,
        n_selection_prompts=48, max_scored=32, warmup_steps=max(1, args.steps // 3),
    )  # fmt: skip
    cfg = TrainConfig(
        task="words", model=ModelConfig(path=str(warm), device="cpu"), run_dir=str(Path(args.out) / f"{arm}_seed{seed}"),
        steps=args.steps, seed=seed, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
        max_new_tokens=task.answer_len + 1, explorer=explorer, lr=args.lr, lr_warmup_steps=args.lr_warmup_steps,
        eden=eden, xrpo=XrpoConfig(n0=max(2, args.group_size // 2)), tensorboard=False, plot=False, progress=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer = LocalTrainer(cfg)
    evals = [{"step": 0, **evaluate(trainer.model, trainer.tok, task, args.eval_samples, args.ks)}]
    records = []
    for step in range(1, args.steps + 1):
        records.append(trainer.logger.log(step, trainer.step(step)))
        if step % args.eval_every == 0 or step == args.steps:
            evals.append({"step": step, **evaluate(trainer.model, trainer.tok, task, args.eval_samples, args.ks)})
    trainer.logger.close()
    keep = ("step", *CURVES, "eden_noisy_kept_share", "eden_noisy_success_rate", "eden_bank_relaxed", "xrpo_icl_share")
    anchors = []
    if explorer == "eden":
        driver: Any = trainer.explorer  # the single-turn EDEN driver (it holds the anchor bank)
        anchors = [trainer.tok.convert_ids_to_tokens(int(t)) for t in driver.bank.token_ids]
    return {
        "arm": arm, "seed": seed, "wall_s": time.perf_counter() - t0, "anchors": anchors, "evals": evals,
        "curves": [{k: r[k] for k in keep if k in r} for r in records],
    }  # fmt: skip


def summarise(runs: list[dict[str, Any]], ks: list[int]) -> dict[str, Any]:
    """Per arm: mean and std over seeds of the final evaluation, the mean zero-advantage fraction and the final
    entropy (mean of the last 10% of steps)."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        rows = [r for r in runs if r["arm"] == arm]
        if not rows:
            continue
        s: dict[str, Any] = {"seeds": len(rows)}
        for key in ("heldout_pass1", *(f"heldout_pass{k}" for k in ks), "heldout_greedy", "train_pass1"):
            vals = [r["evals"][-1][key] for r in rows]
            s[key] = {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "per_seed": vals}
            s[key + "_start"] = float(np.mean([r["evals"][0][key] for r in rows]))
        tail = max(1, len(rows[0]["curves"]) // 10)
        for key in ("zero_adv_fraction", "entropy"):
            whole = [float(np.mean([c[key] for c in r["curves"]])) for r in rows]
            last = [float(np.mean([c[key] for c in r["curves"][-tail:]])) for r in rows]
            s[f"{key}_mean_over_steps"] = {"mean": float(np.mean(whole)), "std": float(np.std(whole))}
            s[f"{key}_last"] = {"mean": float(np.mean(last)), "std": float(np.std(last))}
        s["wall_s_mean"] = float(np.mean([r["wall_s"] for r in rows]))
        out[arm] = s
    return out


def plot(runs: list[dict[str, Any]], png: Path, ks: list[int], window: int = 5) -> None:
    """Panels: train reward, zero-advantage fraction, entropy (per step, seed mean smoothed, band = +-1 std over
    seeds) and held-out pass@1 / pass@max(k) at the evaluation steps (mean +- std)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kmax = max(ks) if ks else 1
    panels = [*CURVES, "heldout_pass1", f"heldout_pass{kmax}"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels), 3.8))
    colours = {arm: plt.get_cmap("tab10")(i) for i, arm in enumerate(ARMS)}
    for ax, key in zip(axes, panels, strict=True):
        for arm in ARMS:
            rows = [r for r in runs if r["arm"] == arm]
            if not rows:
                continue
            if key in CURVES:
                n = min(len(r["curves"]) for r in rows)
                ys = np.array([[c[key] for c in r["curves"][:n]] for r in rows])
                w = max(1, min(window, n))
                kern = np.ones(w) / w
                ys = np.array([np.convolve(y, kern, mode="valid") for y in ys])
                xs = np.arange(w, n + 1)
            else:
                n = min(len(r["evals"]) for r in rows)
                xs = np.array([e["step"] for e in rows[0]["evals"][:n]])
                ys = np.array([[e[key] for e in r["evals"][:n]] for r in rows])
            m, sd = ys.mean(axis=0), ys.std(axis=0)
            ax.plot(xs, m, color=colours[arm], linewidth=1.8, label=f"{arm} ({len(rows)})")
            ax.fill_between(xs, m - sd, m + sd, color=colours[arm], alpha=0.12)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Word-list continuation, same warm-up / seeds / rollout budget: GRPO vs EDEN (+ ablations) vs XRPO")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def _one_thread() -> None:
    torch.set_num_threads(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/compare_explorers_words")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--warmup-steps", type=int, default=600)
    ap.add_argument("--warmup-distractor-share", type=float, default=0.5,
                    help="share of warm-up rows with one random word appended to the prompt (not in the loss), so "
                    "the model tolerates EDEN's extra input position; 0 = the old warm-up, where every noisy "
                    "rollout fails")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=2, help="runs trained in parallel (one process and thread each)")
    ap.add_argument("--prompts-per-step", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--n-anchors", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--lr-warmup-steps", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-samples", type=int, default=16, help="samples per held-out problem (n of pass@k)")
    ap.add_argument("--ks", type=int, nargs="+", default=[4, 16], help="pass@k reported besides pass@1")
    ap.add_argument("--hidden-size", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--fresh", action="store_true", help="ignore finished runs in --out (default: resume them)")
    args = ap.parse_args()
    if any(k > args.eval_samples for k in args.ks):
        ap.error("every --ks value must be <= --eval-samples")
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = WordSequenceTask()
    warm, warm_stats = warm_up(out, task, args)
    print(f"warm-up: {json.dumps(warm_stats)}", flush=True)
    result: dict[str, Any] = {
        "config": {**vars(args), "train_problems": len(task.train), "heldout_problems": len(task.heldout),
                   "vocabulary": len(task.words)},
        "warmup": warm_stats, "runs": [], "complete": False,
    }  # fmt: skip
    old = out / "compare_explorers_words.json"
    if old.exists() and not args.fresh:  # resume: keep the finished runs of an interrupted invocation
        prev = json.loads(old.read_text())
        if prev.get("warmup") == warm_stats:
            result["runs"] = prev["runs"]
    done = {(r["arm"], r["seed"]) for r in result["runs"]}
    todo = [(arm, seed) for seed in args.seeds for arm in args.arms if (arm, seed) not in done]

    def finished(run: dict[str, Any]) -> None:
        result["runs"].append(run)
        print(f"{run['arm']}/seed{run['seed']}: {json.dumps(run['evals'][-1])} ({run['wall_s']:.0f} s)", flush=True)
        result["summary"] = summarise(result["runs"], args.ks)
        (out / "compare_explorers_words.json").write_text(json.dumps(result, indent=1))
        plot(result["runs"], out / "compare_explorers_words.png", args.ks)

    if args.jobs <= 1:
        for arm, seed in todo:
            finished(run_arm(arm, seed, warm, task, args))
    else:  # seed-major order is kept in the queue; each worker is one process with one torch thread
        with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn"), initializer=_one_thread) as pool:
            futures = [pool.submit(run_arm, arm, seed, warm, task, args) for arm, seed in todo]
            for fut in as_completed(futures):
                finished(fut.result())
    result["runs"].sort(key=lambda r: (r["seed"], list(ARMS).index(r["arm"])))
    result["summary"] = summarise(result["runs"], args.ks)
    result["complete"] = True
    (out / "compare_explorers_words.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
