"""Training forward passes that compute each distinct prompt once (a GRPO group's rollouts share their prompt).

A batch of P prompts x G rollouts has only P distinct prompts, yet a plain forward over the concatenated
prompt+response rows computes every prompt G times. `response_logits` instead

1. runs one forward over the distinct prompts (left-padded, keeping the KV cache, logits of the last position
   only),
2. gathers each row's prompt cache (`DynamicCache.batch_select_indices`: a differentiable index), and
3. runs one forward over the responses (right-padded) that attends to its row's prompt cache.

Gradients flow through the gathered cache into the prompt pass, so the loss and its gradient are those of the
plain concatenated forward up to float rounding (tests/trainers/local/test_shared_prefix.py checks both), while the
prompt costs 1/G of the compute. XRPO's ICL-prefixed prompts, several times longer than plain ones, gain most.

Long rows (multi-turn episodes: thousands of tokens after a first prompt of a few hundred) go another way: each row
alone, prompt and response in one unpadded forward (`LONG_ROW_TOKENS`). A padded batch, or responses attending to
a gathered cache, needs an explicit attention mask, and with a mask PyTorch's CPU attention materialises a
tokens x tokens score matrix per row, head and layer and keeps it for the backward pass (WebShop + SERO: 2.2 GB
and most of the update's time); one unpadded causal row takes the fused kernel (no score matrix, half the work:
the masked-out upper triangle is skipped), and re-computing a short shared prompt per row costs little beside it.

Example:
    >>> import torch
    >>> from envkit.runtime.models import ModelConfig, load_model
    >>> model, tok = load_model(ModelConfig(path="tiny:arith", hidden_size=32, layers=1, device="cpu"))
    >>> p = tok("1+2=")["input_ids"]
    >>> out = response_logits(model, [p, p], [[5, 6], [7]], tok.pad_token_id)
    >>> tuple(out.logits.shape[:2]), out.mask.tolist()
    ((2, 2), [[1.0, 1.0], [1.0, 0.0]])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from envkit.runtime.hf_cache import output_cache, with_cache

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class ResponseLogits:
    """Logits over response positions.

    Attributes:
        logits: [B, T, V]; ``logits[i, j]`` is the next-token distribution that predicts ``ids[i, j]``.
        ids: [B, T] response token ids (right-padded with the pad id).
        mask: [B, T] float: 1.0 on response tokens that count (``loss_flags`` when given), else 0.
        n_prompts: Distinct prompts computed (the prompt pass's batch size).
    """

    logits: torch.Tensor
    ids: torch.Tensor
    mask: torch.Tensor
    n_prompts: int

    def logprobs(self) -> torch.Tensor:
        """[B, T] log-prob of each response token (0 off the mask)."""
        logp = torch.log_softmax(self.logits.float(), dim=-1).gather(-1, self.ids[..., None]).squeeze(-1)
        return logp * self.mask


#: Rows with at least this many tokens (prompt + response) are computed one at a time, unpadded (module docstring).
#: scripts/bench_update.py, tiny:bytes, 10 rows sharing 2 prompts, CPU of one update padded / unpadded: 0.9x at
#: 300-token rows (the batch wins: per-forward overhead), 1.2x at 700, 1.9x at 3,500 (and 2.1 -> 1.3 GB peak RSS).
#: 1024 keeps single-turn and short agent rows (Toy-v0: < 700 tokens) on the shared-prompt batch.
LONG_ROW_TOKENS = 1024


def left_padded(rows: Sequence[Sequence[int]], width: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids [B, width] with each row right-aligned after `pad`s, and its attention mask (CPU tensors)."""
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(list(r))
            mask[i, width - len(r) :] = 1
    return ids, mask


def prompt_pass(
    model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor
) -> tuple[torch.Tensor, Any]:
    """One forward over distinct left-padded prompts [U, W] that keeps the KV cache.

    Returns the logits of each prompt's last position [U, V] and the cache gathered per row (`rows` [B]: each
    row's prompt index; `DynamicCache.batch_select_indices`, differentiable). Position ids follow the mask.
    """
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = output_cache(out)
    cache.batch_select_indices(rows)
    return out.logits[:, -1], cache


def distinct(prompts: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """The distinct prompts (first-seen order) and, per row, the index of its prompt among them."""
    keys: dict[tuple[int, ...], int] = {}
    index = [keys.setdefault(tuple(p), len(keys)) for p in prompts]
    return list(keys), index


def response_logits(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad: int,
    loss_flags: Sequence[Sequence[int]] | None = None,
    long_row_tokens: int | None = None,
) -> ResponseLogits:
    """Logits of every response position, each distinct prompt computed once (see the module docstring).

    Args:
        model: A transformers causal LM that accepts a KV cache (`envkit.runtime.hf_cache`) / ``position_ids`` /
            ``logits_to_keep``.
        prompts: B non-empty prompt token-id lists (rows of one group repeat the same prompt).
        responses: B response token-id lists.
        pad: Pad token id.
        loss_flags: Optional per-token 1/0 flags aligned with `responses` (multi-turn observation tokens: 0).
        long_row_tokens: When the longest row (prompt + response) has at least this many tokens, every row is
            computed alone and unpadded instead (None: the module's `LONG_ROW_TOKENS`, read at call time; the
            numbers are the same up to float rounding).

    Gradients flow when called outside ``torch.no_grad()``.
    """
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(f"need as many prompts as responses (>= 1), got {len(prompts)} and {len(responses)}")
    if loss_flags is not None and [len(f) for f in loss_flags] != [len(r) for r in responses]:
        raise ValueError("loss_flags must have one flag per response token")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("response_logits needs non-empty prompts (the first response token is predicted from them)")
    device = next(model.parameters()).device
    n = max((len(r) for r in responses), default=0)
    r_ids = torch.full((len(responses), max(n, 1)), pad, dtype=torch.long)
    r_mask = torch.zeros((len(responses), max(n, 1)), dtype=torch.float32)
    for i, r in enumerate(responses):
        if r:
            r_ids[i, : len(r)] = torch.tensor(list(r))
            r_mask[i, : len(r)] = torch.tensor(list(loss_flags[i]) if loss_flags is not None else [1.0] * len(r))
    r_ids, r_mask = r_ids.to(device), r_mask.to(device)
    long_rows = LONG_ROW_TOKENS if long_row_tokens is None else long_row_tokens
    if max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True)) >= long_rows:
        return ResponseLogits(_row_by_row(model, prompts, responses, max(n, 1)), r_ids, r_mask, len(prompts))
    uniq, index = distinct(prompts)
    p_ids, p_mask = left_padded(uniq, max(len(p) for p in uniq), pad)
    p_ids, p_mask = p_ids.to(device), p_mask.to(device)
    rows = torch.tensor(index, dtype=torch.long, device=device)
    last, cache = prompt_pass(model, p_ids, p_mask, rows)
    first = last[rows]  # [B, V]: predicts each row's first response token
    if n <= 1:  # every response has at most one token: the prompt pass predicted it
        return ResponseLogits(first[:, None], r_ids, r_mask, len(uniq))
    # Feed response tokens 0..n-2 (the last token's own prediction is never needed); pads sit at the end.
    real = torch.zeros((len(responses), n - 1), dtype=torch.long, device=device)
    for i, r in enumerate(responses):
        real[i, : min(len(r), n - 1)] = 1
    attn = torch.cat([p_mask[rows], real], dim=1)
    pos = p_mask.sum(-1)[rows][:, None] + torch.arange(n - 1, device=device)[None, :]
    rest = model(input_ids=r_ids[:, : n - 1], attention_mask=attn, position_ids=pos, **with_cache(model, cache)).logits
    return ResponseLogits(torch.cat([first[:, None], rest], dim=1), r_ids, r_mask, len(uniq))


def _row_by_row(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], width: int
) -> torch.Tensor:
    """[B, width, V] response logits, each row from its own unpadded forward of prompt + response (no attention
    mask: the fused causal kernel); positions past a row's response are 0."""
    device = next(model.parameters()).device
    out = []
    for p, r in zip(prompts, responses, strict=True):
        ids = torch.tensor([[*p, *r[:-1]]], dtype=torch.long, device=device)  # the last token predicts nothing
        if r:  # the last len(r) positions predict the response tokens
            logits = model(input_ids=ids, logits_to_keep=len(r)).logits[0]
        else:
            logits = torch.zeros((0, model.config.vocab_size), device=device, dtype=next(model.parameters()).dtype)
        out.append(torch.nn.functional.pad(logits, (0, 0, 0, width - len(r))))
    return torch.stack(out)
