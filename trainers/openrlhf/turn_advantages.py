"""Per-turn advantages of one OpenRLHF rollout batch, from envkit's backend-agnostic maths (torch-free).

The experience maker flattens OpenRLHF's micro-batches into `SampleRow`s (one per rollout) and calls
`compute_turn_advantages`, which picks the estimator (``envkit.credit.advantages``), lets the run's explorer
post-process its values (`envkit.trainers.openrlhf.explorers`: EDEN's select + absorb, XRPO's sharpening,
branching's leave-one-out term) and adds SERO's weights (carried by the records' turns), and returns, per row, one advantage and one loss weight per turn plus a keep flag.
`envkit.trainers.openrlhf.experience` then spreads them over the tokens.

Turn tables come from `envkit.trainers.openrlhf.turn_paths.turn_table` (the one builder every backend uses,
`envkit.credit.step_table.StepTable.from_paths`). Groups are the records' ``spec.group`` (variable sizes: XRPO); a row without a record (OpenRLHF's own samples)
falls back to OpenRLHF's layout, ``index // n_samples_per_prompt``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from envkit.credit.advantages import zero_advantage_fraction
from envkit.credit.turn_credit import turn_credit
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.explorers.base import Explorer, TurnCredit
from envkit.trainers.openrlhf.explorers.registry import make_explorer
from envkit.trainers.openrlhf.sero_turns import sero_turn_advantages
from envkit.trainers.openrlhf.turn_paths import SampleRow, turn_table, turns_state_key

__all__ = ["SampleRow", "TurnAdvantages", "compute_turn_advantages"]


@dataclass(frozen=True, eq=False)
class TurnAdvantages:
    """Result of `compute_turn_advantages`.

    Attributes:
        per_turn: Per row, (J,) advantages of its J turns ((1,) for a row without turns: the whole response).
        weights: Per row, (J,) SERO loss weights (1 for policy turns), applied to the final per-token
            advantages by the experience maker (EDEN's gamma is already in ``per_turn``).
        keep: (N,) bool rows that stay in the loss (EDEN drops unselected noisy rollouts).
        stats: Batch diagnostics (docs/methods.md section 7), floats.
    """

    per_turn: list[np.ndarray]
    weights: list[np.ndarray]
    keep: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


def compute_turn_advantages(
    rows: Sequence[SampleRow], cfg: BackendConfig, step: int = 0, explorer: Explorer | None = None
) -> TurnAdvantages:
    """Advantages per row and turn for one rollout batch.

    Args:
        rows: The batch's rollouts (any order).
        cfg: The backend config (estimator, options).
        step: Training step.
        explorer: The run's explorer (its credit hooks); None: built from ``cfg`` (`make_explorer`).

    Returns:
        `TurnAdvantages`.
    """
    explorer = explorer if explorer is not None else make_explorer(cfg)
    n = len(rows)
    groups = [r.group(cfg.n_samples_per_prompt) for r in rows]
    turn_counts = [max(len(r.turns), 1) for r in rows]
    stats: dict[str, float] = {}
    keep = np.ones(n, dtype=bool)

    # 1. The estimator: one value per row (grpo) or per turn (gigpo / graphgpo), then the explorer's credit.
    per_turn: list[np.ndarray]
    sero_weights: list[np.ndarray] | None = None
    if cfg.sero and cfg.advantage == "graphgpo" and any(r.turns for r in rows):
        per_turn, sero_weights, sero_stats = sero_turn_advantages(rows, groups, cfg)
        stats.update(sero_stats)
        stats[f"state_key_{turns_state_key(rows, cfg, policy_only=True)}"] = 1.0
    elif cfg.advantage == "grpo" or not any(r.turns for r in rows):
        row = explorer.row_credit(rows, groups)  # EDEN's select + absorb, XRPO's sharpening
        keep = row.keep
        stats.update(row.stats)
        per_turn = [np.full(turn_counts[i], row.advantages[i]) for i in range(n)]
    else:
        table, owner = turn_table(rows, groups, cfg)
        stats[f"state_key_{turns_state_key(rows, cfg)}"] = 1.0
        adv = turn_credit(table, cfg.advantage, cfg.credit_options).advantages
        per_turn = [np.zeros(turn_counts[i]) for i in range(n)]
        pos = [0] * n
        for t, i in enumerate(owner):
            per_turn[i][pos[i]] = adv[t]
            pos[i] += 1
    per_turn_estimator = cfg.advantage != "grpo" and any(r.turns for r in rows)
    # EDEN's select + absorb after a per-turn estimator (SERO too), branching's leave-one-out term
    done = explorer.turn_credit(rows, groups, TurnCredit(per_turn, keep), per_turn_estimator)
    per_turn, keep = done.per_turn, done.keep
    stats.update(done.stats)

    # 2. SERO: reachability weights of oracle turns (policy turns weigh 1).
    weights = sero_weights or [np.array([t.weight for t in r.turns]) if r.turns else np.ones(1) for r in rows]
    oracle = np.array([bool(r.record is not None and r.record.oracle) for r in rows])
    # EDEN reports it over the mixed groups before absorb (the paper's measure); otherwise over the final values
    stats.setdefault(
        "zero_adv_fraction", zero_advantage_fraction(np.array([float(np.max(np.abs(p))) for p in per_turn]), groups)
    )
    stats["success_rate"] = float(np.mean([r.success for r in rows])) if n else 0.0
    stats["truncated_episode_share"] = (
        float(np.mean([bool(r.record and r.record.truncated) for r in rows])) if n else 0.0
    )
    if cfg.sero:
        w_oracle = np.array([w for i in range(n) for w, t in zip(weights[i], rows[i].turns) if t.oracle])
        stats["sero_oracle_share"] = float(oracle.mean()) if n else 0.0
        stats["sero_weight_mean"] = float(w_oracle.mean()) if len(w_oracle) else 0.0
    stats.update(explorer.metrics(rows, groups, keep))
    return TurnAdvantages(per_turn, weights, keep, stats)
