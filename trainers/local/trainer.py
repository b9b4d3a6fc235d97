"""Single-process RL trainer on transformers (CPU or one GPU): GRPO-family updates with EDEN/XRPO explorers.

Usage (CLI, every option with its default: ``envkit-train local --help``):

    envkit-train local --task arith --model.path tiny:arith --sft-steps 150 --steps 100 --explorer eden
    envkit-train local --task envkit/Math-v0 --model.path smollm2 --steps 5 --group-size 4
    envkit-train local --task envkit/Toy-v0 --model.path tiny:bytes --steps 3      # multi-turn (GiGPO)

Python:

    >>> from envkit.trainers.local.trainer import TrainConfig, LocalTrainer          # doctest: +SKIP
    >>> LocalTrainer(TrainConfig(steps=10, run_dir="runs/demo")).train()  # doctest: +SKIP

Single-turn tasks (``arith``, ``envkit/Math-v0``, ``envkit/Code-v0``) sample `prompts_per_step` prompts and a
group of rollouts each; multi-turn envs (any other envkit id) play `prompts_per_step` tasks with `group_size`
episodes each, token-in/token-out (`envkit.trainers.local.multi_turn`). Each step logs the metrics of docs/methods.md section 7 to
``<run_dir>/metrics.jsonl`` and TensorBoard; checkpoints go to ``<run_dir>/checkpoints`` (``--resume``
continues the latest one exactly: every step's randomness derives from (seed, step)); ``<run_dir>/curves.png``
plots the run at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm import tqdm

from envkit.progress import ProgressLines, is_terminal
from envkit.runtime.models import load_model
from envkit.trainers.local.checkpoint import latest_checkpoint, load_state, load_weights, save_checkpoint
from envkit.trainers.local.config import TrainConfig
from envkit.trainers.local.contracts import AgentExplorer, BatchSource, SingleTurnExplorer
from envkit.trainers.local.explorers.registry import make_source
from envkit.trainers.local.metrics import MetricsLogger, plot_metrics
from envkit.trainers.local.probe import ProbePair, oracle_path_pairs, probe
from envkit.trainers.local.run_dir import check_run_dir
from envkit.trainers.local.task_specs import make_task
from envkit.trainers.local.tasks import ProblemSource
from envkit.trainers.local.update import update
from envkit.trainers.local.warmup import sft_warmup

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["LocalTrainer", "TrainConfig", "train"]


class LocalTrainer:
    """Runs `TrainConfig` (see the module docstring); `train()` returns the logged records."""

    def __init__(self, cfg: TrainConfig):
        if cfg.resume:  # a resume keeps the run's settings (a new run into a used folder: the CLI refuses it)
            check_run_dir(cfg)
        self.cfg = cfg
        torch.set_num_threads(cfg.torch_threads)
        self.run_dir = Path(cfg.run_dir)
        self.model, self.tok = load_model(cfg.model)
        self.device = next(self.model.parameters()).device
        self.task: ProblemSource | None = None if cfg.multi_turn else make_task(cfg.task, json.loads(cfg.env_kwargs))
        self.start_step = 0
        ckpt = latest_checkpoint(self.run_dir) if cfg.resume else None
        state: dict[str, Any] = {}
        if ckpt is not None:
            load_weights(self.model, ckpt)
            state = load_state(ckpt)
            self.start_step = int(state["step"])
        elif cfg.init_from:
            load_weights(self.model, Path(cfg.init_from))
        self.sft_losses: list[float] = []
        if ckpt is None and cfg.sft_steps and self.task is not None:
            self.sft_losses = sft_warmup(
                self.model, self.tok, self.task, steps=cfg.sft_steps, batch=cfg.sft_batch, lr=cfg.sft_lr,
                seed=cfg.seed, progress=cfg.progress,
            )  # fmt: skip
            self.model.save_pretrained(self.run_dir / "warmup")
            self.tok.save_pretrained(self.run_dir / "warmup")
        self.ref_model = self._reference_model(resumed=ckpt is not None) if cfg.loss.kl_coef > 0 else None
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        t_explorer = time.perf_counter()
        #: `SingleTurnSource` or `AgentSource` with the explorer `cfg.explorer` names (explorers.registry)
        self.source: BatchSource[Any] = make_source(cfg, self.model, self.tok, self.task, state.get("explorer"))
        self.explorer_setup_s = time.perf_counter() - t_explorer  # EDEN: anchor-bank selection
        self.probe_pairs: list[ProbePair] = []
        if cfg.probe_tasks and cfg.multi_turn:
            self.probe_pairs = oracle_path_pairs(
                self.tok, cfg.task, range(cfg.probe_tasks), int(cfg.agent.max_turns or 8),
                max_tokens=cfg.agent.max_context_tokens,
            )  # fmt: skip
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.logger = MetricsLogger(
            self.run_dir, tensorboard=cfg.tensorboard, resume_step=self.start_step if ckpt else None
        )
        (self.run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2, default=str))

    @property
    def cfg(self) -> TrainConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: TrainConfig) -> None:
        """A new config between steps (a script matching another run's budget changes ``group_size``): the batch
        source reads its budget from it from the next step on."""
        self._cfg = cfg
        if hasattr(self, "source"):
            self.source.run = cfg

    @property
    def explorer(self) -> SingleTurnExplorer | AgentExplorer:
        """The batch source's explorer (plain groups for ``--explorer none``)."""
        return self.source.explorer

    def _reference_model(self, resumed: bool) -> PreTrainedModel:
        """A frozen copy of the run's starting policy (after any warm-up): the KL reference."""
        ref = copy.deepcopy(self.model)
        if resumed:  # the live model holds later weights: rebuild the start
            start = self.run_dir / "warmup" if (self.run_dir / "warmup").exists() else self.cfg.init_from
            if start:
                load_weights(ref, Path(start))
            else:
                ref, _ = load_model(self.cfg.model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    # ---------------------------------------------------------------- one step
    def step(self, step: int) -> dict[str, Any]:
        """One training step: collect -> advantages -> update; returns the step's metrics (`train` logs them)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        self.model.eval()
        samples = self.source.collect(step)  # rollouts / episodes within the step's budget
        batch, metrics = self.source.advantages(step, samples)  # credit, the explorer's post-processing, rows
        t_rollout = time.perf_counter() - t0
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr * min(1.0, step / max(1, cfg.lr_warmup_steps))
        metrics.update(update(self.model, self.optimizer, batch, cfg.loss, self.tok.pad_token_id, self.ref_model))
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        if self.probe_pairs and (step == 1 or step % cfg.probe_every == 0):  # after this step's update
            metrics.update(probe(self.model, self.tok, self.probe_pairs, system=cfg.agent.system))
        metrics["time_rollout_s"] = t_rollout
        metrics["time_step_s"] = time.perf_counter() - t0
        return metrics

    # ---------------------------------------------------------------- loop
    def train(self) -> list[dict[str, Any]]:
        """Run steps start_step+1 .. cfg.steps, logging, checkpointing and plotting; returns the records."""
        cfg = self.cfg
        records = []
        steps = range(self.start_step + 1, cfg.steps + 1)
        tty = is_terminal()  # piped or redirected: plain progress lines instead of a bar
        bar = tqdm(steps, desc="train", disable=not (cfg.progress and tty))
        lines = (
            ProgressLines("train steps", total=cfg.steps, done=self.start_step) if cfg.progress and not tty else None
        )
        try:
            for step in bar:
                metrics = self.step(step)
                records.append(self.logger.log(step, metrics))
                post = dict(reward=f"{metrics['reward_mean']:.3f}", zero=f"{metrics['zero_adv_fraction']:.2f}")
                bar.set_postfix(**post)
                if lines is not None:
                    lines.advance(1, note=", ".join(f"{k} {v}" for k, v in post.items()))
                if (cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps:
                    self.save(step)
        finally:
            self.logger.close()
        if cfg.plot and (self.run_dir / "metrics.jsonl").stat().st_size:
            plot_metrics(
                self.run_dir / "metrics.jsonl", self.run_dir / "curves.png", title=f"{cfg.task} {cfg.explorer}"
            )
        return records

    def save(self, step: int) -> Path:
        state = {
            "optimizer": self.optimizer.state_dict(),
            "explorer": self.source.state_dict(),
            "config": dataclasses.asdict(self.cfg),
        }
        return save_checkpoint(self.run_dir, step, self.model, self.tok, state, keep=self.cfg.keep_checkpoints)


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Build a `LocalTrainer` for `cfg` and run it."""
    return LocalTrainer(cfg).train()
