"""Does SERO help the policy it trains? GraphGPO vs GraphGPO + SERO vs compute-matched GraphGPO vs compute-matched
branching (policy-only, BPO-style) on MiniShop (CPU).

Environment: ``envkit/MiniShop-v0`` (`envkit.envs.minishop`): WebShop's shape in miniature (a results page of 4
items, an item page with a committing ``buy`` and a way back, numbered actions, an exact oracle), whose deciding
fact is ONE word: the instruction names an attribute word, exactly one listed item shows it. Train tasks
(160) and held-out tasks (48, ``envkit/MiniShopHeldout-v0``) use disjoint attribute words, so held-out success
measures whether the policy learned to match the instruction's word, not which words were right. Every wrong pick
before ``buy`` is recoverable within the 8-step horizon, so SERO's roots are rescuable.

Model: the word model of `scripts/compare_agents.py` (a tiny Llama on a word-level tokenizer over MiniShop's words,
trained from scratch) warmed up by behaviour cloning on the oracle's episodes of ``--demo-tasks`` train tasks
(`envkit.trainers.local.agent_bc`). Every arm starts from that one checkpoint with the same seeds, the same tasks
per step (the trainer draws them from (seed, step)) and the same loss settings; arms are a dict (`ARMS`), so
another arm is one more entry:

    GraphGPO                 plain GraphGPO groups of --group-size episodes per task
    GraphGPO + SERO          plus oracle continuations from failed states (`envkit.trainers.local.sero`)
    GraphGPO + matched steps plain GraphGPO with extra episodes per group, chosen each step so that its
                             cumulative env steps follow the SERO run's of the same seed (policy + oracle steps,
                             measured by counting every MiniShop env step in the process); the JSON records both
    GraphGPO + branching     the policy-only control (issue 26, ``--explorer branch``,
                             `envkit.trainers.local.explorers.branch`): backbone episodes, forks at the policy's
                             highest-entropy decisions restored from native snapshots, leave-one-out sibling
                             credit added to GraphGPO's; its per-task env-step budget is set each step
                             (`AgentBranchDriver.set_budget`) so that its cumulative env steps follow the SERO run's
                             of the same seed, like the matched arm's; ``reserve="backbone"`` (MiniShop's episodes
                             end long before the horizon, so worst-case reservations would admit no branch under
                             SERO's measured budget). Its train ``success_rate`` counts branches too: compare it
                             on the evaluations only.

Every ``--eval-every`` steps: success (temperature 1, ``--eval-episodes`` per task) on ``--eval-train-tasks`` train
tasks and on all held-out tasks, and the correct-action probe: the policy's teacher-forced probability of the
oracle's action at the two deciding states of each task (the right item on the results page, ``buy`` on the
right item's page), on train and held-out tasks. Per step: rollout success, env steps, group size, SERO's
roots / rescues / rows and every diagnostic the trainer logs (``sero_*`` and the credit's diagnostics where the
trainer has them).

READING RULE (written before the first run; `verdict` applies it to the JSON):
    SUPPORT for "SERO helps" needs all of:
      (a) a held-out gain of GraphGPO + SERO over BOTH controls (GraphGPO, GraphGPO + matched steps): final
          held-out success higher in every paired seed, OR a paired bootstrap over (seed, held-out task) pairs of
          the final held-out success difference whose 95% interval excludes 0 (above it), for each control;
      (b) rescues > 0 at every training step of every SERO run (the oracle really added successes);
      (c) the correct-action probe on held-out tasks not falling in the SERO runs: mean over seeds of the final
          probe >= the starting probe.
    Anything else is a REFUTATION at this scale (reported as such, with the failing clauses).
    The controls of (a) are exactly GraphGPO and GraphGPO + matched steps (the branching arm is read separately).

BRANCHING READING RULE (issue 26; written before the branching arm's first run; `branching_reading` applies it):
    does policy-only branching from the policy's own states do as well as SERO, held-out, at the same budget?
      budget: the branching run's total env steps within 10% of the SERO run's of the same seed, in every seed
          (else the reading is "unmatched" and says nothing about the methods);
      d_s = final held-out success (branching - SERO) of seed s; bootstrap as in (a) over (seed, held-out task);
      WORSE  if d_s < 0 in every paired seed, or the bootstrap 95% interval lies below 0;
      BETTER if d_s > 0 in every paired seed, or the interval lies above 0;
      AS WELL (no difference detected at this scale) otherwise. "Does as well as SERO" = not WORSE.

Writes ``<out>/compare_sero_mini.json`` (config, warm-up, per arm and seed the evals and per-step curves, the
summary, the verdict, wall and CPU seconds) and ``<out>/compare_sero_mini.png``.

Usage:
    python scripts/compare_sero_mini.py --out docs/results            # defaults: 3 arms x 3 seeds, 2 processes
    python scripts/compare_sero_mini.py --out /tmp/m --seeds 0 --steps 2 --eval-every 1 --demo-steps 5   # smoke

What it can show: for a ~1M-parameter model on a one-word task, whether SERO's continuations move held-out
success beyond what the same number of env steps gives plain GraphGPO. What it cannot show: anything about 7B
models or real WebShop's search.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import resource
import time
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import tyro

from envkit.core import Step
from envkit.envs.minishop.env import MiniShopEnv
from envkit.envs.minishop.tasks import SPLIT_SIZES, vocabulary
from envkit.oracles.base import make_oracle, run_oracle
from envkit.registration import env_facts, make
from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.local.agent_bc import bc_warmup, demo_rows, demo_words
from envkit.trainers.local.explorers.branch import AgentBranchDriver
from envkit.trainers.local.generation import batch_sequences, score
from envkit.trainers.local.multi_turn import AgentConfig, play
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig
from envkit.trainers.local.word_tasks import save_word_model

if TYPE_CHECKING:  # transformers' types for the annotations only
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

TRAIN_ID, HELDOUT_ID = "envkit/MiniShop-v0", "envkit/MiniShopHeldout-v0"
JSON_NAME, PNG_NAME = "compare_sero_mini.json", "compare_sero_mini.png"
#: per-step metrics summarised per arm (SERO's counters, the credit's diagnostics, whatever names the trainer logs)
DIAGNOSTIC_PREFIXES = ("sero_", "credit_", "adv_", "probe", "branch_")


@dataclass(frozen=True)
class Arm:
    """One arm: its advantage estimator, SERO on/off, and the arm whose env steps it matches (None: its own)."""

    estimator: str = "graphgpo"
    sero: bool = False
    match_steps_of: str | None = None
    explorer: str = "none"
    """The trainer's ``explorer``: ``none`` or ``branch`` (then ``sero`` must be False)."""
    reserve: str = "worst"
    """`BranchConfig.reserve` of a branching arm."""


ARMS: dict[str, Arm] = {
    "GraphGPO": Arm(),
    "GraphGPO + SERO": Arm(sero=True),
    "GraphGPO + matched steps": Arm(match_steps_of="GraphGPO + SERO"),
    "GraphGPO + branching": Arm(explorer="branch", match_steps_of="GraphGPO + SERO", reserve="backbone"),
}
SERO = "GraphGPO + SERO"
#: the controls of the reading rule's clause (a)
SERO_CONTROLS = ("GraphGPO", "GraphGPO + matched steps")
BRANCHING = "GraphGPO + branching"
#: the branching reading rule's budget tolerance (relative to SERO's env steps, per seed)
BUDGET_TOLERANCE = 0.10


@dataclass(frozen=True)
class Config:
    """Settings of the comparison (defaults: the documented run)."""

    out: str = "runs/compare_sero_mini"
    arms: tuple[str, ...] = tuple(ARMS)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 40
    tasks_per_step: int = 8
    group_size: int = 4
    """Episodes per task (GraphGPO group); the matched arm adds episodes on top."""
    max_group_size: int = 16
    """Cap of the matched arm's episodes per task."""
    lr: float = 1e-3
    lr_warmup_steps: int = 3
    eval_every: int = 10
    eval_episodes: int = 2
    eval_train_tasks: int = 24
    demo_tasks: int = 136
    """Train tasks whose oracle episodes the BC warm-up sees (the first ones; 136..159 stay unseen)."""
    demo_steps: int = 3000
    """BC steps: 3000 on 136 tasks (hidden 128) is the measured start whose held-out click probe is above chance
    (0.36 vs 1/4); 150 on 24 tasks (hidden 64) memorises the cloned tasks and stays at chance (0.30)."""
    demo_lr: float = 3e-3
    hidden_size: int = 128
    layers: int = 2
    jobs: int = 2
    """Runs trained in parallel (one process and one torch thread each)."""
    trainer_probe_tasks: int = 8
    """The trainer's own probe (``probe_p_correct`` on the oracle path of train tasks 0..N-1, every --eval-every
    steps; 0: off), logged next to this script's train / held-out probe."""
    fresh: bool = False
    """Ignore a warm-up and finished runs already in --out."""
    bootstrap: int = 2000


@dataclass
class Demos:
    """Oracle episodes (first observation, steps) of a split's tasks, for BC, the vocabulary and the probe."""

    train: list[tuple[str, tuple[Step, ...]]] = field(default_factory=list)
    heldout: list[tuple[str, tuple[Step, ...]]] = field(default_factory=list)


def oracle_episodes(split: str, tasks: range | list[int]) -> list[tuple[str, tuple[Step, ...]]]:
    """The oracle's successful episodes from reset on `tasks` of `split` (held-out: in a NON-evaluation instance,
    used only for the probe, never trained on)."""
    env_id = TRAIN_ID if split == "train" else HELDOUT_ID
    env = make(env_id, evaluation=False).unwrapped
    oracle = make_oracle(env_id)
    out = []
    for k in tasks:
        obs, info = env.reset(options={"task": k})
        run = run_oracle(env, oracle, obs, info, max_steps=env_facts(env_id).horizon)
        if not run.success:
            raise RuntimeError(f"MiniShop's exact oracle failed on {split} task {k}: {run.reason}")
        out.append((str(obs), run.steps))
    return out


def agent_config(arm: Arm, cfg: Config) -> AgentConfig:
    return AgentConfig(estimator=arm.estimator, sero=arm.sero, max_turns=env_facts(TRAIN_ID).horizon,  # type: ignore[arg-type]
                       max_context_tokens=1024)  # fmt: skip


def warm_up(cfg: Config, demos: Demos) -> tuple[Path, dict[str, Any]]:
    """Word model over MiniShop's words + BC on the oracle episodes of the first `demo_tasks` train tasks."""
    folder = Path(cfg.out) / "warmup_minishop"
    if (folder / "warmup.json").exists() and not cfg.fresh:
        return folder, json.loads((folder / "warmup.json").read_text())
    t0, c0 = time.perf_counter(), time.process_time()
    words = sorted(vocabulary() | demo_words(demos.train) | demo_words(demos.heldout))
    save_word_model(folder, words, hidden_size=cfg.hidden_size, layers=cfg.layers)
    model, tok = load_model(ModelConfig(path=str(folder), device="cpu"))
    rows = demo_rows(tok, demos.train[: cfg.demo_tasks], 1024)
    losses = bc_warmup(model, tok, rows, steps=cfg.demo_steps, batch=8, lr=cfg.demo_lr, seed=0)
    model.save_pretrained(folder)
    stats = {"demo_tasks": len(rows), "bc_steps": cfg.demo_steps, "vocabulary": len(tok),
             "bc_loss_first": losses[0] if losses else None, "bc_loss_last": losses[-1] if losses else None,
             "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}  # fmt: skip
    (folder / "warmup.json").write_text(json.dumps(stats))
    return folder, stats


def success(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    env_id: str,
    tasks: list[int],
    episodes: int,
    acfg: AgentConfig,
) -> list[float]:
    """Per task, the success share of `episodes` sampled episodes (temperature 1)."""
    model.eval()
    n = SPLIT_SIZES["train" if env_id == TRAIN_ID else "heldout"]
    assert all(0 <= k < n for k in tasks)
    eps = play(model, tok, env_id, tasks, episodes, acfg, max_new_tokens=2, temperature=1.0, seed=4242)
    per_task = np.zeros(len(tasks))
    for e in eps:
        per_task[e.group] += float(e.success) / episodes
    return per_task.round(3).tolist()


def probe(
    model: PreTrainedModel, tok: PreTrainedTokenizerBase, demos: list[tuple[str, tuple[Step, ...]]]
) -> dict[str, float]:
    """Teacher-forced probability of the oracle's label at each task's two deciding states, along the oracle's own
    path: ``click`` (the right item on the results page: action 1), ``buy`` (``buy`` on its page: action 2),
    and their ``mean`` (the reading rule's probe)."""
    rows = demo_rows(tok, demos, 1024)
    ids, attn, target = batch_sequences([p for p, _, _ in rows], [r for _, r, _ in rows], tok.pad_token_id, "cpu",
                                        [f for _, _, f in rows])  # fmt: skip
    model.eval()
    with torch.no_grad():
        logp = score(model, ids, attn, target, with_entropy=False).logp
    click, buy = [], []
    for i, (p, _, flags) in enumerate(rows):
        starts = [j for j, f in enumerate(flags) if f == 1 and (j == 0 or flags[j - 1] == 0)]
        click.append(float(torch.exp(logp[i, len(p) + starts[0] - 1])))  # the label token of the click
        buy.append(float(torch.exp(logp[i, len(p) + starts[1] - 1])))  # ... and of the buy
    return {"click": float(np.mean(click)), "buy": float(np.mean(buy)), "mean": float(np.mean(click + buy))}


def evaluate(model: PreTrainedModel, tok: PreTrainedTokenizerBase, demos: Demos, cfg: Config) -> dict[str, Any]:
    acfg = agent_config(ARMS["GraphGPO"], cfg)
    train = success(model, tok, TRAIN_ID, train_eval_tasks(cfg), cfg.eval_episodes, acfg)
    held = success(model, tok, HELDOUT_ID, list(range(SPLIT_SIZES["heldout"])), cfg.eval_episodes, acfg)
    ptrain, pheld = probe(model, tok, demos.train), probe(model, tok, demos.heldout)
    return {"train_success": float(np.mean(train)), "heldout_success": float(np.mean(held)),
            "train_per_task": train, "heldout_per_task": held, "probe_train": ptrain["mean"],
            "probe_heldout": pheld["mean"], "probe_heldout_click": pheld["click"], "probe_heldout_buy": pheld["buy"],
            "probe_train_click": ptrain["click"], "probe_train_buy": ptrain["buy"]}  # fmt: skip


def train_eval_tasks(cfg: Config) -> list[int]:
    """Half of the evaluated train tasks were BC demonstrations, half were not."""
    half = cfg.eval_train_tasks // 2
    return list(range(half)) + list(range(cfg.demo_tasks, cfg.demo_tasks + cfg.eval_train_tasks - half))


def matched_group_size(target_cum: float, done_cum: float, turns: float, cfg: Config) -> int:
    """Episodes per task this step so the cumulative env steps reach `target_cum` (`turns`: recent episode length)."""
    need = (target_cum - done_cum) / max(1.0, cfg.tasks_per_step * turns)
    return int(min(cfg.max_group_size, max(cfg.group_size, round(need))))


def run_arm(name: str, seed: int, warm: str, start: dict[str, Any], cfg: Config,
            target: list[dict[str, Any]] | None) -> dict[str, Any]:  # fmt: skip
    """One training run from the warm-up; `target`: the curves of the run whose env steps this arm matches."""
    torch.set_num_threads(1)
    arm = ARMS[name]
    demos = Demos(
        oracle_episodes("train", train_eval_tasks(cfg)), oracle_episodes("heldout", range(SPLIT_SIZES["heldout"]))
    )
    tcfg = TrainConfig(
        task=TRAIN_ID, model=ModelConfig(path=warm, device="cpu"), steps=cfg.steps, seed=seed,
        run_dir=str(Path(cfg.out) / "runs" / f"{name.replace(' + ', '_').replace(' ', '_')}_seed{seed}"),
        prompts_per_step=cfg.tasks_per_step, group_size=cfg.group_size, max_new_tokens=2, lr=cfg.lr,
        lr_warmup_steps=cfg.lr_warmup_steps, agent=agent_config(arm, cfg), tensorboard=False, plot=False,
        progress=False, probe_tasks=cfg.trainer_probe_tasks, probe_every=cfg.eval_every,
        explorer=arm.explorer, branch=BranchConfig(reserve=arm.reserve),  # type: ignore[arg-type]
    )  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    trainer = LocalTrainer(tcfg)
    evals: list[dict[str, Any]] = [{"step": 0, **start}]
    curves: list[dict[str, Any]] = []
    cum = 0
    for step in range(1, cfg.steps + 1):
        if target is not None:
            turns = curves[-1]["episode_turns"] if curves else target[step - 1]["episode_turns"]
            goal = sum(c["env_steps"] for c in target[:step])
            if arm.explorer == "branch":  # the per-task budget of this step: what is left to the SERO run's total
                cast(AgentBranchDriver, trainer.explorer).set_budget(max(1, round((goal - cum) / cfg.tasks_per_step)))
            else:
                trainer.cfg = replace(tcfg, group_size=matched_group_size(goal, cum, turns, cfg))
        before = MiniShopEnv.steps_in_process
        rec = trainer.logger.log(step, trainer.step(step))
        env_steps = MiniShopEnv.steps_in_process - before
        cum += env_steps
        scalars = {k: float(v) for k, v in rec.items() if isinstance(v, int | float)}
        curves.append({**scalars, "env_steps": env_steps, "group_size": trainer.cfg.group_size})
        if arm.explorer == "branch":  # the per-task budget this step ran under
            curves[-1]["branch_budget_per_task"] = cast(AgentBranchDriver, trainer.explorer).budget
        if step % cfg.eval_every == 0 or step == cfg.steps:
            evals.append({"step": step, **evaluate(trainer.model, trainer.tok, demos, cfg)})
    trainer.logger.close()
    return {"arm": name, "seed": seed, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "env_steps": cum, "evals": evals, "curves": curves}  # fmt: skip


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n: int, seed: int = 0) -> tuple[float, float, float]:
    """Mean of a - b over paired units and its 95% percentile interval from `n` resamples of the pairs."""
    d = np.asarray(a, float) - np.asarray(b, float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return float(d.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def verdict(runs: list[dict[str, Any]], cfg: Config) -> dict[str, Any]:
    """The docstring's reading rule applied to the finished runs."""
    sero = SERO
    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs if r["arm"] == sero})
    out: dict[str, Any] = {"controls": {}}
    gain_ok = True
    for control in (a for a in SERO_CONTROLS if a in cfg.arms):
        paired = [s for s in seeds if (control, s) in by]
        if not paired:
            gain_ok = False
            continue
        fin = {s: (by[(sero, s)]["evals"][-1], by[(control, s)]["evals"][-1]) for s in paired}
        per_seed = [x["heldout_success"] - y["heldout_success"] for x, y in fin.values()]
        a = np.concatenate([x["heldout_per_task"] for x, _ in fin.values()])
        b = np.concatenate([y["heldout_per_task"] for _, y in fin.values()])
        mean, lo, hi = paired_bootstrap(a, b, cfg.bootstrap)
        ok = all(d > 0 for d in per_seed) or lo > 0
        gain_ok &= ok
        out["controls"][control] = {"heldout_gain_per_seed": per_seed, "bootstrap_mean": mean,
                                    "bootstrap_ci95": [lo, hi], "clause_a": ok}  # fmt: skip
    rescues = [c.get("sero_succeeded", 0.0) for s in seeds for c in by[(sero, s)]["curves"]]
    start = [by[(sero, s)]["evals"][0]["probe_heldout"] for s in seeds]
    final = [by[(sero, s)]["evals"][-1]["probe_heldout"] for s in seeds]
    out["clause_a"] = bool(gain_ok and seeds)
    out["clause_b"] = bool(rescues) and min(rescues) > 0
    out["rescues_min_per_step"] = min(rescues) if rescues else 0.0
    out["clause_c"] = bool(seeds) and float(np.mean(final)) >= float(np.mean(start))
    out["probe_heldout_start_final"] = [
        float(np.mean(start)) if start else None,
        float(np.mean(final)) if final else None,
    ]
    out["verdict"] = "support" if out["clause_a"] and out["clause_b"] and out["clause_c"] else "refutation"
    if BRANCHING in cfg.arms:
        out["branching_vs_sero"] = branching_reading(runs, cfg)
    return out


def branching_reading(runs: list[dict[str, Any]], cfg: Config) -> dict[str, Any]:
    """The docstring's branching reading rule: branching vs SERO, final held-out success, paired per seed."""
    by = {(r["arm"], r["seed"]): r for r in runs}
    seeds = sorted(s for s in {r["seed"] for r in runs} if (SERO, s) in by and (BRANCHING, s) in by)
    if not seeds:
        return {"reading": "missing", "seeds": []}
    steps = {s: (by[(BRANCHING, s)]["env_steps"], by[(SERO, s)]["env_steps"]) for s in seeds}
    budget_ok = all(abs(b - r) <= BUDGET_TOLERANCE * r for b, r in steps.values())
    fin = {s: (by[(BRANCHING, s)]["evals"][-1], by[(SERO, s)]["evals"][-1]) for s in seeds}
    per_seed = [x["heldout_success"] - y["heldout_success"] for x, y in fin.values()]
    a = np.concatenate([x["heldout_per_task"] for x, _ in fin.values()])
    b = np.concatenate([y["heldout_per_task"] for _, y in fin.values()])
    mean, lo, hi = paired_bootstrap(a, b, cfg.bootstrap)
    worse = all(d < 0 for d in per_seed) or hi < 0
    better = all(d > 0 for d in per_seed) or lo > 0
    reading = "unmatched" if not budget_ok else "worse" if worse else "better" if better else "as well"
    return {"seeds": seeds, "heldout_branching_minus_sero_per_seed": per_seed, "bootstrap_mean": mean,
            "bootstrap_ci95": [lo, hi], "env_steps_branching_sero_per_seed": [list(steps[s]) for s in seeds],
            "budget_matched": budget_ok, "reading": reading,
            "does_as_well_as_sero": budget_ok and not worse}  # fmt: skip


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: mean / std over seeds of the final train and held-out success and probes, env steps, SERO totals."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        rows = [r for r in runs if r["arm"] == arm]
        if not rows:
            continue
        s: dict[str, Any] = {"seeds": len(rows)}
        vals = {k: [r["evals"][-1][k] for r in rows]
                for k in ("train_success", "heldout_success", "probe_train", "probe_heldout")}  # fmt: skip
        vals["env_steps"] = [r["env_steps"] for r in rows]
        vals["rollout_success_mean"] = [float(np.mean([c["success_rate"] for c in r["curves"]])) for r in rows]
        for k in ("sero_tried", "sero_succeeded", "sero_rows"):
            if any(k in c for r in rows for c in r["curves"]):
                vals[f"{k}_total"] = [sum(c.get(k, 0.0) for c in r["curves"]) for r in rows]
        for k, v in vals.items():
            s[k] = {"mean": float(np.mean(v)), "std": float(np.std(v)), "per_seed": v}
        diag = sorted({k for r in rows for c in r["curves"] for k in c if k.startswith(DIAGNOSTIC_PREFIXES)})
        if diag:  # SERO's counters and the credit's diagnostics, as the trainer logs them: mean per step
            s["per_step_means"] = {k: float(np.mean([c[k] for r in rows for c in r["curves"] if k in c])) for k in diag}
        s["wall_s_mean"] = float(np.mean([r["wall_s"] for r in rows]))
        s["cpu_s_mean"] = float(np.mean([r["cpu_s"] for r in rows]))
        out[arm] = s
    return out


def plot(runs: list[dict[str, Any]], png: Path) -> None:
    """Train / held-out success, the held-out probe's two states, rescues per step (SERO arms), zero-advantage
    group fraction and cumulative env steps: seed means +- std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = ("train_success", "heldout_success", "probe_heldout_click", "probe_heldout_buy")
    panels = (*evals, "sero_succeeded", "zero_adv_fraction", "env_steps")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, key in zip(axes, panels, strict=True):
        for i, arm in enumerate(ARMS):
            rs = [r for r in runs if r["arm"] == arm]
            if not rs or (key == "sero_succeeded" and not ARMS[arm].sero):
                continue
            if key in evals:
                n = min(len(r["evals"]) for r in rs)
                xs = np.array([e["step"] for e in rs[0]["evals"][:n]])
                ys = np.array([[e[key] for e in r["evals"][:n]] for r in rs])
            else:
                n = min(len(r["curves"]) for r in rs)
                xs = np.arange(1, n + 1)
                ys = np.array([[c.get(key, 0.0) for c in r["curves"][:n]] for r in rs])
                ys = np.cumsum(ys, axis=1) if key == "env_steps" else ys
            m, sd = ys.mean(axis=0), ys.std(axis=0)
            ax.plot(xs, m, color=colours[i % len(colours)], label=f"{arm} ({len(rs)} seeds)")
            ax.fill_between(xs, m - sd, m + sd, color=colours[i % len(colours)], alpha=0.15)
        ax.set_title("cumulative env_steps" if key == "env_steps" else key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("MiniShop, one BC warm-up, same seeds and tasks: does SERO help?")
    fig.tight_layout()
    fig.savefig(png, dpi=85)
    plt.close(fig)


def schedule(submit: Any, todo: list[tuple[str, int]], done: dict[tuple[str, int], Any],
             finished: Any) -> None:  # fmt: skip
    """Run `todo` (arm, seed) pairs through ``submit(arm, seed)`` (it returns a Future): a run whose arm matches
    another's env steps starts once that arm's run of its seed is in `done` (finished now or loaded from an
    earlier invocation's JSON); the matched arms' targets start first; `finished` is called with each result."""
    waiting = [r for r in todo if ARMS[r[0]].match_steps_of is not None]
    targets = {ARMS[a].match_steps_of for a, _ in waiting}
    ready = sorted((r for r in todo if r not in waiting), key=lambda r: r[0] not in targets)
    live: dict[Future, tuple[str, int]] = {submit(a, s): (a, s) for a, s in ready}

    def unblock() -> None:
        for a, s in [w for w in waiting if (ARMS[w[0]].match_steps_of, w[1]) in done]:
            waiting.remove((a, s))
            live[submit(a, s)] = (a, s)

    unblock()  # targets already finished by an earlier invocation
    while live:
        fin, _ = wait(live, return_when="FIRST_COMPLETED")
        for fut in fin:
            live.pop(fut)
            finished(fut.result())
        unblock()
    if waiting:
        raise RuntimeError(f"runs {waiting} never started: their target arms' runs did not finish")


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main(cfg: Config) -> dict[str, Any]:
    unknown = [a for a in cfg.arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; choose from {list(ARMS)}")
    for a in cfg.arms:
        m = ARMS[a].match_steps_of
        if m is not None and m not in cfg.arms:
            raise SystemExit(f"arm {a!r} matches the env steps of {m!r}: add {m!r} to --arms")
    unseen = SPLIT_SIZES["train"] - cfg.demo_tasks
    if cfg.eval_train_tasks - cfg.eval_train_tasks // 2 > unseen or cfg.eval_train_tasks // 2 > cfg.demo_tasks:
        raise SystemExit(
            f"--eval-train-tasks {cfg.eval_train_tasks} needs half cloned and half unseen train tasks, but "
            f"--demo-tasks {cfg.demo_tasks} leaves {unseen} of {SPLIT_SIZES['train']} unseen: lower one of them"
        )
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    demos = Demos(
        oracle_episodes("train", range(SPLIT_SIZES["train"])), oracle_episodes("heldout", range(SPLIT_SIZES["heldout"]))
    )
    warm, stats = warm_up(cfg, demos)
    model, tok = load_model(ModelConfig(path=str(warm), device="cpu"))
    start = evaluate(model, tok, Demos([demos.train[k] for k in train_eval_tasks(cfg)], demos.heldout), cfg)
    del model
    warmup = {**stats, **{k: v for k, v in start.items() if not k.endswith("per_task")}}
    print(f"warm-up: {json.dumps(warmup)}", flush=True)
    result: dict[str, Any] = {"config": asdict(cfg), "warmup": warmup, "runs": [], "complete": False}
    old = out / JSON_NAME
    if old.exists() and not cfg.fresh:  # resume the finished runs of an interrupted invocation
        prev = json.loads(old.read_text())
        if prev.get("warmup", {}).get("bc_loss_last") == warmup.get("bc_loss_last"):
            result["runs"] = [r for r in prev["runs"] if r["arm"] in cfg.arms and r["seed"] in cfg.seeds]
    done = {(r["arm"], r["seed"]): r for r in result["runs"]}
    args = (str(warm), start, cfg)

    def finished(run: dict[str, Any]) -> None:
        done[(run["arm"], run["seed"])] = run
        result["runs"] = sorted(done.values(), key=lambda r: (r["seed"], list(ARMS).index(r["arm"])))
        last = run["evals"][-1]
        print(f"{run['arm']}/seed{run['seed']}: train {last['train_success']:.3f} heldout "
              f"{last['heldout_success']:.3f} probe {last['probe_heldout']:.3f} env steps {run['env_steps']} "
              f"({run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU)", flush=True)  # fmt: skip
        result["summary"] = summarise(result["runs"])
        (out / JSON_NAME).write_text(json.dumps(result, indent=1))
        plot(result["runs"], out / PNG_NAME)

    def target(arm: str, seed: int) -> list[dict[str, Any]] | None:
        m = ARMS[arm].match_steps_of
        return None if m is None else done[(m, seed)]["curves"]

    todo = [(a, s) for s in cfg.seeds for a in cfg.arms if (a, s) not in done]
    if cfg.jobs <= 1:
        for a, s in sorted(todo, key=lambda r: ARMS[r[0]].match_steps_of is not None):
            finished(run_arm(a, s, *args[:2], cfg, target(a, s)))
    else:
        with ProcessPoolExecutor(cfg.jobs, mp_context=mp.get_context("spawn")) as pool:
            schedule(lambda a, s: pool.submit(run_arm, a, s, *args, target(a, s)), todo, done, finished)
    result["summary"] = summarise(result["runs"])
    result["verdict"] = verdict(result["runs"], cfg)
    result["wall_s"] = time.perf_counter() - t0
    result["cpu_s"] = time.process_time() - c0 + _cpu_children()
    result["complete"] = all((a, s) in done for a in cfg.arms for s in cfg.seeds)
    (out / JSON_NAME).write_text(json.dumps(result, indent=1))
    plot(result["runs"], out / PNG_NAME)
    print(json.dumps({"summary": result["summary"], "verdict": result["verdict"]}, indent=1))
    return result


if __name__ == "__main__":
    main(tyro.cli(Config))
