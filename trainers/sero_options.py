"""SERO options shared by the local trainer (``--agent.sero.*``) and the OpenRLHF backend (``--sero-opt K=V``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envkit.credit.defaults import P_FLOOR, TAU_W, W_MIN
from envkit.credit.sero import SeroConfig


@dataclass(frozen=True)
class SeroOptions:
    """Options of SERO's oracle continuations (docs/methods.md section 4).

    Attributes:
        roots_per_group: At most this many roots (restored states) per task group (0 turns SERO off).
        p_floor: Per-step likelihood floor of the reachability weight.
        tau_w: Temperature of the reachability weight.
        w_min: Lower clip of the reachability weight.
        max_oracle_share: Oracle rows are capped at this share of a rollout batch.
        oracle_max_steps: Step budget of one oracle continuation where the run sets no turn cap (OpenRLHF
            without ``--max-turns``); the local trainer's horizon is ``agent.max_turns``.
    """

    roots_per_group: int = SeroConfig.roots_per_group
    p_floor: float = P_FLOOR
    tau_w: float = TAU_W
    w_min: float = W_MIN
    max_oracle_share: float = 0.25
    oracle_max_steps: int = 30

    def __post_init__(self) -> None:
        from envkit.credit.reachability import reachability_weights

        if self.roots_per_group < 0:
            raise ValueError(f"SERO option roots_per_group={self.roots_per_group}: must be >= 0")
        if not 0.0 <= self.max_oracle_share <= 1.0:
            raise ValueError(f"SERO option max_oracle_share={self.max_oracle_share}: must be in [0, 1]")
        if self.oracle_max_steps < 1:
            raise ValueError(f"SERO option oracle_max_steps={self.oracle_max_steps}: must be >= 1")
        reachability_weights([], self.p_floor, self.tau_w, self.w_min)  # validates the three weight settings

    def sero_config(self, horizon: int, **credit: Any) -> SeroConfig:
        """The `envkit.credit.sero.SeroConfig` for a run with this turn `horizon` (the only place the trainers copy
        these options into it); ``credit``: further SeroConfig fields (``gamma_g``, ``terminal_reward``)."""
        return SeroConfig(
            roots_per_group=self.roots_per_group, horizon=horizon, p_floor=self.p_floor, tau_w=self.tau_w,
            w_min=self.w_min, **credit,
        )  # fmt: skip

    def max_oracle_rows(self, n_policy_rows: int) -> int:
        """Most oracle rows a batch of `n_policy_rows` policy rows may add so they stay <= max_oracle_share of it."""
        if self.max_oracle_share >= 1.0:
            return n_policy_rows * self.roots_per_group
        return int(self.max_oracle_share * n_policy_rows / (1.0 - self.max_oracle_share) + 1e-9)
