"""SERO miniature's start, probes and learnability gate (`scripts/compare_sero_mini.py`, issue 32).

Variants (`VARIANTS`): ``word`` (MiniShop: an item page shows the item's attribute word, so going back from a
wrong item means comparing it with the instruction's word) and ``readable`` (the positive control: an item page
also says ``match`` / ``nomatch``). Held-out tasks are evaluated in all four rotations of the listing.

The start is an artefact, built once and LOADED by the comparison (never regenerated there):

    python scripts/sero_mini_start.py --out docs/results/sero_mini_start

builds, per variant, the word model over MiniShop's words (`save_word_model`, init seed 0) and behaviour-clones the
oracle's episodes of train tasks 0..135 (`bc_warmup`, batch 8, lr 3e-3, seed 0), probing every 250 steps up to
3000. START CRITERION (written before it was first run; training tasks only): the chosen checkpoint is the FIRST
one whose probes on the 24 evaluated train tasks (12 cloned 0..11, 12 unseen 136..147) reach p(buy | right
item's page) >= 0.9 and p(click right | results) >= 0.4 (chance: 0.25); if none does, the last (3000), flagged
``criterion_met: false``. Saved: ``<out>/<variant>/`` (the Hugging Face folder) and ``<out>/start.json`` (every
checkpoint's probes and BC loss, the chosen step, and the sha256 of every file). `load_start` checks the hashes.

Probes (teacher-forced probability of the label token, along fixed paths of every task): p(click right |
results), p(buy | right item's page), p(back | wrong item's page) (the wrong item: the one listed after the right
one, cyclically, so the rotations put it at every position).

Learnability gate (`gate`): from the start, supervised (the same BC) on the oracle's continuations from every
wrong-item state of train tasks 0..135 (click a wrong item, then back, the right item, buy) plus the normal
demos, `gate_steps` steps; it passes when the rotated held-out probes reach p(back | wrong) >= 0.9 and
p(buy | right) >= 0.9 (`sero_mini_rule.GATE`). A variant that fails cannot test SERO: the model cannot learn, even
when told, what SERO's continuations teach.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import tyro

from envkit.core import Step
from envkit.envs.minishop.env import vocabulary
from envkit.envs.minishop.tasks import SPLIT_SIZES
from envkit.oracles.base import make_oracle, run_oracle
from envkit.registration import env_facts, make
from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.local.agent_bc import bc_warmup, demo_rows, demo_words
from envkit.trainers.local.generation import batch_sequences, score
from envkit.trainers.local.word_tasks import save_word_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: variant -> (train env id, rotated held-out env id)
VARIANTS: dict[str, tuple[str, str]] = {
    "word": ("envkit/MiniShop-v0", "envkit/MiniShopHeldoutRotated-v0"),
    "readable": ("envkit/MiniShopReadable-v0", "envkit/MiniShopReadableHeldoutRotated-v0"),
    "readable_end": ("envkit/MiniShopReadableEnd-v0", "envkit/MiniShopReadableEndHeldoutRotated-v0"),
}
HELDOUT_TASKS = 4 * SPLIT_SIZES["heldout"]
DEMO_TASKS = 136
#: the 24 evaluated train tasks: 12 cloned, 12 never cloned
TRAIN_EVAL_TASKS = [*range(12), *range(DEMO_TASKS, DEMO_TASKS + 12)]
START_JSON = "start.json"
CRITERION = {"p_buy_right": 0.9, "p_click_right": 0.4}

Demo = tuple[str, tuple[Step, ...]]


@dataclass(frozen=True)
class StartConfig:
    """How the start artefact is built (defaults: the committed one)."""

    out: str = "docs/results/sero_mini_start"
    variants: tuple[str, ...] = tuple(VARIANTS)
    bc_steps: int = 3000
    every: int = 250
    lr: float = 3e-3
    hidden_size: int = 128
    layers: int = 2


def _step(env: Any, obs: str, action: str) -> tuple[Step, str, dict[str, Any]]:
    nxt, r, term, trunc, info = env.step(action)
    return Step(str(obs), action, float(r), str(nxt), bool(term), bool(trunc), {}), str(nxt), info


def oracle_episodes(env_id: str, tasks: list[int] | range) -> list[Demo]:
    """The oracle's episodes from reset (in a non-evaluation instance: held-out ones only for probes)."""
    env = make(env_id, evaluation=False).unwrapped
    oracle = make_oracle(env_id)
    out = []
    for k in tasks:
        obs, info = env.reset(options={"task": k})
        run = run_oracle(env, oracle, obs, info, max_steps=env_facts(env_id).horizon)
        if not run.success:
            raise RuntimeError(f"MiniShop's exact oracle failed on {env_id} task {k}: {run.reason}")
        out.append((str(obs), run.steps))
    return out


def wrong_item_demos(env_id: str, tasks: list[int] | range, wrong: str = "all") -> list[Demo]:
    """Per task, for each wrong item (``all``) or the one listed after the right one (``next``): click it, then
    the oracle's continuation (back, the right item, buy)."""
    env = make(env_id, evaluation=False).unwrapped
    oracle = make_oracle(env_id)
    out = []
    for k in tasks:
        first, _ = env.reset(options={"task": k})
        n, answer = len(env.task.items), env.task.answer
        picks = [j for j in range(n) if j != answer] if wrong == "all" else [(answer + 1) % n]
        for j in picks:
            obs, info = env.reset(options={"task": k})
            click, obs, info = _step(env, obs, f"opt{j + 1}")
            run = run_oracle(env, oracle, obs, info, max_steps=env.steps_left)
            if not run.success:
                raise RuntimeError(f"MiniShop's oracle failed from a wrong item of {env_id} task {k}: {run.reason}")
            out.append((str(first), (click, *run.steps)))
    return out


@dataclass
class ProbePaths:
    """Per task the oracle's path (click right, buy) and a wrong detour (click the next item, back)."""

    right: list[Demo]
    wrong: list[Demo]

    @classmethod
    def of(cls, env_id: str, tasks: list[int] | range) -> ProbePaths:
        right = [(f, s[:2]) for f, s in oracle_episodes(env_id, tasks)]
        wrong = [(f, s[:2]) for f, s in wrong_item_demos(env_id, tasks, wrong="next")]
        return cls(right, wrong)


def _label_probs(model: PreTrainedModel, tok: PreTrainedTokenizerBase, demos: list[Demo]) -> np.ndarray:
    """(rows, actions) teacher-forced probability of each action's first token (its label) along `demos`."""
    rows = demo_rows(tok, demos, 1024)
    ids, attn, target = batch_sequences([p for p, _, _ in rows], [r for _, r, _ in rows], tok.pad_token_id, "cpu",
                                        [f for _, _, f in rows])  # fmt: skip
    model.eval()
    with torch.no_grad():
        logp = score(model, ids, attn, target, with_entropy=False).logp
    out = []
    for i, (p, _, flags) in enumerate(rows):
        starts = [j for j, f in enumerate(flags) if f == 1 and (j == 0 or flags[j - 1] == 0)]
        out.append([float(torch.exp(logp[i, len(p) + s - 1])) for s in starts])
    return np.asarray(out)


def probe(model: PreTrainedModel, tok: PreTrainedTokenizerBase, paths: ProbePaths) -> dict[str, float]:
    """Mean p(click right | results), p(buy | right item's page), p(back | wrong item's page) over the tasks."""
    right, wrong = _label_probs(model, tok, paths.right), _label_probs(model, tok, paths.wrong)
    return {"p_click_right": float(right[:, 0].mean()), "p_buy_right": float(right[:, 1].mean()),
            "p_back_wrong": float(wrong[:, 1].mean())}  # fmt: skip


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_start(cfg: StartConfig) -> dict[str, Any]:
    """The docstring's start artefact: per variant BC, the criterion's checkpoint, ``start.json`` with hashes."""
    torch.set_num_threads(1)
    out = Path(cfg.out)
    heldout_all = [d for v in VARIANTS.values() for d in oracle_episodes(v[1], range(HELDOUT_TASKS))]
    train_all = [d for v in VARIANTS.values() for d in oracle_episodes(v[0], range(SPLIT_SIZES["train"]))]
    words = sorted(vocabulary() | demo_words(train_all) | demo_words(heldout_all))
    meta: dict[str, Any] = {"config": asdict(cfg), "criterion": CRITERION, "variants": {}}
    if (out / START_JSON).exists():  # another variant built by another invocation (one process per variant)
        meta["variants"] = json.loads((out / START_JSON).read_text())["variants"]
    for variant in cfg.variants:
        chosen = _build_variant(cfg, variant, words, out / variant)
        print(f"{variant}: chose BC step {chosen['step']} (criterion met: {chosen['criterion_met']})", flush=True)
        if (out / START_JSON).exists():
            meta["variants"] = json.loads((out / START_JSON).read_text())["variants"]
        meta["variants"][variant] = chosen
        (out / START_JSON).write_text(json.dumps(meta, indent=1))
    return meta


def _build_variant(cfg: StartConfig, variant: str, words: list[str], folder: Path) -> dict[str, Any]:
    """One variant's start: BC with the criterion's probes every `cfg.every` steps; the chosen checkpoint saved."""
    t0 = time.perf_counter()
    train_id, _ = VARIANTS[variant]
    save_word_model(folder, words, hidden_size=cfg.hidden_size, layers=cfg.layers)
    model, tok = load_model(ModelConfig(path=str(folder), device="cpu"))
    rows = demo_rows(tok, oracle_episodes(train_id, range(DEMO_TASKS)), 1024)
    paths = ProbePaths.of(train_id, TRAIN_EVAL_TASKS)
    checkpoints: list[dict[str, Any]] = []
    chosen: dict[str, Any] = {}

    def look(k: int) -> None:
        p = probe(model, tok, paths)
        checkpoints.append({"step": k, **p})
        if not chosen and all(p[key] >= v for key, v in CRITERION.items()):
            chosen.update(step=k, criterion_met=True, state={n: t.clone() for n, t in model.state_dict().items()})

    losses = bc_warmup(model, tok, rows, steps=cfg.bc_steps, batch=8, lr=cfg.lr, seed=0, every=cfg.every,
                       callback=look)  # fmt: skip
    if not chosen:
        chosen.update(step=cfg.bc_steps, criterion_met=False, state=model.state_dict())
    model.load_state_dict(chosen.pop("state"))
    model.save_pretrained(folder)
    for c in checkpoints:
        c["bc_loss_mean_last_50"] = float(np.mean(losses[max(0, c["step"] - 50) : c["step"]]))
    files = {f.name: _sha256(f) for f in sorted(folder.iterdir()) if f.is_file()}
    return {**chosen, "checkpoints": checkpoints, "sha256": files, "demo_tasks": len(rows), "vocabulary": len(tok),
            "wall_s": time.perf_counter() - t0}  # fmt: skip


def load_start(folder: str | Path, variant: str) -> tuple[Path, dict[str, Any]]:
    """The committed start of `variant` after checking every file's sha256 against ``start.json``."""
    root = Path(folder)
    meta_path = root / START_JSON
    if not meta_path.exists():
        raise SystemExit(f"no start artefact at {meta_path}: build it with "
                         f"`python scripts/sero_mini_start.py --out {root}` (or pass --start)")  # fmt: skip
    meta = json.loads(meta_path.read_text())
    if variant not in meta["variants"]:
        raise SystemExit(f"{meta_path} has no {variant!r} start (it has {sorted(meta['variants'])})")
    entry = meta["variants"][variant]
    for name, digest in entry["sha256"].items():
        f = root / variant / name
        if not f.exists() or _sha256(f) != digest:
            raise SystemExit(f"start file {f} is missing or its sha256 differs from {meta_path}: restore it from git "
                             "(git checkout -- docs/results/sero_mini_start) instead of rebuilding")  # fmt: skip
    return root / variant, entry


def gate(start: str | Path, variant: str, steps: int, lr: float = 3e-3) -> dict[str, Any]:
    """The docstring's learnability gate on a copy of the start (the start itself is not changed)."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    train_id, held_id = VARIANTS[variant]
    model, tok = load_model(ModelConfig(path=str(start), device="cpu"))
    demos = oracle_episodes(train_id, range(DEMO_TASKS)) + wrong_item_demos(train_id, range(DEMO_TASKS))
    losses = bc_warmup(model, tok, demo_rows(tok, demos, 1024), steps=steps, batch=8, lr=lr, seed=1)
    held = probe(model, tok, ProbePaths.of(held_id, range(HELDOUT_TASKS)))
    train = probe(model, tok, ProbePaths.of(train_id, TRAIN_EVAL_TASKS))
    return {**held, "train": train, "steps": steps, "lr": lr, "rows": len(demos), "bc_loss_last": losses[-1],
            "wall_s": time.perf_counter() - t0}  # fmt: skip


if __name__ == "__main__":
    build_start(tyro.cli(StartConfig))
