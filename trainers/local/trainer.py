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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
from tqdm import tqdm

from envkit.credit.advantages import group_advantages, zero_advantage_fraction
from envkit.progress import ProgressLines, is_terminal
from envkit.registration import env_facts
from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.explorers.eden import EdenConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.local.agent_batch import collect_agent_batch
from envkit.trainers.local.checkpoint import latest_checkpoint, load_state, load_weights, save_checkpoint
from envkit.trainers.local.explorer_drivers import AgentExplorer, RunShape, SingleTurnExplorer, make_explorer
from envkit.trainers.local.metrics import MetricsLogger, plot_metrics
from envkit.trainers.local.multi_turn import AgentConfig
from envkit.trainers.local.probe import ProbePair, oracle_path_pairs, probe
from envkit.trainers.local.prompt_encoding import encode_prompt
from envkit.trainers.local.single_turn import Rollout, collect_plain
from envkit.trainers.local.tasks import make_task
from envkit.trainers.local.update import LossConfig, TrainBatch, update
from envkit.trainers.local.warmup import sft_warmup


@dataclass(frozen=True)
class TrainConfig:
    """Everything a local training run needs.

    Attributes:
        task: ``arith`` / ``arith:<digits>`` (synthetic, verified in-process), a single-turn envkit id
            (``envkit/Math-v0``, ``envkit/Code-v0``: the env's verifier) or a multi-turn envkit id
            (``envkit/Toy-v0``, ``envkit/WebShop-v0``, ``envkit/ALFWorld-v0``).
        env_kwargs: JSON object of keyword arguments for the env (e.g. ``{"rg_tasks": ["products"]}``).
        model: Which model (see `envkit.runtime.models`).
        run_dir: Output folder (metrics.jsonl, tb/, checkpoints/, curves.png).
        steps: RL steps (the run's last step number; a resumed run continues up to it).
        seed: Seed of prompt sampling, rollouts and EDEN noise.
        prompts_per_step: Prompts (single-turn) or tasks (multi-turn) per step.
        group_size: Rollouts per prompt (G); explorers keep the same total budget.
        max_new_tokens: Response (single-turn) or per-turn action (multi-turn) token cap.
        temperature: Sampling temperature of standard rollouts.
        estimator: ``grpo``, ``grpo_mean``, ``rloo`` or ``dr_grpo`` (single-turn); multi-turn uses
            `agent.estimator`.
        explorer: ``none`` (plain groups), ``eden`` or ``xrpo``; on agent envs EDEN perturbs the first turn
            (`envkit.trainers.local.agent_eden`) and XRPO allocates whole episodes (`envkit.trainers.local.agent_xrpo`);
            ``branch`` (agent envs) forks the policy at high-entropy decisions (`envkit.trainers.local.agent_branch`).
        lr: AdamW learning rate.
        lr_warmup_steps: Linear learning-rate warm-up over the first RL steps (Adam's first steps are large).
        weight_decay: AdamW weight decay.
        loss: Clipping, aggregation, KL and entropy settings.
        eden: EDEN settings (used when explorer is eden).
        xrpo: XRPO settings (used when explorer is xrpo).
        branch: Branching-rollout settings (explorer ``branch``, agent envs only: `envkit.trainers.local.agent_branch`).
        agent: Multi-turn settings.
        sft_steps: Supervised warm-up steps before RL (tasks with reference answers only).
        sft_batch: Warm-up batch size.
        sft_lr: Warm-up learning rate.
        init_from: A checkpoint or model folder whose weights start the run (branch arms from one warm-up).
        save_every: Checkpoint every N steps (0: only at the end).
        keep_checkpoints: Checkpoints kept on disk (the newest N; older ones are deleted as new ones land). One
            checkpoint is the fp32 weights plus AdamW's two moments: about 3x the model (SmolLM2-135M: ~1.6 GB).
        resume: Continue from the latest checkpoint in run_dir.
        tensorboard: Also log to TensorBoard.
        plot: Write curves.png at the end.
        torch_threads: torch intra-op threads (1 is fastest on a busy 2-core CPU).
        progress: Show a progress bar.
        probe_tasks: Multi-turn envs with an oracle: probe the policy's p(correct action) on the oracle's path of
            task seeds 0 .. probe_tasks-1 (`envkit.trainers.local.probe`: WebShop's oracle path, ALFWorld's expert
            plan) and log ``probe_p_correct`` / ``probe_p_last``; 0 (default) is off.
        probe_every: Probe every N steps (and at step 1).
    """

    task: str = "arith"
    env_kwargs: str = "{}"
    model: ModelConfig = field(default_factory=ModelConfig)
    run_dir: str = "runs/local"
    steps: int = 20
    seed: int = 0
    prompts_per_step: int = 16
    group_size: int = 8
    max_new_tokens: int = 6
    temperature: float = 1.0
    estimator: Literal["grpo", "grpo_mean", "rloo", "dr_grpo"] = "grpo"
    explorer: Literal["none", "eden", "xrpo", "branch"] = "none"
    lr: float = 1e-3
    lr_warmup_steps: int = 10
    weight_decay: float = 0.0
    loss: LossConfig = field(default_factory=LossConfig)
    eden: EdenConfig = field(default_factory=EdenConfig)
    xrpo: XrpoConfig = field(default_factory=XrpoConfig)
    branch: BranchConfig = field(default_factory=BranchConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    sft_steps: int = 0
    sft_batch: int = 64
    sft_lr: float = 3e-3
    init_from: str | None = None
    save_every: int = 0
    keep_checkpoints: int = 1
    resume: bool = False
    tensorboard: bool = True
    plot: bool = True
    torch_threads: int = 1
    progress: bool = True
    probe_tasks: int = 0
    probe_every: int = 1

    def __post_init__(self) -> None:
        if self.steps < 0 or self.prompts_per_step < 1 or self.group_size < 1:
            raise ValueError("TrainConfig: steps must be >= 0, prompts_per_step and group_size >= 1")
        if self.probe_tasks < 0 or self.probe_every < 1:
            raise ValueError("TrainConfig: probe_tasks must be >= 0 (0: off) and probe_every >= 1")
        if self.keep_checkpoints < 1 or self.save_every < 0:
            raise ValueError("TrainConfig: keep_checkpoints must be >= 1 and save_every >= 0")
        if self.max_new_tokens < 1 or self.temperature <= 0:
            raise ValueError("TrainConfig: max_new_tokens must be >= 1 and temperature > 0")
        try:
            kwargs = json.loads(self.env_kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"TrainConfig.env_kwargs must be a JSON object, got {self.env_kwargs!r}: {exc}") from exc
        if not isinstance(kwargs, dict):
            raise ValueError(f"TrainConfig.env_kwargs must be a JSON object, got {self.env_kwargs!r}")
        if self.agent.sero and not self.multi_turn:
            raise ValueError(
                f"TrainConfig: agent.sero needs a multi-turn envkit task with an oracle, got {self.task!r}"
            )
        if self.multi_turn:  # the env's registered facts fill what is left unset (AgentConfig.for_env)
            object.__setattr__(self, "agent", self.agent.for_env(self.task))

    @property
    def shape(self) -> RunShape:
        """The run shape explorers and batch collectors read."""
        return RunShape(
            self.task, self.seed, self.prompts_per_step, self.group_size, self.max_new_tokens, self.temperature,
            self.estimator, self.agent,
        )  # fmt: skip

    @property
    def multi_turn(self) -> bool:
        return self.task.startswith("envkit/") and not env_facts(self.task).single_turn


class LocalTrainer:
    """Runs `TrainConfig` (see the module docstring); `train()` returns the logged records."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        torch.set_num_threads(cfg.torch_threads)
        self.run_dir = Path(cfg.run_dir)
        self.model, self.tok = load_model(cfg.model)
        self.device = next(self.model.parameters()).device
        self.task: Any = None if cfg.multi_turn else make_task(cfg.task, json.loads(cfg.env_kwargs))
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
        #: `SingleTurnExplorer` or `AgentExplorer` (`envkit.trainers.local.explorer_drivers.EXPLORERS`), None for plain groups
        self.explorer: SingleTurnExplorer | AgentExplorer | None = make_explorer(
            cfg, self.model, self.tok, self.task, state.get("explorer")
        )
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

    def _reference_model(self, resumed: bool) -> Any:
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
        """Collect, score, compute advantages and update once; returns the step's metrics."""
        cfg = self.cfg
        seed = cfg.seed * 1_000_003 + step
        t0 = time.perf_counter()
        self.model.eval()
        if cfg.multi_turn:
            explorer = cast(AgentExplorer | None, self.explorer)
            batch, metrics = collect_agent_batch(
                self.model, self.tok, cfg.task, cfg.shape, seed=seed, explorer=explorer, step=step
            )
        else:
            batch, metrics = self._single_turn_batch(step, seed)
        t_rollout = time.perf_counter() - t0
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr * min(1.0, step / max(1, cfg.lr_warmup_steps))
        stats = update(self.model, self.optimizer, batch, cfg.loss, self.tok.pad_token_id, self.ref_model)
        metrics.update(stats)
        metrics["lr"] = self.optimizer.param_groups[0]["lr"]
        if self.probe_pairs and (step == 1 or step % cfg.probe_every == 0):  # after this step's update
            metrics.update(probe(self.model, self.tok, self.probe_pairs, system=cfg.agent.system))
        metrics["time_rollout_s"] = t_rollout
        metrics["time_step_s"] = time.perf_counter() - t0
        return metrics

    def _single_turn_batch(self, step: int, seed: int) -> tuple[TrainBatch, dict[str, Any]]:
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, step])
        problems = self.task.sample(rng, cfg.prompts_per_step)
        prompts = [encode_prompt(self.tok, p.prompt, raw=self.task.raw_prompts) for p in problems]
        kw: dict[str, Any] = dict(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=seed)
        if self.explorer is None:
            rollouts: list[Rollout] = collect_plain(
                self.model,
                self.tok,
                self.task,
                problems,
                prompts,
                group_size=cfg.group_size,
                **kw,  # type: ignore[arg-type]
            )
        else:
            rollouts = cast(SingleTurnExplorer, self.explorer).collect(step, problems, prompts, **kw)
        rewards = np.array([r.reward for r in rollouts], dtype=np.float64)
        groups = np.array([r.group for r in rollouts])
        adv = group_advantages(rewards, groups, cfg.estimator)
        for r, a in zip(rollouts, adv.tolist(), strict=True):
            r.advantage = a
        metrics: dict[str, Any] = {"zero_adv_fraction": zero_advantage_fraction(adv, groups)}
        if self.explorer is not None:
            metrics.update(cast(SingleTurnExplorer, self.explorer).postprocess(step, problems, rollouts))
        kept = [r for r in rollouts if r.weight > 0]
        batch = TrainBatch(
            prompts=[r.prompt_ids for r in kept],
            responses=[r.response_ids for r in kept],
            advantages=[[r.advantage] * len(r.response_ids) for r in kept],
            loss_flags=[[1] * len(r.response_ids) for r in kept],
            weights=[r.weight for r in kept],
        )
        metrics.update(
            reward_mean=float(rewards.mean()),
            success_rate=float((rewards >= 1.0).mean()),
            response_length=float(np.mean([len(r.response_ids) for r in rollouts])),
            truncated_share=float(np.mean([r.truncated for r in rollouts])),
            rollouts=len(rollouts),
            rows_in_loss=len(kept),
        )
        return batch, metrics

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
            "explorer": None if self.explorer is None else self.explorer.state_dict(),
            "config": dataclasses.asdict(self.cfg),
        }
        return save_checkpoint(self.run_dir, step, self.model, self.tok, state, keep=self.cfg.keep_checkpoints)


def train(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Build a `LocalTrainer` for `cfg` and run it."""
    return LocalTrainer(cfg).train()
