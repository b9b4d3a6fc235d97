"""SERO options shared by the local trainer (``--agent.sero.*``) and the OpenRLHF backend (``--sero-opt K=V``)."""

from __future__ import annotations

from dataclasses import dataclass


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

    roots_per_group: int = 2
    p_floor: float = 0.05
    tau_w: float = 1.0
    w_min: float = 0.05
    max_oracle_share: float = 0.25
    oracle_max_steps: int = 30

    def __post_init__(self) -> None:
        from trainers.reachability import reachability_weights

        if self.roots_per_group < 0:
            raise ValueError(f"SERO option roots_per_group={self.roots_per_group}: must be >= 0")
        if not 0.0 <= self.max_oracle_share <= 1.0:
            raise ValueError(f"SERO option max_oracle_share={self.max_oracle_share}: must be in [0, 1]")
        if self.oracle_max_steps < 1:
            raise ValueError(f"SERO option oracle_max_steps={self.oracle_max_steps}: must be >= 1")
        reachability_weights([], self.p_floor, self.tau_w, self.w_min)  # validates the three weight settings

    def max_oracle_rows(self, n_policy_rows: int) -> int:
        """Most oracle rows a batch of `n_policy_rows` policy rows may add so they stay <= max_oracle_share of it."""
        if self.max_oracle_share >= 1.0:
            return n_policy_rows * self.roots_per_group
        return int(self.max_oracle_share * n_policy_rows / (1.0 - self.max_oracle_share) + 1e-9)
