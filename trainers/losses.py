"""Policy-gradient losses (torch): clipped surrogate, KL-loss estimators, entropy bonus (docs/methods.md sections 1, 5).

API summary (B = sequences, T = response tokens, V = vocabulary; masks are (B, T) bool or 0/1):
    policy_loss(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, agg="token_mean",
                token_weights=None, norm_len=None, dual_clip=None) -> (loss scalar, stats dict[str, float])
    kl_per_token(logp, ref_logp, estimator="k1"|"k2"|"k3") -> (B, T)
    kl_penalty(logp, ref_logp, mask, estimator="k3", agg="token_mean") -> scalar
    token_entropy(logits (B, T, V)) -> (B, T);  entropy_from_logits(logits, mask, agg="token_mean") -> scalar
    aggregate(values (B, T), mask, agg, norm_len=None) -> scalar
    combine_loss(pg_loss, kl=None, entropy=None, *, beta=0.0, alpha=0.0) -> pg + beta * kl - alpha * entropy

Aggregation modes: "token_mean" (sum over all masked tokens / their count: GRPO/DAPO), "seq_mean" (mean over
sequences of each sequence's token mean), "token_sum_norm" (sum / (B * norm_len), Dr. GRPO; norm_len defaults
to T). Per-token weights (SERO's reachability weights, EDEN's gamma) multiply the per-token loss and do not
change the denominator. Sequences whose mask is empty contribute nothing.

Numerical guards (as verl and OpenRLHF): the importance log-ratio is clamped to [-LOG_RATIO_CLAMP,
LOG_RATIO_CLAMP] = [-20, 20] before ``exp`` (a log-ratio above ~88 would make a float32 loss inf); every KL
estimate (k1, k2, k3) is clamped to [-KL_CLAMP, KL_CLAMP] = [-10, 10]; the optional dual clip (``dual_clip=c``,
c > 1, verl/OpenRLHF use 3; off by default) bounds a negative-advantage token's loss by ``-c * A``.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = [
    "AGGREGATIONS",
    "KL_CLAMP",
    "LOG_RATIO_CLAMP",
    "aggregate",
    "combine_loss",
    "entropy_from_logits",
    "kl_penalty",
    "kl_per_token",
    "policy_loss",
    "token_entropy",
]

Agg = Literal["token_mean", "seq_mean", "token_sum_norm"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "seq_mean", "token_sum_norm")
LOG_RATIO_CLAMP = 20.0  # |logp - old_logp| (and k3's |ref_logp - logp|) before exp
KL_CLAMP = 10.0  # |per-token KL estimate|


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, agg: Agg = "token_mean", norm_len: int | None = None
) -> torch.Tensor:
    """Reduce (B, T) per-token values over the masked tokens to a scalar (see the module docstring)."""
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must have the same (B, T) shape")
    m = mask.to(values.dtype)
    masked = values * m
    if agg == "token_mean":
        return masked.sum() / m.sum().clamp(min=1.0)
    if agg == "seq_mean":
        lengths = m.sum(-1)
        per_seq = masked.sum(-1) / lengths.clamp(min=1.0)
        return per_seq.sum() / (lengths > 0).sum().clamp(min=1).to(values.dtype)
    if agg == "token_sum_norm":
        length = values.shape[-1] if norm_len is None else norm_len
        if length <= 0:
            raise ValueError(f"norm_len must be > 0, got {length}")
        return masked.sum() / (max(values.shape[0], 1) * length)
    raise ValueError(f"unknown agg {agg!r}; choose one of {AGGREGATIONS}")


def _masked_means(xs: dict[str, torch.Tensor], m: torch.Tensor) -> dict[str, float]:
    """Masked means of several (B, T) tensors with one device sync."""
    n = m.sum().clamp(min=1.0)
    values = torch.stack([(x * m).sum() / n for x in xs.values()]).tolist()
    return dict(zip(xs, (float(v) for v in values)))


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    agg: Agg = "token_mean",
    token_weights: torch.Tensor | None = None,
    norm_len: int | None = None,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate ``-min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A)`` with ``r = exp(logp - old_logp)``.

    The log-ratio is clamped to [-20, 20] before ``exp``. With ``dual_clip=c`` a token with A < 0 has its loss
    capped at ``-c * A`` (Ye et al. 2020, verl/OpenRLHF ``dual_clip``): ``min(-min(r A, clip(r) A), -c A)``.

    Args:
        logp: (B, T) log-probs of the sampled tokens under the current policy (with gradient).
        old_logp: (B, T) log-probs under the behaviour policy (no gradient needed; detached here).
        advantages: (B,) per-sequence or (B, T) per-token advantages (detached here).
        mask: (B, T) 1 on the response tokens that enter the loss.
        eps_low: Lower clip range (ratio >= 1 - eps_low).
        eps_high: Upper clip range (ratio <= 1 + eps_high); > eps_low is "clip-higher" (DAPO).
        agg: "token_mean", "seq_mean" or "token_sum_norm".
        token_weights: Optional (B,) or (B, T) non-negative weights multiplying the per-token loss.
        norm_len: Constant length for "token_sum_norm" (default T).
        dual_clip: Optional dual-clip constant c > 1 (3 in verl/OpenRLHF); None (default) turns it off.

    Returns:
        (loss, stats) with stats ``clip_fraction`` (masked tokens where the clipped branch was taken and
        binding), ``clip_fraction_low``, ``clip_fraction_high``, ``ratio_mean``, ``approx_kl`` (k3 of old vs
        new, masked mean), ``adv_mean`` and, with ``dual_clip``, ``dual_clip_fraction``.
    """
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask {tuple(mask.shape)} must all be (B, T)"
        )
    if eps_low < 0 or eps_high < 0 or eps_low >= 1:
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got eps_low={eps_low}, eps_high={eps_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (3 is the usual value) or None to turn it off, got {dual_clip}")
    adv = advantages.detach().to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1).expand_as(logp)
    if adv.shape != logp.shape:
        raise ValueError(f"advantages must be (B,) or (B, T) = {tuple(logp.shape)}, got {tuple(advantages.shape)}")
    log_ratio = (logp - old_logp.detach().to(logp.dtype)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv)
    dual = None
    if dual_clip is not None:
        bound = -dual_clip * adv
        dual = (adv < 0) & (per_token > bound)
        per_token = torch.where(adv < 0, torch.minimum(per_token, bound), per_token)
    if token_weights is not None:
        w = token_weights.detach().to(logp.dtype)
        if w.dim() == 1:
            w = w.unsqueeze(-1).expand_as(logp)
        if w.shape != logp.shape:
            raise ValueError(
                f"token_weights must be (B,) or (B, T) = {tuple(logp.shape)}, got {tuple(token_weights.shape)}"
            )
        per_token = per_token * w
    loss = aggregate(per_token, mask, agg, norm_len)
    with torch.no_grad():
        m = mask.to(logp.dtype)
        high = ((ratio > 1.0 + eps_high) & (adv > 0)).to(logp.dtype)
        low = ((ratio < 1.0 - eps_low) & (adv < 0)).to(logp.dtype)
        parts = {
            "clip_fraction": high + low,
            "clip_fraction_high": high,
            "clip_fraction_low": low,
            "ratio_mean": ratio,
            "approx_kl": torch.expm1(-log_ratio) + log_ratio,
            "adv_mean": adv,
        }
        if dual is not None:
            parts["dual_clip_fraction"] = dual.to(logp.dtype)
        stats = _masked_means(parts, m)
    return loss, stats


def kl_per_token(
    logp: torch.Tensor, ref_logp: torch.Tensor, estimator: Literal["k1", "k2", "k3"] = "k3"
) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token log-probs (Schulman's k1/k2/k3).

    k1 = logp - ref_logp; k2 = (logp - ref_logp)^2 / 2; k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1 (>= 0).
    Shapes: (B, T) in and out; the reference is detached. For k3 the log-ratio is clamped to [-20, 20] so that a
    token the policy has all but ruled out cannot overflow exp; every estimate is then clamped to [-10, 10]
    (verl ``kl_penalty``, OpenRLHF ``compute_approx_kl``).
    """
    log_r = ref_logp.detach().to(logp.dtype) - logp
    if estimator == "k1":
        kl = -log_r
    elif estimator == "k2":
        kl = 0.5 * log_r**2
    elif estimator == "k3":
        log_r = log_r.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        kl = torch.expm1(log_r) - log_r
    else:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose 'k1', 'k2' or 'k3'")
    return kl.clamp(-KL_CLAMP, KL_CLAMP)


def kl_penalty(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    estimator: Literal["k1", "k2", "k3"] = "k3",
    agg: Agg = "token_mean",
) -> torch.Tensor:
    """KL-loss term: `kl_per_token` aggregated over the masked tokens (scalar, with gradient through logp)."""
    return aggregate(kl_per_token(logp, ref_logp, estimator), mask, agg)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """(B, T, V) logits -> (B, T) entropy of the next-token distribution (nats), computed stably in float32+."""
    x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    logp = torch.log_softmax(x, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor, agg: Agg = "token_mean") -> torch.Tensor:
    """Mean policy entropy over the masked tokens (scalar, differentiable): the entropy bonus / diagnostic.

    Args:
        logits: (B, T, V) logits at the response positions.
        mask: (B, T) response mask.
        agg: Aggregation, as in `aggregate`.
    """
    if logits.dim() != 3 or logits.shape[:2] != mask.shape:
        raise ValueError(
            f"logits must be (B, T, V) with mask (B, T); got {tuple(logits.shape)} and {tuple(mask.shape)}"
        )
    return aggregate(token_entropy(logits), mask, agg)


def combine_loss(
    pg_loss: torch.Tensor,
    kl: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    *,
    beta: float = 0.0,
    alpha: float = 0.0,
) -> torch.Tensor:
    """Total loss ``pg_loss + beta * kl - alpha * entropy`` (terms that are None or have coefficient 0 are skipped).

    Raises:
        ValueError: a non-zero coefficient whose term is None.
    """
    total = pg_loss
    if beta != 0.0:
        if kl is None:
            raise ValueError("beta != 0 needs the kl term: pass kl=kl_penalty(...) or set beta=0")
        total = total + beta * kl
    if alpha != 0.0:
        if entropy is None:
            raise ValueError("alpha != 0 needs the entropy term: pass entropy=entropy_from_logits(...) or set alpha=0")
        total = total - alpha * entropy
    return total
