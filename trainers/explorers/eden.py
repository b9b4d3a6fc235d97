"""EDEN: Embedding-space Directional Exploration via anchored Noise (docs/methods.md section 5), backend-agnostic maths.

API summary (numpy; the engines that generate and score live in trainers/local/trainer.py and trainers/openrlhf/):
    EdenConfig(n_noisy=4, rho=0.12, top_p=0.5, gamma=0.5, tau_r=1.0, ...)   rollouts and credit (both trainers)
    EdenBankConfig(EdenConfig, n_anchors=8, max_cos=0.5, ...)               + anchor-bank selection (local)
    build_anchor_bank(embeddings (V, d), vocab, score_fn, config, rng) -> AnchorBank     (see explorers.anchors)
    noisy_mask(n_prompts, group_size, n_noisy) -> (P * G,) bool            the last n_noisy rows of each group
    perturb(anchor (d,), n, rho, rng) -> (n, d)    e~ = e_b + rho * ||e_b|| * eps / sqrt(d), eps ~ N(0, I)
    draw_noisy_rows(bank, n_prompts, config, rng) -> NoisyDraw    per-prompt anchor (shared), per-rollout noise
    noisy_temperature(step, tau_start, tau_end, warmup_steps) -> float     cosine warm-up of tau_n(s)
    row_temperatures(n_prompts, group_size, config, step) -> (P * G,)      tau_r for standard rows, tau_n(s) noisy
    select_noisy(advantages (N,), noisy_mask (N,), top_p) -> keep (N,) bool    batch-wide top-p |A| of noisy rows
    absorb(advantages, noisy_mask, keep, gamma) -> (advantages (N,), loss_mask (N,) bool)
    eden_advantages(rewards, group_ids, noisy_mask, config) -> EdenResult  normalise over the mixed group + absorb
    eden_turn_credit(turn_advantages, noisy_mask, success, config) -> EdenTurnResult   per-turn estimators: rank
                   each row by mean |turn advantage|, select + absorb (both trainers' one composition)
    kept_share(keep, noisy_mask) -> float                                  share of noisy rows kept in the loss

How a trainer uses it, per step: draw ``rows = draw_noisy_rows(bank, P, cfg, rng)``; generate the K_r standard
rollouts of each prompt at ``tau_r`` and the K_n noisy ones at ``noisy_temperature(step)`` from the prompt's
embeddings with ONE extra position ``rows.rows[p, j]`` appended; score binary rewards; ``eden_advantages`` gives
the advantages and the loss mask; the update scores every kept rollout under the CLEAN prompt (the extra position
never reaches the loss) with the trainer's clipped objective (the local `LossConfig`; the paper's: beta=0,
eps_high 0.28, entropy bonus 0.001).

Ablations (``EdenConfig.ablation``): "anchored" (the method), "rho0" (the bare anchor row, rho = 0),
"no_anchor" (norm-matched isotropic noise, no anchor direction), "random_anchor_per_rollout" (each noisy rollout
draws its own anchor: no shared direction in a group), "fixed_anchor" (one anchor for every prompt).
Defaults marked (ours) are the project's choice where the paper's text is not public.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from envkit.credit.advantages import group_advantages, zero_advantage_fraction
from envkit.trainers.explorers.anchors import AnchorBank, AnchorScore, candidate_tokens, select_anchors

__all__ = [
    "ABLATIONS",
    "AnchorBank",
    "EdenBankConfig",
    "EdenConfig",
    "EdenResult",
    "EdenTurnResult",
    "NoisyDraw",
    "absorb",
    "build_anchor_bank",
    "draw_noisy_rows",
    "eden_advantages",
    "eden_turn_credit",
    "kept_share",
    "noisy_mask",
    "noisy_stats",
    "noisy_temperature",
    "perturb",
    "row_temperatures",
    "select_noisy",
]

Ablation = Literal["anchored", "rho0", "no_anchor", "random_anchor_per_rollout", "fixed_anchor"]
ABLATIONS: tuple[str, ...] = ("anchored", "rho0", "no_anchor", "random_anchor_per_rollout", "fixed_anchor")


@dataclass(frozen=True)
class EdenConfig:
    """EDEN's rollout and credit settings (docs/methods.md section 5), read by both trainers.

    The group size G (standard + noisy rollouts per prompt) is the run's (``TrainConfig.group_size``, OpenRLHF's
    ``n_samples_per_prompt``), not EDEN's: `n_standard(G)` checks ``n_noisy < G``. The update (clip range, KL,
    entropy bonus) is the trainer's (the local `LossConfig`, OpenRLHF's own flags); the paper's update is
    ``--loss.eps-high 0.28 --loss.entropy-coef 0.001``. How an anchor bank is built is `EdenBankConfig`'s (the
    local trainer selects one; OpenRLHF is given one).
    """

    # --- noisy rollouts ---
    n_noisy: int = 4
    """Noisy rollouts per prompt K_n (4 of G = 16: 25% is best, 50% falls back to GRPO level)."""
    rho: float = 0.12
    """Relative noise norm (0.12; 0.18 for some models); angle to the anchor ~ arctan(rho)."""
    ablation: Ablation = "anchored"
    """One of "anchored" (the method), "rho0", "no_anchor", "random_anchor_per_rollout", "fixed_anchor"."""
    fixed_anchor_index: int = 0
    """Bank index used by the "fixed_anchor" ablation."""
    # --- credit of the noisy rollouts ---
    top_p: float = 0.5
    """Share of noisy rollouts kept batch-wide, by |A| rank (0.5, ours)."""
    gamma: float = 0.5
    """Factor on the kept noisy rollouts' advantages, in (0, 1] (0.5, ours)."""
    # --- temperatures ---
    tau_r: float = 1.0
    """Temperature of standard rollouts (1.0)."""
    tau_n_start: float = 0.6
    """Noisy-rollout temperature at step 0 (0.6, ours)."""
    tau_n_end: float = 1.0
    """Noisy-rollout temperature after the warm-up (1.0, ours)."""
    warmup_steps: int = 50
    """Length of the cosine warm-up of tau_n in training steps (50, ours)."""

    def __post_init__(self) -> None:
        self._check(
            (self.n_noisy >= 0, f"n_noisy must be >= 0, got {self.n_noisy}"),
            (self.rho >= 0.0, f"rho must be >= 0, got {self.rho}"),
            (0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}"),
            (0.0 < self.gamma <= 1.0, f"gamma must be in (0, 1], got {self.gamma}"),
            (min(self.tau_r, self.tau_n_start, self.tau_n_end) > 0, "temperatures tau_r, tau_n_* must be > 0"),
            (self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}"),
            (self.ablation in ABLATIONS, f"ablation must be one of {ABLATIONS}, got {self.ablation!r}"),
            (self.fixed_anchor_index >= 0, f"fixed_anchor_index must be >= 0, got {self.fixed_anchor_index}"),
        )

    def _check(self, *checks: tuple[bool, str]) -> None:
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"{type(self).__name__}: {msg}")

    def n_standard(self, group_size: int) -> int:
        """Standard rollouts per prompt K_r = G - K_n of the run's group size G.

        Raises:
            ValueError: G < 2 or K_n >= G (the message says what to set).
        """
        if group_size < 2 or not 0 <= self.n_noisy < group_size:
            raise ValueError(
                f"EdenConfig.n_noisy ({self.n_noisy}) must be < the run's group size ({group_size}) and the group "
                "size >= 2: lower --eden.n-noisy or raise the run's group size (--group-size / n_samples_per_prompt)"
            )
        return group_size - self.n_noisy

    @property
    def effective_rho(self) -> float:
        """rho used for the perturbation (0 under the "rho0" ablation)."""
        return 0.0 if self.ablation == "rho0" else self.rho


@dataclass(frozen=True)
class EdenBankConfig(EdenConfig):
    """`EdenConfig` plus how the anchor bank is selected (`build_anchor_bank`; the local trainer's ``--eden``).

    OpenRLHF is given its bank (``--eden-bank`` / ``--eden-anchors``), so it takes the plain `EdenConfig`.
    """

    # --- anchor-bank selection ---
    n_anchors: int = 8
    """Anchor-bank size K (8)."""
    n_selection_prompts: int = 200
    """Training prompts used to score anchor candidates (200)."""
    candidate_percentiles: tuple[float, float] = (25.0, 75.0)
    """Embedding-norm band of the candidates (25th-75th percentile)."""
    max_cos: float = 0.5
    """Pairwise cosine bound of the chosen anchors (0.5)."""
    max_scored: int | None = 64
    """Candidates scored during selection, drawn at random (64, ours; None: all)."""
    min_validity: float = 0.5
    """Candidates whose noisy outputs are well-formed less often are never chosen (0.5, ours)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check(
            (self.n_anchors >= 1, f"n_anchors must be >= 1, got {self.n_anchors}"),
            (self.fixed_anchor_index < self.n_anchors, "fixed_anchor_index must be in [0, n_anchors)"),
            (0.0 < self.max_cos <= 1.0, f"max_cos must be in (0, 1], got {self.max_cos}"),
        )


def build_anchor_bank(
    embeddings: np.ndarray,
    vocab: Sequence[str],
    score_fn: Callable[[int], AnchorScore],
    config: EdenBankConfig = EdenBankConfig(),
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


def perturb(anchor: Any, n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
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


def select_noisy(advantages: Any, noisy: Any, top_p: float) -> np.ndarray:
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


def absorb(advantages: Any, noisy: Any, keep: Any, gamma: float) -> tuple[np.ndarray, np.ndarray]:
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
    rewards: Any, group_ids: Any, noisy: Any, config: EdenConfig, estimator: str = "grpo"
) -> EdenResult:
    """Normalise binary rewards over each mixed group (standard + noisy), then `select_noisy` and `absorb`.

    Args:
        rewards: (N,) rewards.
        group_ids: (N,) prompt id of each row.
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
