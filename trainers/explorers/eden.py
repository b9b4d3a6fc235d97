"""EDEN: Embedding-space Directional Exploration via anchored Noise (docs/methods.md section 5), backend-agnostic maths.

This module exports the method's whole API from three modules, one per concept: `eden_config` (the settings),
`eden_noise` (anchor bank, perturbation, noisy rows and their temperatures) and `eden_credit` (top-p selection,
absorb, the diagnostics).

API summary (numpy; the engines that generate and score live in trainers/local/ and trainers/openrlhf/):
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

from envkit.trainers.explorers.anchors import AnchorBank
from envkit.trainers.explorers.eden_config import ABLATIONS, EdenBankConfig, EdenConfig
from envkit.trainers.explorers.eden_credit import (
    EdenResult,
    EdenTurnResult,
    absorb,
    eden_advantages,
    eden_turn_credit,
    kept_share,
    noisy_stats,
    select_noisy,
)
from envkit.trainers.explorers.eden_noise import (
    NoisyDraw,
    build_anchor_bank,
    draw_noisy_rows,
    noisy_mask,
    noisy_temperature,
    perturb,
    row_temperatures,
)

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
