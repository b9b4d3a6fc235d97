"""The local trainer's option dataclasses that need no torch: `AgentConfig` (multi-turn) and `LossConfig` (the
update). `envkit.trainers.local.config.TrainConfig` is built of them, so ``envkit-train local --help`` parses and
prints every option without importing torch or transformers (they load when a run starts). Re-exported from
`envkit.trainers.local.multi_turn` and `envkit.trainers.local.update`, where they are used.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.defaults import TERMINAL_REWARD
from envkit.credit.sero import widen_options
from envkit.env_settings import LOCAL_NAMES, check_sero_estimator, resolve_env_settings
from envkit.fleet.config import FleetConfig
from envkit.trainers.sero_options import TrainerSeroOptions

__all__ = ["AgentConfig", "LossConfig"]


@dataclass(frozen=True)
class AgentConfig:
    """Multi-turn settings (docs/methods.md section 2 defaults)."""

    # --- credit ---
    estimator: Literal["gigpo", "graphgpo", "grpo", "grpo_mean", "rloo", "dr_grpo"] = "gigpo"
    """``gigpo``, ``graphgpo``, or an episode-level ``grpo`` / ``grpo_mean`` / ``rloo`` / ``dr_grpo``."""
    # --- episode and context ---
    max_turns: int | None = None
    """Turn cap of the trainer (the env's own step limit applies too). None (default): with SERO on the env's
    ``EnvEntry.horizon`` (WebShop 15, ALFWorld 50: roots need budget left), else 8. `for_env` fills it in (the
    trainer does); with SERO on it must be at least the root budget (the env's ``EnvEntry.min_root_budget`` unless
    ``sero_opts.min_budget`` is set)."""
    max_context_tokens: int = 1024
    """Token cap of an episode's whole context; beyond it the episode stops (counted)."""
    adv: AdvantageOptions = field(default_factory=lambda: AdvantageOptions(terminal_reward=TERMINAL_REWARD))
    """GiGPO / GraphGPO settings (`envkit.credit.advantage_options.AdvantageOptions`, shared with the OpenRLHF backend's
    ``--adv``); ``adv.terminal_reward`` (10 here: GiGPO's 10 * success) is the reward of a successful episode's last
    step, other steps get 0; ``adv.gamma_g`` None (default): the env's ``EnvEntry.gamma_g`` (`for_env`)."""
    # --- prompt ---
    system: str | None = None
    """Optional system message."""
    # --- SERO ---
    sero: bool = False
    """SERO oracle continuations (`envkit.trainers.local.sero`; needs ``estimator="graphgpo"`` and an oracle for the
    env: ``EnvEntry.oracle``)."""
    sero_opts: TrainerSeroOptions = field(default_factory=TrainerSeroOptions)
    """SERO settings (`envkit.trainers.sero_options.TrainerSeroOptions`: roots per group, a root's minimum budget,
    reachability weight, oracle share cap; a plain `SeroOptions` gets the trainer defaults)."""
    sero_rows: Literal["credit", "supervised"] = "credit"
    """What SERO's oracle continuations become: ``credit`` (default, SERO): state-rooted GraphGPO credit, the
    policy rows re-ranked through the distances the rescues reveal, oracle actions weighted by reachability;
    ``supervised`` (a control, issue 32): the same roots and continuations as plain supervised rows (every oracle
    action's advantage `envkit.trainers.local.sero.SUPERVISED_ADVANTAGE`, weight 1) while the policy rows keep
    plain GraphGPO's credit: "more oracle data" without SERO's credit."""
    # --- where the envs run ---
    fleet: FleetConfig | None = None
    """Play the episodes in envs of a Ray env fleet (`envkit.fleet`, docs/fleet.md) instead of this process; SERO's
    restores and branching's forks run on the actor holding the snapshot. The maths are the same."""
    retries: int = 0
    """Times an episode whose env was lost mid-way (its fleet actor or node died, its session was released) is
    played again from reset in the same step; 0 (default): it is dropped from the update (its group credits the
    others) and counted in the step's ``episodes_lost`` metric. Either way the step completes."""
    # --- speed ---
    reuse_kv_cache: bool = True
    """Keep each live episode's KV cache between turns (`envkit.trainers.local.turn_cache`), so a turn feeds only the
    new observation instead of prefilling the whole context again."""

    def __post_init__(self) -> None:
        if (self.max_turns is not None and self.max_turns < 1) or self.max_context_tokens < 8:
            raise ValueError("AgentConfig: max_turns must be >= 1 and max_context_tokens >= 8")
        if self.retries < 0:
            raise ValueError(f"AgentConfig: retries must be >= 0 (0: lost episodes are dropped), got {self.retries}")
        if self.sero_rows not in ("credit", "supervised"):
            raise ValueError(f"AgentConfig: sero_rows must be 'credit' or 'supervised', got {self.sero_rows!r}")
        check_sero_estimator(self.sero, self.estimator, LOCAL_NAMES)
        if self.adv.terminal_reward is None:
            raise ValueError(
                "AgentConfig: the local trainer rewards success only (terminal_reward * success on the last step); "
                "set agent.adv.terminal_reward (default 10)"
            )
        object.__setattr__(self, "sero_opts", widen_options(self.sero_opts, TrainerSeroOptions, "agent.sero_opts"))

    def for_env(self, env_id: str) -> AgentConfig:
        """These settings with the env's registered facts filled in by the shared resolver
        (`envkit.env_settings.resolve_env_settings`, also OpenRLHF's and the oracle pipeline's): ``max_turns``
        (None: the env's horizon with SERO on, else 8), ``adv.gamma_g`` (None: the env's) and SERO's root budget
        (``sero_opts.min_budget`` None: the env's). The trainer calls it once (`TrainConfig`).

        Raises:
            ValueError: SERO is on and ``max_turns`` leaves no state with the root budget.
        """
        s = resolve_env_settings(
            env_id, names=LOCAL_NAMES, horizon=self.max_turns, root_budget=self.sero_opts.min_budget,
            gamma_g=self.adv.gamma_g, terminal_reward=self.adv.terminal_reward, sero=self.sero,
            estimator=self.estimator, unset_horizon=8,
        )  # fmt: skip
        return dataclasses.replace(
            self,
            max_turns=s.horizon,
            adv=dataclasses.replace(self.adv, gamma_g=s.gamma_g, terminal_reward=s.terminal_reward),
            sero_opts=dataclasses.replace(self.sero_opts, min_budget=s.root_budget),
        )


@dataclass(frozen=True)
class LossConfig:
    """Loss settings (docs/methods.md section 1): the one owner of the update's clip range, KL and entropy bonus,
    for every explorer (EDEN's update reads them here)."""

    # --- clipped objective ---
    eps_low: float = 0.2
    """Lower clip range."""
    eps_high: float = 0.2
    """Upper clip range (> eps_low: clip-higher)."""
    agg: str = "token_mean"
    """``token_mean``, ``seq_mean`` or ``token_sum_norm`` (Dr. GRPO)."""
    # --- KL loss ---
    kl_coef: float = 0.0
    """beta of the KL-loss against the reference model (0: no reference model is loaded)."""
    kl_estimator: str = "k3"
    """``k1``, ``k2`` or ``k3``."""
    # --- entropy bonus ---
    entropy_coef: float = 0.0
    """alpha of the entropy bonus."""
    # --- passes and memory ---
    ppo_epochs: int = 1
    """Passes over each batch (1: on-policy, ratio = 1)."""
    micro_batch: int = 64
    """Rows per forward/backward pass at most (memory knob; results do not depend on it)."""
    micro_batch_tokens: int = 16384
    """Padded tokens (rows x longest row) per forward/backward pass at most; a longer row gets a pass of its own. Bounds
    the [rows, tokens, vocab] logits of long multi-turn rows."""
    # --- clipping of the gradient and of negative-advantage losses ---
    max_grad_norm: float = 1.0
    """Gradient clipping (0: off)."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 bounding a negative-advantage token's loss by ``-c * A`` (3 in verl/OpenRLHF); None
    (default) turns it off."""

    def __post_init__(self) -> None:
        if self.agg not in ("token_mean", "seq_mean", "token_sum_norm"):
            raise ValueError(f"LossConfig.agg must be token_mean, seq_mean or token_sum_norm, got {self.agg!r}")
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise ValueError(f"LossConfig.kl_estimator must be k1, k2 or k3, got {self.kl_estimator!r}")
        if self.ppo_epochs < 1 or self.micro_batch < 1 or self.micro_batch_tokens < 1:
            raise ValueError("LossConfig.ppo_epochs, micro_batch and micro_batch_tokens must be >= 1")
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            raise ValueError(f"LossConfig.dual_clip must be > 1 (e.g. 3) or None (off), got {self.dual_clip}")
