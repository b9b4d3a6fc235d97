"""`TrainerSeroOptions`: SERO's options in both trainers, the shared `SeroOptions` plus the oracle-row cap.

The cap acts only where oracle rows join a policy batch (the local trainer, ``--agent.sero-opts.*``, and the
OpenRLHF backend, ``--sero-opts.*``), so it lives here and ``envkit-oracle rollout --help`` does not show it.

Example:
    >>> TrainerSeroOptions(max_oracle_share=0.25).max_oracle_rows(12)  # 4 of 16 rows = 25%
    4
"""

from __future__ import annotations

from dataclasses import dataclass

from envkit.credit.sero import SeroOptions

__all__ = ["TrainerSeroOptions"]


@dataclass(frozen=True)
class TrainerSeroOptions(SeroOptions):
    """`SeroOptions` plus what only a trainer reads (docs/methods.md section 4)."""

    # --- how many oracle rows a batch takes ---
    max_oracle_share: float = 0.25
    """Oracle rows are capped at this share of a rollout batch."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.max_oracle_share <= 1.0:
            raise ValueError(f"SERO max_oracle_share must be in [0, 1], got {self.max_oracle_share}")

    def max_oracle_rows(self, n_policy_rows: int) -> int:
        """Most oracle rows a batch of `n_policy_rows` policy rows may add so they stay <= max_oracle_share of it."""
        if self.max_oracle_share >= 1.0:
            return n_policy_rows * self.roots_per_group
        return int(self.max_oracle_share * n_policy_rows / (1.0 - self.max_oracle_share) + 1e-9)
