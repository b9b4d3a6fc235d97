"""EDEN's noisy rows (docs/methods.md section 5): the anchor bank, the anchored perturbation, which rows are noisy
and at which temperature they sample. Pure numpy; both trainers call it.

    build_anchor_bank(embeddings (V, d), vocab, score_fn, config, rng) -> AnchorBank     (see explorers.anchors)
    noisy_mask(n_prompts, group_size, n_noisy) -> (P * G,) bool            the last n_noisy rows of each group
    perturb(anchor (d,), n, rho, rng) -> (n, d)    e~ = e_b + rho * ||e_b|| * eps / sqrt(d), eps ~ N(0, I)
    draw_noisy_rows(bank, n_prompts, config, rng) -> NoisyDraw    per-prompt anchor (shared), per-rollout noise
    noisy_temperature(step, tau_start, tau_end, warmup_steps) -> float     cosine warm-up of tau_n(s)
    row_temperatures(n_prompts, group_size, config, step) -> (P * G,)      tau_r for standard rows, tau_n(s) noisy
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from envkit.trainers.explorers.anchors import AnchorBank, AnchorScore, candidate_tokens, select_anchors
from envkit.trainers.explorers.eden_config import EdenBankConfig, EdenConfig

__all__ = [
    "NoisyDraw",
    "build_anchor_bank",
    "draw_noisy_rows",
    "noisy_mask",
    "noisy_temperature",
    "perturb",
    "row_temperatures",
]

#: `build_anchor_bank`'s default settings (a frozen value).
DEFAULT_BANK = EdenBankConfig()


def build_anchor_bank(
    embeddings: np.ndarray,
    vocab: Sequence[str],
    score_fn: Callable[[int], AnchorScore],
    config: EdenBankConfig = DEFAULT_BANK,
    rng: np.random.Generator | None = None,
) -> AnchorBank:
    """Candidates from the model's input embeddings, then greedy complementary selection (explorers.anchors).

    Args:
        embeddings: (V, d) input-embedding matrix of the policy.
        vocab: Decoded text of each token id (``anchors.decoded_vocab(tokenizer)``).
        score_fn: Measures one candidate token on ``config.n_selection_prompts`` training prompts.
        config: EDEN settings (n_anchors, candidate_percentiles, max_cos, max_scored, min_validity).
        rng: Generator for the candidate subsample.
    """
    cands = candidate_tokens(embeddings, vocab, config.candidate_percentiles)
    return select_anchors(
        embeddings, cands, score_fn, k=config.n_anchors, max_cos=config.max_cos, max_scored=config.max_scored,
        min_validity=config.min_validity, rng=rng,
    )  # fmt: skip


def noisy_mask(n_prompts: int, group_size: int, n_noisy: int) -> np.ndarray:
    """(P * G,) bool: rows ``p * G + j`` with ``j >= G - n_noisy`` are noisy (prompt-major layout)."""
    if not 0 <= n_noisy <= group_size:
        raise ValueError(f"n_noisy must be in [0, group_size], got {n_noisy} of {group_size}")
    one = np.zeros(group_size, dtype=bool)
    one[group_size - n_noisy :] = True
    return np.tile(one, n_prompts)


def perturb(anchor: ArrayLike, n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    """n independent perturbations of one anchor: ``e~ = e_b + rho * ||e_b||_2 * eps / sqrt(d)``, eps ~ N(0, I).

    Args:
        anchor: (d,) anchor embedding e_b.
        n: Number of rows.
        rho: Relative noise norm (E||e~ - e_b|| ~ rho * ||e_b||).
        rng: numpy Generator.

    Returns:
        (n, d) float64 rows.
    """
    e_b = np.asarray(anchor, dtype=np.float64)
    if e_b.ndim != 1:
        raise ValueError(f"anchor must be a (d,) vector, got shape {e_b.shape}")
    d = e_b.shape[0]
    eps = rng.standard_normal((n, d))
    return e_b[None, :] + rho * float(np.linalg.norm(e_b)) * eps / math.sqrt(d)


@dataclass(frozen=True, eq=False)
class NoisyDraw:
    """The extra input rows of one step's noisy rollouts.

    Attributes:
        anchor_index: (P, K_n) bank index behind each row (-1 under "no_anchor").
        rows: (P, K_n, d) float32 rows to append after each prompt's embeddings.
    """

    anchor_index: np.ndarray
    rows: np.ndarray


def draw_noisy_rows(bank: AnchorBank, n_prompts: int, config: EdenConfig, rng: np.random.Generator) -> NoisyDraw:
    """Per prompt ONE anchor (uniform over the bank) shared by its K_n noisy rollouts, independent noise per row.

    The ablation in ``config`` changes the draw (see the module docstring). Deterministic given ``rng``.
    """
    k_n, k = config.n_noisy, len(bank)
    vec = bank.vectors.astype(np.float64)
    rows = np.zeros((n_prompts, k_n, bank.dim))
    if config.ablation == "random_anchor_per_rollout":
        idx = rng.integers(0, k, size=(n_prompts, k_n))
    elif config.ablation == "fixed_anchor":
        if config.fixed_anchor_index >= k:
            raise ValueError(f"fixed_anchor_index {config.fixed_anchor_index} is outside the bank of {k} anchors")
        idx = np.full((n_prompts, k_n), config.fixed_anchor_index)
    else:
        idx = np.repeat(rng.integers(0, k, size=(n_prompts, 1)), k_n, axis=1)
    for p in range(n_prompts):
        for j in range(k_n):
            if config.ablation == "no_anchor":
                eps = rng.standard_normal(bank.dim)
                rows[p, j] = np.linalg.norm(vec[idx[p, j]]) * eps / max(float(np.linalg.norm(eps)), 1e-12)
            else:
                rows[p, j] = perturb(vec[idx[p, j]], 1, config.effective_rho, rng)[0]
    if config.ablation == "no_anchor":
        idx = np.full_like(idx, -1)
    return NoisyDraw(idx.astype(np.int64), rows.astype(np.float32))


def noisy_temperature(step: int, tau_start: float = 0.6, tau_end: float = 1.0, warmup_steps: int = 50) -> float:
    """Cosine warm-up ``tau_n(s) = tau_end - (tau_end - tau_start) * (1 + cos(pi * s / S)) / 2`` for s < S, then tau_end."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if warmup_steps <= 0 or step >= warmup_steps:
        return float(tau_end)
    return float(tau_end - (tau_end - tau_start) * 0.5 * (1.0 + math.cos(math.pi * step / warmup_steps)))


def row_temperatures(n_prompts: int, group_size: int, config: EdenConfig, step: int) -> np.ndarray:
    """(P * G,) sampling temperature of each row: tau_r for standard rows, tau_n(step) for noisy ones."""
    mask = noisy_mask(n_prompts, group_size, config.n_noisy)
    tau_n = noisy_temperature(step, config.tau_n_start, config.tau_n_end, config.warmup_steps)
    return np.where(mask, tau_n, config.tau_r)
