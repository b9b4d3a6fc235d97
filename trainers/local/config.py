"""The local trainer's run config (`TrainConfig`): the one owner of the run's sizes (prompts, group size, token
caps, temperature); explorers and batch sources read them from it (`envkit.trainers.local.contracts.Budget`).

It imports only config types, so the explorers, the batch sources and the trainer can all take it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from envkit.registration import env_facts
from envkit.runtime.models import ModelConfig
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.explorers.eden import EdenBankConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.local.options import AgentConfig, LossConfig

__all__ = ["TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything a local training run needs."""

    # --- what is trained ---
    task: str = "arith"
    """``arith`` / ``arith:<digits>`` (synthetic, verified in-process), a single-turn envkit id (``envkit/Math-v0``,
    ``envkit/Code-v0``: the env's verifier) or a multi-turn envkit id (``envkit/Toy-v0``, ``envkit/WebShop-v0``,
    ``envkit/ALFWorld-v0``)."""
    env_kwargs: str = "{}"
    """JSON object of keyword arguments for the env (e.g. ``{"rg_tasks": ["products"]}``)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Which model (see `envkit.runtime.models`)."""
    run_dir: str = "runs/local"
    """Output folder (metrics.jsonl, tb/, checkpoints/, curves.png)."""
    # --- run size (the one owner of the sizes) ---
    steps: int = 20
    """RL steps (the run's last step number; a resumed run continues up to it)."""
    seed: int = 0
    """Seed of prompt sampling, rollouts and EDEN noise."""
    prompts_per_step: int = 16
    """Prompts (single-turn) or tasks (multi-turn) per step."""
    group_size: int = 8
    """Rollouts (single-turn) or episodes (multi-turn) per prompt (G), for every explorer: EDEN's and XRPO's group is
    this one (their configs have no group size of their own); explorers keep the same total budget,
    ``prompts_per_step * group_size``."""
    max_new_tokens: int = 6
    """Response (single-turn) or per-turn action (multi-turn) token cap."""
    temperature: float = 1.0
    """Sampling temperature of standard rollouts."""
    # --- method ---
    estimator: Literal["grpo", "grpo_mean", "rloo", "dr_grpo"] = "grpo"
    """``grpo``, ``grpo_mean``, ``rloo`` or ``dr_grpo`` (single-turn); multi-turn uses `agent.estimator`."""
    explorer: Literal["none", "eden", "xrpo", "branch"] = "none"
    """``none`` (plain groups), ``eden`` or ``xrpo``; on agent envs EDEN perturbs the first turn
    (`envkit.trainers.local.explorers.eden`) and XRPO allocates whole episodes
    (`envkit.trainers.local.explorers.xrpo`); ``branch`` (agent envs) forks the policy at high-entropy decisions
    (`envkit.trainers.local.explorers.branch`)."""
    # --- optimiser ---
    lr: float = 1e-3
    """AdamW learning rate."""
    lr_warmup_steps: int = 10
    """Linear learning-rate warm-up over the first RL steps (Adam's first steps are large)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    # --- method settings ---
    loss: LossConfig = field(default_factory=LossConfig)
    """Clipping, aggregation, KL and entropy settings."""
    eden: EdenBankConfig = field(default_factory=EdenBankConfig)
    """EDEN settings (used when explorer is eden)."""
    xrpo: XrpoConfig = field(default_factory=XrpoConfig)
    """XRPO settings (used when explorer is xrpo)."""
    branch: BranchConfig = field(default_factory=BranchConfig)
    """Branching-rollout settings (explorer ``branch``, agent envs only: `envkit.trainers.local.explorers.branch`)."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Multi-turn settings."""
    # --- supervised warm-up ---
    sft_steps: int = 0
    """Supervised warm-up steps before RL (tasks with reference answers only)."""
    sft_batch: int = 64
    """Warm-up batch size."""
    sft_lr: float = 3e-3
    """Warm-up learning rate."""
    # --- checkpoints ---
    init_from: str | None = None
    """A checkpoint or model folder whose weights start the run (branch arms from one warm-up)."""
    save_every: int = 0
    """Checkpoint every N steps (0: only at the end)."""
    keep_checkpoints: int = 1
    """Checkpoints kept on disk (the newest N; older ones are deleted as new ones land). One checkpoint is the fp32
    weights plus AdamW's two moments: about 3x the model (SmolLM2-135M: ~1.6 GB)."""
    resume: bool = False
    """Continue from the latest checkpoint in run_dir."""
    # --- output and machine ---
    tensorboard: bool = True
    """Also log to TensorBoard."""
    plot: bool = True
    """Write curves.png at the end."""
    torch_threads: int = 1
    """torch intra-op threads (1 is fastest on a busy 2-core CPU)."""
    progress: bool = True
    """Show a progress bar."""
    # --- probe ---
    probe_tasks: int = 0
    """Multi-turn envs with an oracle: probe the policy's p(correct action) on the oracle's path of task seeds 0 ..
    probe_tasks-1 (`envkit.trainers.local.probe`: WebShop's oracle path, ALFWorld's expert plan) and log
    ``probe_p_correct`` / ``probe_p_last``; 0 (default) is off."""
    probe_every: int = 1
    """Probe every N steps (and at step 1)."""

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
    def multi_turn(self) -> bool:
        return self.task.startswith("envkit/") and not env_facts(self.task).single_turn
