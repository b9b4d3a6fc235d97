"""Multi-turn sampling that keeps the KV cache of every live episode from one turn to the next.

Without it, each turn's `generate` call prefills every episode's whole context again (the first prompt, all
earlier actions and observations): on long episodes (ALFWorld, WebShop) that prefill is most of a turn's cost,
and it grows with the square of the episode length. `TurnCache.sample` takes the same full contexts as
`envkit.trainers.local.generation.sample` but feeds the model only what the cache does not hold yet (the new observation
and, at most, the last sampled token), and keeps the cache that `generate` returns.

Rows are left-padded blocks in one batched cache: each call appends a block of width max(new tokens), each row
right-aligned in it, and the attention mask marks what is real. Position ids follow the mask (transformers
computes them from it), so masked slots in the middle of a row are invisible. After a call, the tokens a row
generated past its stop token (the pads generate keeps feeding until every row stops) are masked out too.
`keep(rows)` drops finished episodes between turns.

Example:
    >>> import torch
    >>> from envkit.runtime.models import ModelConfig, load_model
    >>> model, tok = load_model(ModelConfig(path="tiny:bytes", hidden_size=32, layers=1, device="cpu"))
    >>> cache = TurnCache(model, tok)
    >>> ctx = [tok("hello")["input_ids"], tok("hi there")["input_ids"]]
    >>> out = cache.sample(ctx, [1.0, 1.0], max_new_tokens=3, seed=0)
    >>> ctx = [c + t + tok(" obs")["input_ids"] for c, t in zip(ctx, out.tokens)]
    >>> cache.keep([1])
    >>> len(cache.sample(ctx[1:], [1.0], max_new_tokens=3, seed=1).tokens)
    1
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from envkit.runtime.hf_cache import output_cache, with_cache
from envkit.trainers.local.generation import Samples, collect_samples, sampling_setup
from envkit.trainers.local.shared_prefix import left_padded

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class TurnCache:
    """The batched KV cache of a set of live episodes (see the module docstring)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        self.model, self.tok = model, tokenizer
        self.device = next(model.parameters()).device
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # [B, L]: 1 on cached positions that are real tokens
        self.seen: list[int] = []  # per row: context tokens accounted for (in the cache or in `held`)
        self.held: list[list[int]] = []  # per row: accounted tokens not in the cache yet (a last sampled token)
        self.last: list[list[int]] = []  # per row: the response sampled by the last call

    def __len__(self) -> int:
        return len(self.seen)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only these rows (indices into the current rows, in the new order)."""
        rows = list(rows)
        if not self.seen:
            return
        if any(not 0 <= r < len(self.seen) for r in rows):
            raise IndexError(f"keep({rows}): this cache has {len(self.seen)} rows")
        if self.cache is not None and self.mask is not None:
            index = torch.tensor(rows, dtype=torch.long, device=self.device)
            self.cache.batch_select_indices(index)
            self.mask = self.mask[index]
        self.seen = [self.seen[r] for r in rows]
        self.held = [self.held[r] for r in rows]
        self.last = [self.last[r] for r in rows]

    @torch.no_grad()
    def sample(
        self,
        contexts: Sequence[Sequence[int]],
        temperatures: Sequence[float],
        *,
        max_new_tokens: int,
        seed: int | None = None,
        stop_ids: Sequence[int] = (),
        return_logprobs: bool = False,
    ) -> Samples:
        """Sample one response per row given each row's FULL context (as `envkit.trainers.local.generation.sample`).

        Each context must extend what this row's earlier calls saw: the context then, plus the response sampled
        then, plus new tokens (at least one new token per row after the first call).
        """
        if self.seen and len(contexts) != len(self.seen):
            raise ValueError(f"{len(contexts)} contexts for a cache of {len(self.seen)} rows: call keep() first")
        if not self.seen:
            self.seen = [0] * len(contexts)
            self.held = [[] for _ in contexts]
            self.last = [[] for _ in contexts]
        for i, c in enumerate(contexts):
            end = self.seen[i]
            if len(c) < end or list(c[end - len(self.last[i]) : end]) != self.last[i]:
                raise ValueError(
                    f"row {i}: a context must extend the previous call's context plus the response sampled then"
                )
        pending = [self.held[i] + list(c[self.seen[i] :]) for i, c in enumerate(contexts)]
        if any(not p for p in pending):
            raise ValueError("every row needs at least one new token since the last call (e.g. the observation)")
        if seed is not None:
            torch.manual_seed(seed)
        pad = self.tok.pad_token_id
        block, block_mask = left_padded(pending, max(len(p) for p in pending), pad)
        block, block_mask = block.to(self.device), block_mask.to(self.device)
        cached = 0 if self.mask is None else self.mask.shape[1]
        ids = torch.cat([torch.full((len(pending), cached), pad, dtype=torch.long, device=self.device), block], 1)
        mask = block_mask if self.mask is None else torch.cat([self.mask, block_mask], 1)
        kw, recorder = sampling_setup(
            self.tok, temperatures, max_new_tokens, stop_ids, return_logprobs, self.device, return_dict=True
        )
        if self.cache is not None:
            kw.update(with_cache(self.model, self.cache))
        out = self.model.generate(input_ids=ids, attention_mask=mask, **kw)  # type: ignore[operator]  # transformers types generate on GenerationMixin, not PreTrainedModel
        new = out.sequences[:, ids.shape[1] :]
        samples = collect_samples(new, {self.tok.eos_token_id, *stop_ids}, recorder)
        tokens = samples.tokens
        # The returned cache holds every input position and the first n_gen - 1 generated ones.
        n_gen = new.shape[1]
        gen_mask = torch.zeros((len(pending), max(n_gen - 1, 0)), dtype=torch.long, device=self.device)
        for i, t in enumerate(tokens):
            gen_mask[i, : min(len(t), n_gen - 1)] = 1
        self.cache = output_cache(out)
        self.mask = torch.cat([mask, gen_mask], 1)
        for i, (c, t) in enumerate(zip(contexts, tokens, strict=True)):
            self.seen[i] = len(c) + len(t)
            self.held[i] = t[n_gen - 1 :] if len(t) == n_gen else []
            self.last[i] = list(t)
        return samples
