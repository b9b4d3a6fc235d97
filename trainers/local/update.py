"""One policy-gradient update of the local trainer from a batch of scored rollouts (micro-batched).

The batch is token-level: each row is a prompt (token ids, never re-tokenised), a response (token ids), an
optional per-token loss flag (multi-turn rows exclude observation tokens), per-token advantages and a per-row
weight (EDEN's gamma, SERO-style weights; 0 drops a row). The maths is `envkit.trainers.losses`:
``policy_loss`` (clipped surrogate), ``kl_penalty`` against an optional frozen reference model, and the entropy
bonus, combined by ``combine_loss``. The loss is aggregated over the WHOLE batch (token mean by default) even
when it is computed in micro-batches. Each micro-batch computes its distinct prompts once
(`envkit.trainers.local.shared_prefix`): a group's rollouts share one prompt pass.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from envkit.trainers.local.options import LossConfig
from envkit.trainers.local.shared_prefix import ResponseLogits, response_logits
from envkit.trainers.losses import aggregate, combine_loss, kl_penalty, policy_loss, token_entropy

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass
class TrainBatch:
    """Rows to learn from (all lists have one entry per row).

    Attributes:
        prompts: Prompt token ids (the CLEAN prompt: no EDEN extra position).
        responses: Response token ids (multi-turn: every action and observation token after the first prompt).
        advantages: Per-token advantages, aligned with `responses`.
        loss_flags: Per-token 1/0 (0: observation tokens the model did not generate), aligned with `responses`.
        weights: Per-row loss weight.
        oracle: Per row, True for an oracle row (SERO), or None (no oracle rows to tell apart). When given, `update`
            also returns the norms of the policy rows' and the oracle rows' policy-loss gradients
            (``grad_norm_policy``, ``grad_norm_oracle``; one extra backward pass per row kind and micro-batch).
    """

    prompts: list[list[int]]
    responses: list[list[int]]
    advantages: list[list[float]]
    loss_flags: list[list[int]]
    weights: list[float]
    oracle: list[bool] | None = None

    def __len__(self) -> int:
        return len(self.prompts)


def _micro_batches(batch: TrainBatch, size: int, max_tokens: int) -> list[list[int]]:
    """Micro-batches that keep a prompt's rows together and put rows of similar length side by side.

    Rows are sorted by (prompt length, prompt, response length) and chunked into at most `size` rows and
    `max_tokens` padded tokens: each micro-batch computes its distinct prompts once (`envkit.trainers.local.shared_prefix`),
    and padding stays small (XRPO's ICL-prefixed prompts are several times longer than plain ones). The
    whole-batch loss does not depend on how rows are grouped (each micro-batch is scaled by its share), so the
    grouping changes nothing else.
    """
    order = sorted(
        range(len(batch)), key=lambda i: (len(batch.prompts[i]), batch.prompts[i], len(batch.responses[i]), i)
    )
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        n = len(batch.prompts[i]) + len(batch.responses[i])
        if cur and (len(cur) == size or max(longest, n) * (len(cur) + 1) > max_tokens):
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def _forward(model: PreTrainedModel, batch: TrainBatch, rows: list[int], pad: int) -> ResponseLogits:
    return response_logits(
        model,
        [batch.prompts[i] for i in rows],
        [batch.responses[i] for i in rows],
        pad,
        loss_flags=[batch.loss_flags[i] for i in rows],
    )


def _row_tensors(batch: TrainBatch, rows: list[int], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages [B, T] aligned with the response positions, and row weights [B]."""
    adv = torch.zeros_like(like, dtype=torch.float32)
    for k, i in enumerate(rows):
        a = batch.advantages[i]
        if a:
            adv[k, : len(a)] = torch.tensor(a, dtype=torch.float32)
    w = torch.tensor([batch.weights[i] for i in rows], dtype=torch.float32, device=like.device)
    return adv.to(like.device), w


def _add_part_grads(
    parts: dict[str, list[torch.Tensor]],
    params: Sequence[torch.Tensor],
    batch: TrainBatch,
    rows: list[int],
    share: float,
    loss_of: Any,
    weights: torch.Tensor,
    kinds: tuple[str, ...] = ("policy", "oracle"),
) -> None:
    """Add the gradients of the micro-batch's policy-loss part of its policy rows and of its oracle rows to `parts`
    (``loss_of(token_weights=...)``: the micro-batch's `policy_loss` with those token weights; the row weights times a
    0/1 row-kind mask select one part with the whole batch's aggregation denominator); only the parts in `kinds`."""
    assert batch.oracle is not None
    is_oracle = torch.tensor([batch.oracle[i] for i in rows], dtype=weights.dtype, device=weights.device)[:, None]
    for kind, mask in (("policy", 1.0 - is_oracle), ("oracle", is_oracle)):
        if kind not in kinds or not bool(mask.any()):
            continue
        grads = torch.autograd.grad(
            loss_of(token_weights=weights * mask)[0] * share, params, retain_graph=True, allow_unused=True
        )
        acc = parts.setdefault(kind, [torch.zeros_like(p) for p in params])
        for a, g in zip(acc, grads, strict=True):
            if g is not None:
                a.add_(g)


def _norm(grads: list[torch.Tensor] | None) -> float:
    """L2 norm over a list of gradient tensors (None or empty: 0)."""
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))


def update(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    cfg: LossConfig,
    pad: int,
    ref_model: PreTrainedModel | None = None,
) -> dict[str, float]:
    """Run `cfg.ppo_epochs` optimizer steps on `batch`; returns loss statistics (means over the batch).

    With ``batch.oracle`` set, the statistics also hold ``grad_norm_policy`` / ``grad_norm_oracle``: the L2 norms
    (before clipping, last epoch) of the gradients of the policy-loss part of the policy rows and of the oracle rows
    (the two parts add up to the policy loss: same aggregation denominator, each row's tokens in one part only), and
    ``oracle_token_share``, the oracle rows' share of the loss tokens.
    """
    if batch.oracle is not None and len(batch.oracle) != len(batch):
        raise ValueError(f"TrainBatch.oracle has {len(batch.oracle)} entries for {len(batch)} rows (one per row)")
    rows = _micro_batches(batch, cfg.micro_batch, cfg.micro_batch_tokens)
    # Denominator of the whole-batch aggregation, so micro-batches add up to the full-batch loss.
    n_tokens = max(1.0, float(sum(sum(f) for f in batch.loss_flags)))
    n_rows = max(1, len(batch))
    norm_len = max((len(r) for r in batch.responses), default=1)
    old: list[torch.Tensor | None] = []
    refs: list[torch.Tensor | None] = []
    with torch.no_grad():
        for sl in rows:
            old.append(_forward(model, batch, sl, pad).logprobs() if cfg.ppo_epochs > 1 else None)
            refs.append(_forward(ref_model, batch, sl, pad).logprobs() if ref_model is not None else None)
    params = [p for p in model.parameters() if p.requires_grad]
    stats: dict[str, float] = {}
    for epoch in range(cfg.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        last = epoch == cfg.ppo_epochs - 1  # the per-part norms are the last epoch's (the statistics' epoch)
        parts: dict[str, list[torch.Tensor]] | None = None if batch.oracle is None or not last else {}
        # Without a KL or entropy term the gradient IS the policy loss's: the policy rows' part is then the whole
        # gradient minus the oracle rows' part (one extra backward pass per micro-batch instead of two).
        by_difference = ref_model is None and not cfg.entropy_coef
        kinds = ("oracle",) if by_difference else ("policy", "oracle")
        for k, sl in enumerate(rows):
            fwd = _forward(model, batch, sl, pad)
            target = fwd.mask
            logits = fwd.logits.float()
            logp = fwd.logprobs()
            adv, w = _row_tensors(batch, sl, target)
            old_k = old[k]
            old_logp = old_k if old_k is not None else logp.detach()
            weights = w[:, None].expand_as(logp)
            pg, pg_stats = policy_loss(
                logp,
                old_logp,
                adv,
                target,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                agg=cfg.agg,  # type: ignore[arg-type]
                token_weights=weights,
                norm_len=norm_len,
                dual_clip=cfg.dual_clip,
            )
            ent = aggregate(token_entropy(logits), target, "token_mean")
            # Scale the micro-batch aggregate by its share of the whole batch (token count or row count).
            mb_tokens = float(target.sum())
            share = mb_tokens / n_tokens if cfg.agg == "token_mean" else len(sl) / n_rows
            tok_share = mb_tokens / n_tokens
            kl = kl_penalty(logp, refs[k], target, estimator=cfg.kl_estimator) if refs[k] is not None else None  # type: ignore[arg-type]
            total = combine_loss(
                pg * share,
                None if kl is None else kl * tok_share,
                ent * tok_share,
                beta=cfg.kl_coef if kl is not None else 0.0,
                alpha=cfg.entropy_coef,
            )
            if parts is not None:
                loss_of = functools.partial(
                    policy_loss, logp, old_logp, adv, target, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                    agg=cfg.agg, norm_len=norm_len, dual_clip=cfg.dual_clip,  # type: ignore[arg-type]
                )  # fmt: skip
                _add_part_grads(parts, params, batch, sl, share, loss_of, weights, kinds)
            total.backward()
            kl_val = kl.item() if kl is not None else 0.0
            for key, val in (("pg_loss", pg.item()), ("entropy", ent.item()), ("kl", kl_val), *pg_stats.items()):
                sums[key] = sums.get(key, 0.0) + val * tok_share
        if parts is not None and by_difference:
            whole = [
                p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params
            ]  # clipping is in place
            parts["policy"] = (
                [w - o for w, o in zip(whole, parts["oracle"], strict=True)] if "oracle" in parts else whole
            )
        grad_norm = (
            float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)) if cfg.max_grad_norm else 0.0
        )
        optimizer.step()
        stats = {**sums, "grad_norm": grad_norm}
        if parts is not None and batch.oracle is not None:
            for kind in ("policy", "oracle"):
                stats[f"grad_norm_{kind}"] = _norm(parts.get(kind))
            n_oracle = sum(sum(f) for f, o in zip(batch.loss_flags, batch.oracle, strict=True) if o)
            stats["oracle_token_share"] = n_oracle / n_tokens
    if ref_model is None:
        stats.pop("kl", None)
    return stats
