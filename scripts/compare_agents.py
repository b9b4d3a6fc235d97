"""GRPO vs GiGPO vs GraphGPO vs GraphGPO + SERO on ALFWorld and WebShop, from one warm-up, on CPU.

Environments: the real `envkit/ALFWorld-v0` (TextWorld/PDDL engine, the games in ``$ALFWORLD_DATA``) and
`envkit/WebShop-v0` (embedded catalog), in their numbered-action view (`envkit.envs.numbered`): the observation lists
the admissible commands as ``opt1 <command> , opt2 ...`` and the action is one label, so a small model acts
validly as soon as it emits a listed label. Tasks are split once:

- ALFWorld: the 2 last games of each task type are held out (12 of 54), the rest are train games;
- WebShop: 40 train-split goals (indices 500..539) for training, 20 test-split goals (0..19) held out.

Model: a tiny Llama (word-level tokenizer over the envs' words and the labels) warmed up by behaviour cloning on
the oracle's trajectories of a few train tasks (``--demo-tasks``; `envkit.trainers.local.agent_bc`), so it partly solves the
train tasks it saw and rarely the others. Every arm then starts from that checkpoint with the same seed, tasks
per step and episodes per task (the rollout budget), and only the credit differs:

    GRPO              episode-level group advantage
    GiGPO             episode + step-level (anchor-state) advantages
    GraphGPO          advantages from the group's transition graph (distance to success)
    GraphGPO + SERO   plus oracle continuations from failed states (restored natively, reachability-weighted)

Every ``--eval-every`` steps each run plays ``--eval-train-tasks`` train tasks (half of them from the BC
demonstrations, half not) and every held-out task ``--eval-episodes`` times at temperature 1 (held-out envs are evaluation envs: no oracle). Logged per step: success, zero-advantage
group fraction, invalid-action share, SERO's roots tried / rescues (successful continuations) / rows / mean
reachability weight. Writes ``<out>/compare_agents.json`` and ``<out>/compare_agents.png`` (mean +- std over
seeds).

Usage:
    python scripts/compare_agents.py --out docs/results   # defaults: both envs, 4 arms, 2 seeds, 2 processes
    python scripts/compare_agents.py --out /tmp/a --envs webshop --seeds 0 --steps 2 --eval-every 1 \
        --demo-steps 5 --eval-episodes 1                                    # smoke settings

What it can show at this scale: whether step-level credit or SERO's continuations change success on train
tasks (including the ones the warm-up never solves) and on held-out tasks, relative to the seed spread, for a
~1M-parameter model. It cannot show the papers' numbers (7B models, thousands of steps).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envkit.credit.sero import SeroOptions
from envkit.oracles.numbered import register_numbered
from envkit.registration import make
from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.local.agent_bc import bc_warmup, demo_rows, demo_words, oracle_demos
from envkit.trainers.local.multi_turn import AgentConfig, play
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig
from envkit.trainers.local.word_tasks import save_word_model

if TYPE_CHECKING:  # transformers' types for the annotations only
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ARMS: dict[str, tuple[str, bool]] = {
    "GRPO": ("grpo", False),
    "GiGPO": ("gigpo", False),
    "GraphGPO": ("graphgpo", False),
    "GraphGPO + SERO": ("graphgpo", True),
}
#: env name -> (base id, max turns, context cap, base env keyword arguments)
ENVS: dict[str, tuple[str, int, int, dict[str, Any]]] = {
    "alfworld": ("envkit/ALFWorld-v0", 10, 4000, {}),
    "webshop": ("envkit/WebShop-v0", 8, 4000, {"data_dir": "embedded"}),
}
CURVES = ("success_rate", "zero_adv_fraction", "invalid_share", "sero_tried", "sero_succeeded", "sero_weight_mean")
MAX_LABELS = 100


def splits(name: str) -> tuple[list[int], list[int]]:
    """(train task indices, held-out task indices) of an env (see the module docstring)."""
    if name == "webshop":
        return list(range(500, 540)), list(range(0, 20))
    games = make("envkit/ALFWorld-v0").unwrapped.games  # type: ignore[attr-defined]
    by_type: dict[str, list[int]] = {}
    for i, g in enumerate(games):
        by_type.setdefault(str(g.rel).split("/")[-2].split("-")[0], []).append(i)
    held = sorted(i for idx in by_type.values() for i in idx[-2:])
    return [i for i in range(len(games)) if i not in held], held


def register(name: str) -> dict[str, Any]:
    """Register the train / held-out numbered ids of env `name`; returns their ids and task lists."""
    base, max_turns, ctx, kw = ENVS[name]
    train, held = splits(name)
    stem = base.split("/")[1].removesuffix("-v0")
    return {
        "train_id": register_numbered(f"envkit/{stem}Numbered-train", base, train, **kw),
        "heldout_id": register_numbered(f"envkit/{stem}Numbered-heldout", base, held, evaluation=True, **kw),
        "train": train, "heldout": held, "max_turns": max_turns, "max_context_tokens": ctx,
    }  # fmt: skip


def warm_up(out: Path, name: str, env: dict[str, Any], args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """Word model over the env's vocabulary + behaviour cloning on `args.demo_tasks` train tasks (reused)."""
    folder = out / f"warmup_{name}"
    if (folder / "warmup.json").exists():
        return folder, json.loads((folder / "warmup.json").read_text())
    t0 = time.perf_counter()
    demos = oracle_demos(env["train_id"], range(len(env["train"])), env["max_turns"])
    vocab_demos = demos + _vocab_only_demos(name, env)
    words = sorted(demo_words(vocab_demos) | {f"opt{k}" for k in range(1, MAX_LABELS + 1)})
    save_word_model(folder, words, hidden_size=args.hidden_size, layers=args.layers)
    model, tok = load_model(ModelConfig(path=str(folder), device="cpu"))
    rows = demo_rows(tok, demos[: args.demo_tasks], env["max_context_tokens"])
    losses = bc_warmup(model, tok, rows, steps=args.demo_steps, batch=8, lr=args.demo_lr, seed=0)
    model.save_pretrained(folder)
    stats = {
        "demo_tasks": len(rows), "oracle_solved_train_tasks": len(demos), "train_tasks": len(env["train"]),
        "heldout_tasks": len(env["heldout"]), "vocabulary": len(tok), "bc_steps": args.demo_steps,
        "bc_loss_first": losses[0] if losses else None, "bc_loss_last": losses[-1] if losses else None,
        "seconds": time.perf_counter() - t0,
    }  # fmt: skip
    (folder / "warmup.json").write_text(json.dumps(stats))
    return folder, stats


def _vocab_only_demos(name: str, env: dict[str, Any]) -> list[tuple[str, tuple]]:
    """Oracle episodes of the held-out tasks, played in a TRAINING env over those tasks: used only for the
    tokenizer's word list (never trained on), so held-out observations are not all unknown words."""
    base, _, _, kw = ENVS[name]
    stem = base.split("/")[1].removesuffix("-v0")
    vid = register_numbered(f"envkit/{stem}Numbered-vocab", base, env["heldout"], **kw)
    return oracle_demos(vid, range(len(env["heldout"])), env["max_turns"])


def evaluate(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    env_id: str,
    tasks: list[int],
    acfg: AgentConfig,
    episodes: int,
) -> dict[str, Any]:
    """Success of `episodes` sampled episodes (temperature 1) on each of the env's tasks at positions `tasks`."""
    model.eval()
    eps = play(model, tok, env_id, tasks, episodes, acfg, max_new_tokens=2, temperature=1.0, seed=4242)
    per_task = np.zeros(len(tasks))
    for e in eps:
        per_task[e.group] += float(e.success) / episodes
    acts = [bad for e in eps for bad in e.invalid]
    return {"success": float(per_task.mean()), "per_task": per_task.round(3).tolist(),
            "invalid_share": float(np.mean(acts)) if acts else 0.0,
            "turns": float(np.mean([len(e.actions) for e in eps])) if eps else 0.0}  # fmt: skip


def run_arm(arm: str, seed: int, name: str, env: dict[str, Any], warm: Path, start: dict[str, Any],
            args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """One training run from the warm-up, evaluated every `eval_every` steps."""
    estimator, sero = ARMS[arm]
    # roots keep the trainer's former budget of 2: this script's turn caps (ALFWorld 10, WebShop 8) are below the
    # envs' registered root budgets (20, 8), which the trainer now enforces (issue 22; the miniature uses the env's)
    acfg = AgentConfig(estimator=estimator, sero=sero, max_turns=env["max_turns"],  # type: ignore[arg-type]
                       max_context_tokens=env["max_context_tokens"], sero_opts=SeroOptions(min_budget=2))  # fmt: skip
    cfg = TrainConfig(
        task=env["train_id"], model=ModelConfig(path=str(warm), device="cpu"),
        run_dir=str(Path(args.out) / "runs" / f"{name}_{arm.replace(' + ', '_')}_seed{seed}"), steps=args.steps,
        seed=seed, prompts_per_step=args.tasks_per_step, group_size=args.group_size, max_new_tokens=2, lr=args.lr,
        lr_warmup_steps=args.lr_warmup_steps, agent=acfg, tensorboard=False, plot=False, progress=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer = LocalTrainer(cfg)
    evals = [{"step": 0, **start}]
    records = []
    for step in range(1, args.steps + 1):
        records.append(trainer.logger.log(step, trainer.step(step)))
        if step % args.eval_every == 0 or step == args.steps:
            evals.append({"step": step, **eval_both(trainer.model, trainer.tok, env, acfg, args)})
    trainer.logger.close()
    keep = ("step", *CURVES, "sero_rows", "sero_capped", "sero_restored", "episode_turns", "time_step_s")
    return {
        "env": name, "arm": arm, "seed": seed, "wall_s": time.perf_counter() - t0, "evals": evals,
        "curves": [{k: r[k] for k in keep if k in r} for r in records],
    }  # fmt: skip


def eval_train_tasks(n_train: int, demo_tasks: int, per_side: int) -> list[int]:
    """Positions of the train tasks evaluated: `per_side` that the warm-up saw, `per_side` that it did not."""
    seen = list(range(min(demo_tasks, n_train)))[:per_side]
    unseen = list(range(min(demo_tasks, n_train), n_train))[:per_side]
    return seen + unseen


def eval_both(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    env: dict[str, Any],
    acfg: AgentConfig,
    args: argparse.Namespace,
) -> dict:
    """Success on the evaluated train tasks (`eval_train_tasks`) and on every held-out task."""
    train = eval_train_tasks(len(env["train"]), args.demo_tasks, args.eval_train_tasks // 2)
    tr = evaluate(model, tok, env["train_id"], train, acfg, args.eval_episodes)
    he = evaluate(model, tok, env["heldout_id"], list(range(len(env["heldout"]))), acfg, args.eval_episodes)
    return {"train_success": tr["success"], "train_per_task": tr["per_task"], "heldout_success": he["success"],
            "heldout_per_task": he["per_task"], "train_invalid_share": tr["invalid_share"],
            "heldout_invalid_share": he["invalid_share"], "train_turns": tr["turns"],
            "heldout_turns": he["turns"]}  # fmt: skip


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per env and arm: mean / std over seeds of the final train and held-out success, of the success on the
    train tasks the warm-up never solved (0 successes at step 0), and SERO's totals."""
    out: dict[str, Any] = {}
    for name in ENVS:
        for arm in ARMS:
            rows = [r for r in runs if r["env"] == name and r["arm"] == arm]
            if not rows:
                continue
            s: dict[str, Any] = {"seeds": len(rows)}
            unsolved = [
                float(np.mean([f for f, z in zip(r["evals"][-1]["train_per_task"], r["evals"][0]["train_per_task"],
                                                 strict=True) if z == 0] or [0.0]))
                for r in rows
            ]  # fmt: skip
            vals = {
                "train_success": [r["evals"][-1]["train_success"] for r in rows],
                "heldout_success": [r["evals"][-1]["heldout_success"] for r in rows],
                "train_unsolved_at_start_success": unsolved,
                "zero_adv_fraction_mean": [float(np.mean([c["zero_adv_fraction"] for c in r["curves"]])) for r in rows],
                "train_rollout_success_last_quarter": [
                    float(np.mean([c["success_rate"] for c in r["curves"][-max(1, len(r["curves"]) // 4) :]]))
                    for r in rows
                ],
            }
            for k, v in vals.items():
                s[k] = {"mean": float(np.mean(v)), "std": float(np.std(v)), "per_seed": v}
            s["train_success_start"] = rows[0]["evals"][0]["train_success"]
            s["heldout_success_start"] = rows[0]["evals"][0]["heldout_success"]
            s["train_tasks_unsolved_at_start"] = int(sum(z == 0 for z in rows[0]["evals"][0]["train_per_task"]))
            if ARMS[arm][1]:
                for k in ("sero_tried", "sero_succeeded", "sero_rows"):
                    s[f"{k}_total_mean"] = float(np.mean([sum(c.get(k, 0) for c in r["curves"]) for r in rows]))
                w = [c["sero_weight_mean"] for r in rows for c in r["curves"] if c.get("sero_rows", 0) > 0]
                s["sero_weight_mean"] = float(np.mean(w)) if w else 0.0
            s["wall_s_mean"] = float(np.mean([r["wall_s"] for r in rows]))
            out[f"{name}/{arm}"] = s
    return out


def plot(runs: list[dict[str, Any]], png: Path, window: int = 3) -> None:
    """One row per env: train / held-out success at the evaluations, rollout success, zero-advantage fraction,
    SERO rescues per step; lines are seed means, bands +-1 std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ENVS if any(r["env"] == n for r in runs)]
    panels = ("train_success", "heldout_success", "success_rate", "zero_adv_fraction", "sero_succeeded")
    fig, axes = plt.subplots(len(names), len(panels), figsize=(4.0 * len(panels), 3.6 * len(names)), squeeze=False)
    colours = dict(zip(ARMS, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True))
    for row, name in zip(axes, names, strict=True):
        for ax, key in zip(row, panels, strict=True):
            for arm in ARMS:
                rs = [r for r in runs if r["env"] == name and r["arm"] == arm]
                if not rs or (key == "sero_succeeded" and not ARMS[arm][1]):
                    continue
                if key in ("train_success", "heldout_success"):
                    n = min(len(r["evals"]) for r in rs)
                    xs = np.array([e["step"] for e in rs[0]["evals"][:n]])
                    ys = np.array([[e[key] for e in r["evals"][:n]] for r in rs])
                else:
                    n = min(len(r["curves"]) for r in rs)
                    w = max(1, min(window, n))
                    ys = np.array([np.convolve([c.get(key, 0.0) for c in r["curves"][:n]], np.ones(w) / w, "valid")
                                   for r in rs])  # fmt: skip
                    xs = np.arange(w, n + 1)
                m, sd = ys.mean(axis=0), ys.std(axis=0)
                ax.plot(xs, m, color=colours[arm], linewidth=1.8, marker="o" if len(xs) < 4 else None,
                        label=f"{arm} ({len(rs)} seeds)")  # fmt: skip
                ax.fill_between(xs, m - sd, m + sd, color=colours[arm], alpha=0.15)
            ax.set_title(f"{name}: {key}")
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7)
    fig.suptitle("Same BC warm-up, seeds and episodes per step: GRPO vs GiGPO vs GraphGPO vs GraphGPO + SERO")
    fig.tight_layout()
    fig.savefig(png, dpi=85)
    plt.close(fig)


def merge(folders: list[Path], out: Path) -> None:
    """Combine the results of several runs of this script (say one per env or seed, run in parallel) into one
    JSON and PNG; folders without results are skipped, a run (env, arm, seed) found twice is kept once."""
    parts = {
        f: json.loads((f / "compare_agents.json").read_text()) for f in folders if (f / "compare_agents.json").exists()
    }
    runs, seen = [], set()
    for p in parts.values():
        for r in p["runs"]:
            if (r["env"], r["arm"], r["seed"]) not in seen:
                seen.add((r["env"], r["arm"], r["seed"]))
                runs.append(r)
    result: dict[str, Any] = {
        "config": {str(f): p["config"] for f, p in parts.items()},
        "warmup": {k: v for p in parts.values() for k, v in p["warmup"].items()},
        "runs": runs,
        "complete": False,  # a merge does not know which runs were planned
        "summary": summarise(runs),
    }
    (out / "compare_agents.json").write_text(json.dumps(result, indent=1))
    plot(result["runs"], out / "compare_agents.png")


def _one_thread() -> None:
    torch.set_num_threads(1)


def _run_job(arm: str, seed: int, name: str, warm: Path, start: dict[str, Any], args: argparse.Namespace) -> dict:
    """`run_arm` in a worker process (the numbered env ids are registered per process)."""
    return run_arm(arm, seed, name, register(name), warm, start, args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/compare_agents")
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tasks-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4, help="episodes per task (GRPO group)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-warmup-steps", type=int, default=3)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-episodes", type=int, default=1)
    ap.add_argument("--eval-train-tasks", type=int, default=16, help="train tasks evaluated (half seen in BC)")
    ap.add_argument("--demo-tasks", type=int, default=12, help="train tasks whose oracle episodes the BC warm-up sees")
    ap.add_argument("--demo-steps", type=int, default=150)
    ap.add_argument("--demo-lr", type=float, default=3e-3)
    ap.add_argument("--hidden-size", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2, help="runs trained in parallel (one process and thread each)")
    ap.add_argument("--fresh", action="store_true", help="ignore finished runs in --out (default: resume them)")
    ap.add_argument("--merge", nargs="+", metavar="DIR", help="only combine the compare_agents.json of these "
                    "folders (e.g. one run per env, run in parallel) into --out, and plot them")  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        merge([Path(d) for d in args.merge], out)
        return
    result: dict[str, Any] = {"config": vars(args), "warmup": {}, "runs": [], "complete": False}
    envs, warms, starts = {}, {}, {}
    for name in args.envs:
        envs[name] = env = register(name)
        warms[name], stats = warm_up(out, name, env, args)
        model, tok = load_model(ModelConfig(path=str(warms[name]), device="cpu"))
        acfg = AgentConfig(max_turns=env["max_turns"], max_context_tokens=env["max_context_tokens"])
        starts[name] = start = eval_both(model, tok, env, acfg, args)
        del model
        result["warmup"][name] = {**stats, "train_success": start["train_success"],
                                  "heldout_success": start["heldout_success"]}  # fmt: skip
        print(f"{name} warm-up: {json.dumps(result['warmup'][name])}", flush=True)
    old = out / "compare_agents.json"
    if old.exists() and not args.fresh:  # resume: keep the finished runs of an interrupted invocation
        prev = json.loads(old.read_text())
        if prev.get("warmup") == result["warmup"]:
            result["runs"] = prev["runs"]
    done = {(r["env"], r["arm"], r["seed"]) for r in result["runs"]}
    # seed-major: an interrupted run still has every env and arm for its first seeds
    todo = [(arm, seed, name) for seed in args.seeds for name in args.envs for arm in args.arms
            if (name, arm, seed) not in done]  # fmt: skip

    def finished(run: dict[str, Any]) -> None:
        result["runs"].append(run)
        last = run["evals"][-1]
        print(f"{run['env']}/{run['arm']}/seed{run['seed']}: train {last['train_success']:.3f} heldout "
              f"{last['heldout_success']:.3f} ({run['wall_s']:.0f} s)", flush=True)  # fmt: skip
        result["summary"] = summarise(result["runs"])
        (out / "compare_agents.json").write_text(json.dumps(result, indent=1))
        plot(result["runs"], out / "compare_agents.png")

    if args.jobs <= 1:
        for arm, seed, name in todo:
            finished(run_arm(arm, seed, name, envs[name], warms[name], starts[name], args))
    else:  # each worker is one process with one torch thread; it registers the envs' numbered ids itself
        with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn"), initializer=_one_thread) as pool:
            futures = [pool.submit(_run_job, arm, seed, name, warms[name], starts[name], args)
                       for arm, seed, name in todo]  # fmt: skip
            for fut in as_completed(futures):
                finished(fut.result())
    order = {(n, a): i for i, (n, a) in enumerate((n, a) for n in ENVS for a in ARMS)}
    result["runs"].sort(key=lambda r: (r["seed"], order[(r["env"], r["arm"])]))
    result["summary"] = summarise(result["runs"])
    result["complete"] = True
    (out / "compare_agents.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
