"""`TrainerSeroOptions`: SERO's options in both trainers, the shared `SeroOptions` plus the oracle-row cap.

The cap acts only where oracle rows join a policy batch (the local trainer, ``--agent.sero-opts.*``, and the
OpenRLHF backend, ``--sero-opts.*``), so it lives here and ``envkit-oracle rollout --help`` does not show it.

``max_oracle_share`` means one thing in both (docs/methods.md section 4.6, "oracle rows are capped at 25% of a
batch"): oracle rows are at most that share of the rows the update sees. The trainers differ only in how oracle
rows join (the local trainer adds them; OpenRLHF replaces failed rollouts, its batch keeps its size), which
`oracle_row_cap` takes as an argument.

Example:
    >>> TrainerSeroOptions(max_oracle_share=0.25).max_oracle_rows(12)  # 4 added to 12: 4 of 16 rows = 25%
    4
    >>> oracle_row_cap(0.25, 8, replace=True)  # 2 of 8 replaced: 2 of 8 rows = 25%
    2
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from envkit.credit.sero import SeroOptions

__all__ = ["TrainerSeroOptions", "oracle_row_cap"]


def oracle_row_cap(share: float, rows: int, *, replace: bool) -> int:
    """Most oracle rows that keep them at most `share` of the rows the update sees.

    Args:
        share: ``max_oracle_share`` in [0, 1].
        rows: Policy rows before any oracle row joins (the local trainer: the step's episodes; OpenRLHF: the
            group's rollouts).
        replace: Each oracle row replaces a policy row (OpenRLHF: the update sees `rows` rows, so
            ``k <= share * rows``); False: it is added (the local trainer: ``k <= share * (rows + k)``, i.e.
            ``k <= share * rows / (1 - share)``; no cap at share 1).
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"SERO max_oracle_share must be in [0, 1], got {share}")
    if replace:
        return math.floor(share * rows + 1e-9)
    if share >= 1.0:
        return sys.maxsize
    return math.floor(share * rows / (1.0 - share) + 1e-9)


@dataclass(frozen=True)
class TrainerSeroOptions(SeroOptions):
    """`SeroOptions` plus what only a trainer reads (docs/methods.md section 4)."""

    # --- how many oracle rows a batch takes ---
    max_oracle_share: float = 0.25
    """Oracle rows are at most this share of the rows the update sees (`oracle_row_cap`; the local trainer adds
    them to its batch, OpenRLHF replaces failed rollouts of a group with them)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.max_oracle_share <= 1.0:
            raise ValueError(f"SERO max_oracle_share must be in [0, 1], got {self.max_oracle_share}")

    def max_oracle_rows(self, n_policy_rows: int, *, replace: bool = False) -> int:
        """Most oracle rows for `n_policy_rows` policy rows: `oracle_row_cap` of ``max_oracle_share``."""
        return oracle_row_cap(self.max_oracle_share, n_policy_rows, replace=replace)
