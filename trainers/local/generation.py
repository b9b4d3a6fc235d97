"""Sampling and scoring token sequences with a transformers causal LM (token-in/token-out).

- `sample`: one `model.generate` call for a batch of token-id prompts, each row with its own temperature and,
  optionally, one extra input position appended after the prompt (EDEN's perturbed embedding row). Rows with an
  extra position and rows without go through the same call: clean rows get a masked pad before their last
  token. Each distinct prompt is prefilled once and its KV cache shared by the rows that repeat it.
- `score`: per-token log-probs and entropies of responses given prompts (the training forward pass); prompts
  here are always the CLEAN ones, so an EDEN extra position never reaches the loss.

Example:
    >>> import torch
    >>> from envkit.runtime.models import ModelConfig, load_model
    >>> model, tok = load_model(ModelConfig(path="tiny:arith", hidden_size=32, layers=1, device="cpu"))
    >>> out = sample(model, tok, [tok("1+2=")["input_ids"]], [1.0], max_new_tokens=3, seed=0)
    >>> len(out.tokens[0]) <= 3
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from envkit.runtime.hf_cache import with_cache
from envkit.trainers.local.shared_prefix import distinct, left_padded, prompt_pass

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class RowTemperature(LogitsProcessor):
    """Divides each row's logits by its own temperature (HF's warper only takes one value per call)."""

    def __init__(self, temperatures: torch.Tensor):
        self.temperatures = temperatures

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores / self.temperatures[:, None].to(scores.dtype)  # type: ignore[return-value]


class LogprobRecorder(LogitsProcessor):
    """Records the sampling log-prob of each generated token in O(B * V) memory.

    At call t it gathers the token sampled at t - 1 (the last column of `input_ids`) from the log-softmax of
    the scores it saw at t - 1; `finish` gathers the last token. Put it after every processor that changes the
    sampling distribution (the row temperature), and sample with no other warpers.
    """

    def __init__(self) -> None:
        self.prev: torch.Tensor | None = None
        self.logps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.logps.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of the T generated tokens (the last column of the output is `last_tokens`)."""
        if self.prev is not None:
            self.logps.append(self.prev.gather(-1, last_tokens[:, None]).squeeze(-1))
            self.prev = None
        return torch.stack(self.logps, dim=1) if self.logps else torch.zeros((len(last_tokens), 0))


@dataclass(frozen=True)
class Samples:
    """Generated responses.

    Attributes:
        tokens: Per row, the response token ids up to and including the first EOS (or `max_new_tokens` ids).
        truncated: Per row, True when no EOS came within `max_new_tokens`.
        logprobs: Per row, the sampling log-prob of each response token (with `return_logprobs`), else None.
    """

    tokens: list[list[int]]
    truncated: list[bool]
    logprobs: list[list[float]] | None = None


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    temperatures: Sequence[float],
    *,
    max_new_tokens: int,
    extra_rows: Sequence[torch.Tensor | None] | None = None,
    seed: int | None = None,
    stop_ids: Sequence[int] = (),
    return_logprobs: bool = False,
    shared_prefix: bool = True,
) -> Samples:
    """Sample one response per prompt in one `generate` call.

    Args:
        model: A causal LM.
        tokenizer: Its tokenizer (pad/eos ids).
        prompts: B token-id lists.
        temperatures: B sampling temperatures (> 0).
        max_new_tokens: Response length cap.
        extra_rows: Optional B entries: None, or a [d] embedding appended as one extra input position.
        seed: Seeds torch's generator before sampling (reproducible rollouts).
        stop_ids: Extra token ids that end a response (besides EOS), e.g. a newline in multi-turn play.
        return_logprobs: Also return each token's log-prob under the sampling distribution (temperature
            included), recorded during generation at no extra forward pass.
        shared_prefix: Prefill each distinct prompt once and share its KV cache among the rows that repeat it
            (a GRPO group), instead of prefilling every row. Same samples up to float rounding.
    """
    if seed is not None:
        torch.manual_seed(seed)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id
    eos = tokenizer.eos_token_id
    use_embeds = extra_rows is not None and any(r is not None for r in extra_rows)
    width = max(len(p) for p in prompts)
    ids, mask = left_padded(prompts, width, pad)
    kw, recorder = sampling_setup(tokenizer, temperatures, max_new_tokens, stop_ids, return_logprobs, device)
    # Every row's first width-1 columns are its prompt minus the last token, left-padded: shared by a group.
    cache = _prefix_cache(model, prompts, ids[:, :-1], mask[:, :-1]) if shared_prefix else None
    if cache is not None:
        kw.update(with_cache(model, cache))
    if use_embeds:
        assert extra_rows is not None
        # One more column. Noisy rows: [prompt, perturbed embedding]; clean rows: [prompt minus its last token,
        # a masked pad, the last token] (position ids follow the attention mask, so the pad is invisible).
        last = ids[:, -1:]
        ids = torch.cat([ids, torch.full_like(last, pad)], dim=1)
        mask = torch.cat([mask, torch.ones_like(last)], dim=1)
        embeds = model.get_input_embeddings()(ids.to(device))
        for i, row in enumerate(extra_rows):
            if row is not None:
                embeds[i, -1] = row.to(embeds.dtype)
            else:
                ids[i, -2:] = torch.tensor([pad, int(last[i])])
                mask[i, -2] = 0
                embeds[i, -2:] = model.get_input_embeddings()(ids[i, -2:].to(device))
        out = model.generate(inputs_embeds=embeds, attention_mask=mask.to(device), **kw)  # type: ignore[operator]  # transformers types generate on GenerationMixin, not PreTrainedModel
        new = out  # from embeddings, generate returns only the new tokens
    else:
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kw)  # type: ignore[operator]  # transformers types generate on GenerationMixin, not PreTrainedModel
        new = out[:, width:]
    return collect_samples(new, {eos, *stop_ids}, recorder)


def sampling_setup(
    tokenizer: PreTrainedTokenizerBase,
    temperatures: Sequence[float],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    return_logprobs: bool,
    device: torch.device | str,
    return_dict: bool = False,
) -> tuple[dict[str, Any], LogprobRecorder | None]:
    """`generate` keyword arguments for plain sampling with per-row temperatures (and the log-prob recorder)."""
    gen = GenerationConfig(
        do_sample=True,
        max_new_tokens=max_new_tokens,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, *stop_ids],
        return_dict_in_generate=return_dict,
    )
    temps = torch.tensor(list(temperatures), dtype=torch.float32, device=device)
    recorder = LogprobRecorder() if return_logprobs else None
    procs = LogitsProcessorList([RowTemperature(temps), *([recorder] if recorder else [])])
    return {"generation_config": gen, "logits_processor": procs}, recorder


def collect_samples(new: torch.Tensor, stops: set[int], recorder: LogprobRecorder | None) -> Samples:
    """Cut each generated row [B, T] after its first stop token; add the recorded log-probs."""
    tokens, truncated = [], []
    for row in new.tolist():
        cut = next((j for j, t in enumerate(row) if t in stops), None)
        tokens.append(row if cut is None else row[: cut + 1])
        truncated.append(cut is None)
    logprobs = None
    if recorder is not None:
        lp = recorder.finish(new[:, -1]).tolist()
        logprobs = [row[: len(t)] for row, t in zip(lp, tokens, strict=True)]
    return Samples(tokens=tokens, truncated=truncated, logprobs=logprobs)


def _prefix_cache(
    model: PreTrainedModel, prompts: Sequence[Sequence[int]], ids: torch.Tensor, mask: torch.Tensor
) -> Any:
    """KV cache of `ids` (the prompts minus their last token) with one prefill per distinct prompt, gathered per
    row. None (generate prefills every row itself) when prompts repeat less than twice on average, where the
    extra forward call costs more than it saves, or when some prompt has a single token (its prefix would be all
    padding)."""
    uniq, index = distinct(prompts)
    if len(prompts) < 2 * len(uniq) or min(len(p) for p in uniq) < 2:
        return None
    device = next(model.parameters()).device
    first = [index.index(k) for k in range(len(uniq))]  # the first row of each distinct prompt
    _, cache = prompt_pass(
        model, ids[first].to(device), mask[first].to(device), torch.tensor(index, dtype=torch.long, device=device)
    )
    return cache


@dataclass(frozen=True)
class Scored:
    """Per-token results of a forward pass over prompt+response sequences (right-padded).

    Attributes:
        logp: [B, T] log-prob of each response token (0 off the mask).
        entropy: [B, T] entropy of the next-token distribution at each response token (0 off the mask).
        mask: [B, T] 1.0 on response tokens that count for the loss, else 0.
    """

    logp: torch.Tensor
    entropy: torch.Tensor
    mask: torch.Tensor


def batch_sequences(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad: int,
    device: torch.device | str,
    loss_masks: Sequence[Sequence[int]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids [B, L], attention mask [B, L] and target mask [B, L-1] for prompt+response rows.

    The target mask marks the positions t whose NEXT token (t+1) is a response token (or, with `loss_masks`,
    a response token whose per-token flag is 1: multi-turn rows exclude observation tokens).
    """
    rows = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    target = torch.zeros((len(rows), max(width - 1, 1)), dtype=torch.float32)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[i, : len(rows[i])] = torch.tensor(rows[i])
        attn[i, : len(rows[i])] = 1
        flags = list(loss_masks[i]) if loss_masks is not None else [1] * len(r)
        for j, flag in enumerate(flags):
            target[i, len(p) + j - 1] = float(flag)
    return ids.to(device), attn.to(device), target.to(device)


def score(
    model: PreTrainedModel, ids: torch.Tensor, attn: torch.Tensor, target: torch.Tensor, with_entropy: bool = True
) -> Scored:
    """Log-probs (and entropies) of the target tokens; gradients flow when called outside `no_grad`."""
    from envkit.trainers.losses import token_entropy

    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1) * target
    ent = token_entropy(logits) * target if with_entropy else torch.zeros_like(logp)
    return Scored(logp=logp, entropy=ent, mask=target)
