"""Does SERO help the policy it trains? Five arms from one committed start, on two MiniShop variants (CPU; issue 32).

Variants (`sero_mini_start.VARIANTS`): ``word`` (``envkit/MiniShop-v0``: the deciding fact is one attribute word;
to go back from a wrong item the policy must compare the item's word with the instruction's) and ``readable_end``
(``envkit/MiniShopReadableEnd-v0``, design v3's positive control: an item page ends with ``match`` / ``nomatch``;
v2's ``readable`` put that word after the page's name, where this model cannot learn to read it at the arms'
budget: docs/results/sero_mini_rule_v3.md). Held-out:
the 48 held-out tasks (unseen words) in all four rotations of the listing (``...HeldoutRotated-v0``, 192 tasks):
a policy that picks by position scores exactly 0.25.

Model: the word model (a ~0.6M-parameter Llama on a word-level tokenizer) behaviour-cloned on the oracle's
episodes of train tasks 0..135: the start is LOADED from ``--start`` (docs/results/sero_mini_start, sha256 checked;
built once by `scripts/sero_mini_start.py` with a criterion on train tasks only), never regenerated here.

Before RL, per variant, the learnability gate (`sero_mini_start.gate`, ``--gate-steps`` at the arms' ``--lr``):
supervised on the oracle's continuations from wrong-item states plus the normal demos, the model must reach
p(back | wrong) >= 0.9 and p(buy | right) >= 0.9 on the rotated held-out tasks. A variant that fails runs no arm
(``--skip-failed-gates``, default): its verdict is CANNOT TEST SERO whatever they do.

Arms (`ARMS`), every one from the same start, with the same seeds and the same tasks per step (the trainer draws
them from (seed, step)):

    GraphGPO                            plain GraphGPO, --group-size episodes per task
    GraphGPO + matched steps            plain GraphGPO with extra episodes per group so that its cumulative env
                                        steps follow the SERO run's of the same seed
    GraphGPO + SERO                     oracle continuations from failed states with SERO's credit, the paper's
                                        weighting (``reach.first="one"``: the first oracle action weighs 1)
    GraphGPO + SERO own                 the same, first oracle action weighted by its own likelihood (ablation)
    GraphGPO + supervised oracle rows   the same roots and continuations as plain supervised rows, policy rows
                                        on plain GraphGPO (``agent.sero_rows="supervised"``): more oracle data
                                        without SERO's state-rooted credit
    GraphGPO + branching                (available, not run by default) the policy-only control of issue 26

Every ``--eval-every`` steps and at the end: success (temperature 1) on 24 train tasks and on the 192 rotated
held-out tasks (``--final-eval-episodes`` per task at the final step, ``--eval-episodes`` before), and the probes
on both: p(click right | results), p(buy | right item's page), p(back | wrong item's page). Per step: rollout
success, env steps, SERO's roots / rescues / rows and every ``sero_*`` diagnostic (the advantage mass of policy
vs oracle rows, ``sero_policy_mass`` / ``sero_oracle_mass``) and, in the SERO arms, the per-step norms of the
policy rows' and of the oracle rows' policy-loss gradients (``grad_norm_policy`` / ``grad_norm_oracle``, before
clipping; one extra backward pass per row kind) and the oracle rows' share of the loss tokens
(``oracle_token_share``).

READING RULE (committed before any run of this design; `sero_mini_rule.verdict` applies it, its docstring and
docs/results/sero_mini_rule.md state it in full): primary endpoint rotated held-out success at the final step;
contrasts SERO - GraphGPO, SERO - matched, SERO - supervised, each a mean over the 48 held-out tasks with a 95%
bootstrap interval resampling TASKS (their rotations and seeds together); margin 0.05. Per variant: CANNOT TEST
SERO if its learnability gate fails; VOID if the positive control (readable: SERO - GraphGPO lower bound > 0)
fails, if GraphGPO's train success moves by < 0.05, or if SERO rescues < 1 per step on average over its first 50
steps; SUPPORT if against both GraphGPO and matched the lower bound is > 0 and the point >= +0.05; REFUTATION if
against both the upper bound is < +0.05; INCONCLUSIVE otherwise. SERO - supervised reads "credit adds" / "no
more than the data" / "undecided" beside it.

SIZE (design v3, pre-committed in docs/results/sero_mini_rule_v3.md): 5 seeds x 150 steps x 8 tasks x 4 episodes
per arm and variant at lr 1e-3, 1 PPO epoch, the gate 150 steps at lr 1e-3; evaluations every 25 steps
(2 episodes per task), 4 episodes per task at the final one. Power (binomial noise only, p = 0.5): per arm and
held-out base task 4 rotations x 5 seeds x 4 episodes = 80 episodes, so a contrast's task-bootstrap standard
error is about sqrt(2 * 0.25 / 80) / sqrt(48) = 0.011 plus task-by-arm spread; SUPPORT (point >= 0.05 and lower
bound > 0) is reached with ~80% chance by a true gain of about 0.06, REFUTATION needs a true gain near 0 (upper
bound < 0.05 at ~0.03 above the point). Run-to-run spread across 5 seeds is not resampled and widens both.
Seeds run in order; a run cut by the deadline is reported as PARTIAL: the rule on the seeds whose arms all
finished, labelled as not the pre-registered size (v2 had a cost pilot and a size reduction: sero_mini_size.json).

Writes ``<out>/compare_sero_mini_v3.json`` (config, start, gates, per variant / arm / seed the evals and curves,
the summary, the verdict, wall and CPU seconds) and ``<out>/compare_sero_mini_v3.png`` (v2's design:
``--variants word readable --positive-control readable --gate-steps 1000 --gate-lr 3e-3 --steps 100``).

Usage:
    python scripts/compare_sero_mini.py --out docs/results                       # the documented design
    python scripts/compare_sero_mini.py --out /tmp/m --seeds 0 --steps 2 --eval-every 1 --gate-steps 5 \\
        --final-eval-episodes 1 --eval-episodes 1                                  # smoke

What it can show: for a ~0.6M-parameter model, whether SERO's continuations move rotated held-out success beyond
GraphGPO, the same env steps, and the same oracle data as supervised rows, where the policy can (readable) and
cannot obviously (word) read what the oracle's ``back`` depends on. What it cannot show: anything about 7B
models, real WebShop's search or ALFWorld (scripts/device_check.sh holds those commands).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import resource
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the script's own modules (sero_mini_*)

from sero_mini_plot import plot
from sero_mini_rule import SERO, gate_passed, verdict
from sero_mini_start import HELDOUT_TASKS, TRAIN_EVAL_TASKS, VARIANTS, ProbePaths, gate, load_start, probe

from envkit.credit.reachability import ReachConfig
from envkit.envs.minishop.env import MiniShopEnv
from envkit.registration import env_facts
from envkit.runtime.models import ModelConfig
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.local.explorers.branch import AgentBranchDriver
from envkit.trainers.local.multi_turn import AgentConfig, play
from envkit.trainers.local.options import LossConfig
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig
from envkit.trainers.sero_options import TrainerSeroOptions

#: the design whose results a run writes (``compare_sero_mini_<design>.json`` / ``.png``); v2: docs/results, void
DESIGN = "v3"
JSON_NAME, PNG_NAME = f"compare_sero_mini_{DESIGN}.json", f"compare_sero_mini_{DESIGN}.png"
DIAGNOSTIC_PREFIXES = ("sero_", "credit_", "adv_", "probe", "branch_")
#: per-step metrics kept in the JSON (besides the prefixes above)
CURVE_KEYS = ("success_rate", "reward_mean", "zero_adv_fraction", "episode_turns", "invalid_share", "rollouts",
              "rows_in_loss", "grad_norm", "grad_norm_policy", "grad_norm_oracle", "oracle_token_share", "pg_loss",
              "entropy", "time_step_s", "env_steps", "group_size")  # fmt: skip


@dataclass(frozen=True)
class Arm:
    """One arm: SERO on/off, its first-action weighting and row kind, the arm whose env steps it matches."""

    sero: bool = False
    first: str = "one"
    """`ReachConfig.first` of a SERO arm: ``one`` (the paper's) or ``own`` (the ablation)."""
    rows: str = "credit"
    """`AgentConfig.sero_rows`: ``credit`` (SERO) or ``supervised`` (the oracle-data control)."""
    match_steps_of: str | None = None
    explorer: str = "none"
    reserve: str = "worst"


ARMS: dict[str, Arm] = {
    "GraphGPO": Arm(),
    "GraphGPO + matched steps": Arm(match_steps_of=SERO),
    SERO: Arm(sero=True),
    "GraphGPO + SERO own": Arm(sero=True, first="own"),
    "GraphGPO + supervised oracle rows": Arm(sero=True, rows="supervised"),
    "GraphGPO + branching": Arm(explorer="branch", match_steps_of=SERO, reserve="backbone"),
}
DEFAULT_ARMS = tuple(a for a in ARMS if a != "GraphGPO + branching")


@dataclass(frozen=True)
class Config:
    """Settings of the comparison (defaults: the documented, pre-committed design)."""

    out: str = "runs/compare_sero_mini"
    start: str = "docs/results/sero_mini_start"
    """The committed start artefact (`scripts/sero_mini_start.py`); loaded, never regenerated."""
    variants: tuple[str, ...] = ("word", "readable_end")
    """v3's: the word variant and the positive control with ``match`` / ``nomatch`` as the page's last word (v2 ran
    ``readable``, the same word after the page's name, which this model cannot learn to read at the arms' budget)."""
    positive_control: str = "readable_end"
    """The readable variant whose SERO - GraphGPO contrast is the rule's positive control (clause 2)."""
    arms: tuple[str, ...] = DEFAULT_ARMS
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    steps: int = 150
    tasks_per_step: int = 8
    group_size: int = 4
    max_group_size: int = 16
    lr: float = 1e-3
    """Learning rate of every arm and of the learnability gate."""
    lr_warmup_steps: int = 3
    ppo_epochs: int = 1
    """Optimizer steps per batch (`LossConfig.ppo_epochs`; 1: on-policy, v2's design)."""
    kl_coef: float = 0.0
    """beta of the k3 KL loss against the start (`LossConfig.kl_coef`; 0: no reference model, v2's design)."""
    eval_every: int = 25
    eval_episodes: int = 2
    final_eval_episodes: int = 4
    gate_steps: int = 150
    """Supervised steps of the learnability gate (`sero_mini_start.gate`; v3: the arms' update count)."""
    gate_lr: float | None = None
    """The gate's learning rate; None: the arms' ``lr`` (v3). v2 ran 1000 steps at 3e-3."""
    skip_failed_gates: bool = True
    """Run no arm of a variant whose learnability gate failed (its verdict is CANNOT TEST SERO whatever they do)."""
    jobs: int = 2
    fresh: bool = False
    """Ignore finished runs already in --out."""
    bootstrap: int = 2000


def agent_config(arm: Arm, train_id: str) -> AgentConfig:
    opts = TrainerSeroOptions(reach=ReachConfig(first=arm.first))  # type: ignore[arg-type]
    return AgentConfig(estimator="graphgpo", sero=arm.sero, sero_opts=opts, sero_rows=arm.rows,  # type: ignore[arg-type]
                       max_turns=env_facts(train_id).horizon, max_context_tokens=1024)  # fmt: skip


def success(model: Any, tok: Any, env_id: str, tasks: list[int], episodes: int, acfg: AgentConfig) -> list[float]:
    """Per task, the success share of `episodes` sampled episodes (temperature 1, a fixed sampling seed)."""
    model.eval()
    eps = play(model, tok, env_id, tasks, episodes, acfg, max_new_tokens=2, temperature=1.0, seed=4242)
    per_task = np.zeros(len(tasks))
    for e in eps:
        per_task[e.group] += float(e.success) / episodes
    return per_task.round(4).tolist()


def evaluate(model: Any, tok: Any, variant: str, paths: dict[str, ProbePaths], episodes: int) -> dict[str, Any]:
    train_id, held_id = VARIANTS[variant]
    acfg = agent_config(ARMS["GraphGPO"], train_id)
    train = success(model, tok, train_id, TRAIN_EVAL_TASKS, episodes, acfg)
    held = success(model, tok, held_id, list(range(HELDOUT_TASKS)), episodes, acfg)
    pt, ph = probe(model, tok, paths["train"]), probe(model, tok, paths["heldout"])
    return {"train_success": float(np.mean(train)), "heldout_success": float(np.mean(held)), "episodes": episodes,
            "train_per_task": train, "heldout_per_task": held, **{f"train_{k}": v for k, v in pt.items()},
            **{f"heldout_{k}": v for k, v in ph.items()}}  # fmt: skip


def probe_paths(variant: str) -> dict[str, ProbePaths]:
    train_id, held_id = VARIANTS[variant]
    return {"train": ProbePaths.of(train_id, TRAIN_EVAL_TASKS), "heldout": ProbePaths.of(held_id, range(HELDOUT_TASKS))}


def matched_group_size(target_cum: float, done_cum: float, turns: float, cfg: Config) -> int:
    """Episodes per task this step so the cumulative env steps reach `target_cum` (`turns`: recent episode length)."""
    need = (target_cum - done_cum) / max(1.0, cfg.tasks_per_step * turns)
    return int(min(cfg.max_group_size, max(cfg.group_size, round(need))))


def run_arm(variant: str, name: str, seed: int, start: str, cfg: Config,
            target: list[dict[str, Any]] | None) -> dict[str, Any]:  # fmt: skip
    """One training run of `variant` from the start; `target`: the curves of the run whose env steps it matches."""
    torch.set_num_threads(1)
    arm, (train_id, _) = ARMS[name], VARIANTS[variant]
    paths = probe_paths(variant)
    tcfg = TrainConfig(
        task=train_id, model=ModelConfig(path=start, device="cpu"), steps=cfg.steps, seed=seed,
        run_dir=str(Path(cfg.out) / "runs" / variant / f"{name.replace(' + ', '_').replace(' ', '_')}_seed{seed}"),
        prompts_per_step=cfg.tasks_per_step, group_size=cfg.group_size, max_new_tokens=2, lr=cfg.lr,
        lr_warmup_steps=cfg.lr_warmup_steps, loss=LossConfig(ppo_epochs=cfg.ppo_epochs, kl_coef=cfg.kl_coef), agent=agent_config(arm, train_id), tensorboard=False, plot=False,
        progress=False, probe_tasks=0, explorer=arm.explorer, branch=BranchConfig(reserve=arm.reserve),  # type: ignore[arg-type]
    )  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    trainer = LocalTrainer(tcfg)
    evals = [{"step": 0, **evaluate(trainer.model, trainer.tok, variant, paths, cfg.final_eval_episodes)}]
    curves: list[dict[str, Any]] = []
    cum = 0
    for step in range(1, cfg.steps + 1):
        if target is not None:
            turns = curves[-1]["episode_turns"] if curves else target[step - 1]["episode_turns"]
            goal = sum(c["env_steps"] for c in target[:step])
            if arm.explorer == "branch":
                trainer.explorer.set_budget(max(1, round((goal - cum) / cfg.tasks_per_step)))  # type: ignore[union-attr]
            else:
                trainer.cfg = replace(tcfg, group_size=matched_group_size(goal, cum, turns, cfg))
        before = MiniShopEnv.steps_in_process
        rec = trainer.logger.log(step, trainer.step(step))
        env_steps = MiniShopEnv.steps_in_process - before
        cum += env_steps
        rec = {**rec, "env_steps": env_steps, "group_size": trainer.cfg.group_size}
        curves.append({k: round(float(v), 5) for k, v in rec.items()
                       if isinstance(v, int | float) and (k in CURVE_KEYS or k.startswith(DIAGNOSTIC_PREFIXES))})  # fmt: skip
        if isinstance(trainer.explorer, AgentBranchDriver):
            curves[-1]["branch_budget_per_task"] = trainer.explorer.budget
        if step % cfg.eval_every == 0 or step == cfg.steps:
            episodes = cfg.final_eval_episodes if step == cfg.steps else cfg.eval_episodes
            evals.append({"step": step, **evaluate(trainer.model, trainer.tok, variant, paths, episodes)})
    trainer.logger.close()
    return {"variant": variant, "arm": name, "seed": seed, "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "env_steps": cum, "evals": evals, "curves": curves}  # fmt: skip


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: mean / std / per seed of the final train and held-out success and probes, env steps, SERO totals."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        rows = [r for r in runs if r["arm"] == arm]
        if not rows:
            continue
        keys = ("train_success", "heldout_success", "heldout_p_click_right", "heldout_p_buy_right",
                "heldout_p_back_wrong")  # fmt: skip
        vals = {k: [r["evals"][-1][k] for r in rows] for k in keys}
        vals["env_steps"] = [r["env_steps"] for r in rows]
        vals["rollout_success_mean"] = [float(np.mean([c["success_rate"] for c in r["curves"]])) for r in rows]
        for k in ("sero_tried", "sero_succeeded", "sero_rows"):
            if any(k in c for r in rows for c in r["curves"]):
                vals[f"{k}_total"] = [sum(c.get(k, 0.0) for c in r["curves"]) for r in rows]
        s: dict[str, Any] = {"seeds": len(rows)}
        for k, v in vals.items():
            s[k] = {"mean": float(np.mean(v)), "std": float(np.std(v)), "per_seed": v}
        diag = sorted({k for r in rows for c in r["curves"] for k in c if k.startswith(DIAGNOSTIC_PREFIXES)})
        s["per_step_means"] = {k: float(np.mean([c[k] for r in rows for c in r["curves"] if k in c])) for k in diag}
        s["wall_s_mean"] = float(np.mean([r["wall_s"] for r in rows]))
        s["cpu_s_mean"] = float(np.mean([r["cpu_s"] for r in rows]))
        out[arm] = s
    return out


Key = tuple[str, str, int]


def schedule(submit: Callable[[Key], Future], todo: list[Key], done: dict[Key, Any],
             finished: Callable[[dict[str, Any]], None]) -> None:  # fmt: skip
    """Run `todo` (variant, arm, seed) keys through ``submit(key)``: a run whose arm matches another's env steps
    starts once that arm's run of its variant and seed is in `done`; targets start first."""
    dep = {k: (k[0], m, k[2]) for k in todo if (m := ARMS[k[1]].match_steps_of) is not None}
    waiting = [k for k in todo if k in dep]
    targets = set(dep.values())
    ready = sorted((k for k in todo if k not in dep), key=lambda k: (k not in targets, k[2]))
    live: dict[Future, Key] = {submit(k): k for k in ready}

    def unblock() -> None:
        for k in [w for w in waiting if dep[w] in done]:
            waiting.remove(k)
            live[submit(k)] = k

    unblock()
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
    bad = [a for a in cfg.arms if a not in ARMS] + [
        v for v in (*cfg.variants, cfg.positive_control) if v not in VARIANTS
    ]
    if bad:
        raise SystemExit(f"unknown arm(s) or variant(s) {bad}; arms: {list(ARMS)}; variants: {list(VARIANTS)}")
    for a in cfg.arms:
        m = ARMS[a].match_steps_of
        if m is not None and m not in cfg.arms:
            raise SystemExit(f"arm {a!r} matches the env steps of {m!r}: add {m!r} to --arms")
    starts = {v: load_start(cfg.start, v) for v in cfg.variants}  # refuses a missing or altered start
    gate_lr = cfg.lr if cfg.gate_lr is None else cfg.gate_lr
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"config": asdict(cfg), "complete": False, "variants": {}}
    old = out / JSON_NAME
    prev = json.loads(old.read_text()) if old.exists() and not cfg.fresh else {}
    # resume: a gate is kept for the same start and gate steps; finished runs also need the same run settings
    loose = ("out", "variants", "arms", "seeds", "jobs", "fresh", "bootstrap", "positive_control", "skip_failed_gates")
    settings_same = {k: v for k, v in prev.get("config", {}).items() if k not in loose} == {
        k: v for k, v in asdict(cfg).items() if k not in loose
    }
    for v, (_, entry) in starts.items():
        kept = prev.get("variants", {}).get(v, {})
        same = kept.get("start", {}).get("sha256") == entry["sha256"]
        kept_gate = kept.get("gate") or {}
        gate_same = same and kept_gate.get("steps") == cfg.gate_steps and kept_gate.get("lr") == gate_lr
        result["variants"][v] = {"start": {k: entry[k] for k in ("step", "criterion_met", "sha256")},
                                 "gate": kept.get("gate") if gate_same else None,
                                 "runs": [r for r in kept.get("runs", []) if same and settings_same
                                          and r["arm"] in cfg.arms and r["seed"] in cfg.seeds]}  # fmt: skip
    done: dict[Key, Any] = {(r["variant"], r["arm"], r["seed"]): r for v in result["variants"].values()
                            for r in v["runs"]}  # fmt: skip

    def write() -> None:
        for v in result["variants"].values():
            v["summary"] = summarise(v["runs"])
        old.write_text(json.dumps(result, indent=1))
        plot(result, out / PNG_NAME)

    def finished(run: dict[str, Any]) -> None:
        done[(run["variant"], run["arm"], run["seed"])] = run
        v = result["variants"][run["variant"]]
        v["runs"] = sorted((r for r in done.values() if r["variant"] == run["variant"]),
                           key=lambda r: (r["seed"], list(ARMS).index(r["arm"])))  # fmt: skip
        last = run["evals"][-1]
        print(f"{run['variant']}/{run['arm']}/seed{run['seed']}: train {last['train_success']:.3f} heldout "
              f"{last['heldout_success']:.3f} back|wrong {last['heldout_p_back_wrong']:.3f} env steps "
              f"{run['env_steps']} ({run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU)", flush=True)  # fmt: skip
        write()

    def target(k: Key) -> list[dict[str, Any]] | None:
        m = ARMS[k[1]].match_steps_of
        return None if m is None else done[(k[0], m, k[2])]["curves"]

    todo = [(v, a, s) for s in cfg.seeds for v in cfg.variants for a in cfg.arms if (v, a, s) not in done]
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max(1, cfg.jobs), mp_context=ctx) as pool:
        need = [v for v in cfg.variants if result["variants"][v]["gate"] is None]
        gates = {v: pool.submit(gate, str(starts[v][0]), v, cfg.gate_steps, gate_lr) for v in need}
        for v, fut in gates.items():
            result["variants"][v]["gate"] = fut.result()
            print(f"{v}: gate {json.dumps({k: x for k, x in fut.result().items() if k != 'train'})}", flush=True)
        write()
        skipped = {v for v in cfg.variants if cfg.skip_failed_gates and not gate_passed(result["variants"][v]["gate"])}
        for v in sorted(skipped):
            print(f"{v}: learnability gate failed: CANNOT TEST SERO; its arms are not run", flush=True)
        todo = [k for k in todo if k[0] not in skipped]
        schedule(lambda k: pool.submit(run_arm, *k, str(starts[k[0]][0]), cfg, target(k)), todo, done, finished)
    result["verdict"] = verdict(result["variants"], cfg.bootstrap, cfg.positive_control)
    result["wall_s"] = time.perf_counter() - t0
    result["cpu_s"] = time.process_time() - c0 + _cpu_children()
    ran = [v for v in cfg.variants if v not in skipped]
    result["complete"] = all((v, a, s) in done for v in ran for a in cfg.arms for s in cfg.seeds)
    write()
    print(json.dumps({v: {k: r[k] for k in ("verdict", "why", "credit_vs_data")}
                      for v, r in result["verdict"]["variants"].items()}, indent=1))  # fmt: skip
    return result


if __name__ == "__main__":
    main(tyro.cli(Config))
