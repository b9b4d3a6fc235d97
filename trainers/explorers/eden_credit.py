"""EDEN's credit (docs/methods.md section 5): which noisy rows stay in the loss and how much of their advantage
they keep. Pure numpy; the one composition both trainers call.

    select_noisy(advantages (N,), noisy_mask (N,), top_p) -> keep (N,) bool    batch-wide top-p |A| of noisy rows
    absorb(advantages, noisy_mask, keep, gamma) -> (advantages (N,), loss_mask (N,) bool)
    eden_advantages(rewards, group_ids, noisy_mask, config) -> EdenResult  normalise over the mixed group + absorb
    eden_turn_credit(turn_advantages, noisy_mask, success, config) -> EdenTurnResult   per-turn estimators: rank
                   each row by mean |turn advantage|, select + absorb (both trainers' one composition)
    kept_share(keep, noisy_mask) -> float                                  share of noisy rows kept in the loss
    noisy_stats(keep, noisy_mask, success) -> dict                         the eden_* diagnostics of a batch
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from envkit.credit.advantages import group_advantages, zero_advantage_fraction
from envkit.trainers.explorers.eden_config import EdenConfig

__all__ = [
    "EdenResult",
    "EdenTurnResult",
    "absorb",
    "eden_advantages",
    "eden_turn_credit",
    "kept_share",
    "noisy_stats",
    "select_noisy",
]


def select_noisy(advantages: ArrayLike, noisy: ArrayLike, top_p: float) -> np.ndarray:
    """Batch-wide selection: keep the ``ceil(top_p * M)`` noisy rows with the largest |A| (M = noisy rows).

    Ties break by row order. Standard rows are always kept.

    Args:
        advantages: (N,) advantages over the mixed groups.
        noisy: (N,) bool noisy-row mask.
        top_p: Share of noisy rows kept, in (0, 1].

    Returns:
        (N,) bool keep mask.
    """
    a = np.asarray(advantages, dtype=np.float64)
    m = np.asarray(noisy, dtype=bool)
    if a.shape != m.shape or a.ndim != 1:
        raise ValueError(f"advantages and noisy mask must both be (N,), got {a.shape} and {m.shape}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    keep = ~m
    noisy_idx = np.flatnonzero(m)
    n_keep = math.ceil(top_p * len(noisy_idx) - 1e-9)
    order = noisy_idx[np.argsort(-np.abs(a[noisy_idx]), kind="stable")]
    keep[order[:n_keep]] = True
    return keep


def absorb(advantages: ArrayLike, noisy: ArrayLike, keep: ArrayLike, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Kept noisy rows get ``gamma * A``; dropped noisy rows get A = 0 and leave the loss; standard rows unchanged.

    Returns:
        (advantages (N,) float64, loss_mask (N,) bool).
    """
    a = np.asarray(advantages, dtype=np.float64)
    m = np.asarray(noisy, dtype=bool)
    k = np.asarray(keep, dtype=bool)
    if not (a.shape == m.shape == k.shape) or a.ndim != 1:
        raise ValueError(f"advantages, noisy and keep must all be (N,), got {a.shape}, {m.shape}, {k.shape}")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    loss_mask = ~m | k
    out = np.where(m, np.where(k, gamma * a, 0.0), a)
    return out, loss_mask


@dataclass(frozen=True, eq=False)
class EdenResult:
    """Advantages of one EDEN batch and its diagnostics (docs/methods.md section 7).

    Attributes:
        advantages: (N,) after absorb (dropped noisy rows are 0).
        loss_mask: (N,) bool rows that enter the loss.
        raw_advantages: (N,) normalised over the mixed groups, before absorb.
        stats: ``eden_noisy_kept_share``, ``eden_noisy_success_rate``, ``eden_standard_success_rate``,
            ``zero_adv_fraction`` (over the mixed groups before absorb).
    """

    advantages: np.ndarray
    loss_mask: np.ndarray
    raw_advantages: np.ndarray
    stats: dict[str, float]


def eden_advantages(
    rewards: ArrayLike,
    group_ids: Sequence[Hashable] | np.ndarray,
    noisy: ArrayLike,
    config: EdenConfig,
    estimator: str = "grpo",
) -> EdenResult:
    """Normalise binary rewards over each mixed group (standard + noisy), then `select_noisy` and `absorb`.

    Args:
        rewards: (N,) rewards.
        group_ids: (N,) prompt id of each row (any hashable).
        noisy: (N,) bool noisy-row mask.
        config: Uses top_p and gamma.
        estimator: Group baseline (``envkit.credit.advantages.group_advantages``), "grpo" by default.
    """
    r = np.asarray(rewards, dtype=np.float64)
    m = np.asarray(noisy, dtype=bool)
    raw = group_advantages(r, group_ids, estimator)  # type: ignore[arg-type]
    keep = select_noisy(raw, m, config.top_p)
    adv, loss_mask = absorb(raw, m, keep, config.gamma)
    stats = {**noisy_stats(keep, m, r > 0), "zero_adv_fraction": zero_advantage_fraction(raw, group_ids)}
    return EdenResult(adv, loss_mask, raw, stats)


def kept_share(keep: ArrayLike, noisy: ArrayLike) -> float:
    """Share of the noisy rows that stay in the loss (``eden_noisy_kept_share``; 0 without noisy rows)."""
    m = np.asarray(noisy, dtype=bool)
    n_noisy = int(m.sum())
    return float((np.asarray(keep, dtype=bool) & m).sum() / n_noisy) if n_noisy else 0.0


def noisy_stats(keep: ArrayLike, noisy: ArrayLike, success: ArrayLike) -> dict[str, float]:
    """EDEN's per-batch diagnostics (docs/metrics.md): `kept_share` and the success rates of the noisy and the
    standard rows."""
    m = np.asarray(noisy, dtype=bool)
    ok = np.asarray(success, dtype=bool)
    return {
        "eden_noisy_kept_share": kept_share(keep, m),
        "eden_noisy_success_rate": float(ok[m].mean()) if m.any() else 0.0,
        "eden_standard_success_rate": float(ok[~m].mean()) if (~m).any() else 0.0,
    }


@dataclass(frozen=True, eq=False)
class EdenTurnResult:
    """EDEN's credit on per-turn advantages (`eden_turn_credit`).

    Attributes:
        per_turn: Per row, its turn advantages scaled by absorb (kept noisy rows x gamma, dropped ones 0).
        loss_mask: (N,) bool rows that enter the loss.
        stats: `noisy_stats`.
    """

    per_turn: list[np.ndarray]
    loss_mask: np.ndarray
    stats: dict[str, float]


def eden_turn_credit(
    turn_advantages: Sequence[ArrayLike], noisy: ArrayLike, success: ArrayLike, config: EdenConfig
) -> EdenTurnResult:
    """EDEN on a per-turn estimator's output (GiGPO, GraphGPO, SERO): each row ranked by its mean |turn
    advantage| (`select_noisy`, 0 for a row without turns), then `absorb` scales every turn of a row.

    The one composition both trainers call (the local `AgentEdenDriver.postprocess`, OpenRLHF's EDEN explorer).

    Args:
        turn_advantages: Per row, (J,) turn advantages.
        noisy: (N,) bool noisy-row mask.
        success: (N,) bool per row (the diagnostics' success rates).
        config: Uses top_p and gamma.
    """
    m = np.asarray(noisy, dtype=bool)
    rows = [np.asarray(a, dtype=np.float64) for a in turn_advantages]
    row_abs = np.array([float(np.mean(np.abs(a))) if a.size else 0.0 for a in rows])
    keep = select_noisy(row_abs, m, config.top_p)
    scale, loss_mask = absorb(np.ones(len(m)), m, keep, config.gamma)
    per_turn = [a * scale[i] for i, a in enumerate(rows)]
    return EdenTurnResult(per_turn, loss_mask, noisy_stats(keep, m, success))
