"""Policy scorers: how likely the current policy is to take an action (SERO's reachability weights).

A scorer returns, for each (turn, action) pair, the policy's *length-normalised* log-likelihood of the action
text given the turn's prompt (mean log-probability per action token, no gradient): ``l_j`` of docs/methods.md section 4.
For the admissible-choice variant it also returns *sequence* log-probabilities (sums over tokens) of every
candidate action, which `envkit.credit.reachability.choice_logprob` turns into a softmax choice probability.

Implementations:
    `TransformersScorer`: a local causal LM (a Hugging Face folder, a ``.gguf`` file, ``smollm2``, ``tiny:bytes``;
        loaded by `envkit.runtime.models.load_model`), prompts from `envkit.oracles.prompts`.
    `UniformScorer`: a policy uniform over the admissible actions (for tests and as a model-free default).

Example:
    >>> from envkit.policies import PolicyInput
    >>> s = UniformScorer()
    >>> round(s.loglik([PolicyInput("obs", {"admissible_actions": ["a", "b", "c", "d"]})], ["a"])[0], 4)
    -1.3863
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from envkit.errors import EnvkitError, require
from envkit.oracles.prompts import PromptConfig, admissible, render, turn_messages
from envkit.policies import PolicyInput
from envkit.runtime.hf_cache import output_cache, with_cache

if TYPE_CHECKING:  # transformers is heavy: imported only where a model is loaded
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@runtime_checkable
class Scorer(Protocol):
    """Scores actions under the current policy (no gradient)."""

    name: str

    def loglik(self, batch: Sequence[PolicyInput], actions: Sequence[str]) -> list[float]:
        """Length-normalised log-likelihood (<= 0) of ``actions[i]`` given the turn ``batch[i]``."""
        ...

    def sequence_logprobs(self, x: PolicyInput, candidates: Sequence[str]) -> list[float]:
        """Sequence log-probability (sum over the action's tokens) of every candidate action at turn `x`."""
        ...


class UniformScorer:
    """The policy that picks uniformly among the admissible actions.

    ``loglik = -log(A)`` with A the number of admissible actions (each action counts as one token), and every
    candidate gets the same sequence log-probability (choice probability ``1/len(candidates)``).

    Args:
        fallback_actions: A used when the env lists no admissible actions (free-text domains such as SWE).
    """

    name = "uniform"

    def __init__(self, fallback_actions: int = 20):
        if fallback_actions < 1:
            raise ValueError(f"fallback_actions must be >= 1, got {fallback_actions}")
        self.fallback_actions = fallback_actions

    def _n(self, x: PolicyInput) -> int:
        return len(admissible(x.info)) or self.fallback_actions

    def loglik(self, batch: Sequence[PolicyInput], actions: Sequence[str]) -> list[float]:
        _check_lengths(batch, actions)
        return [-math.log(self._n(x)) for x in batch]

    def sequence_logprobs(self, x: PolicyInput, candidates: Sequence[str]) -> list[float]:
        return [-math.log(self._n(x))] * len(candidates)


class TransformersScorer:
    """Scores actions with a local causal LM (teacher forcing, one forward pass per mini-batch).

    Args:
        model: A model path (anything `envkit.runtime.models.ModelConfig.path` accepts) or a loaded causal LM.
        tokenizer: The tokenizer, when `model` is a loaded model.
        device: ``cpu``, ``cuda`` or ``auto``.
        batch_size: Pairs per forward pass.
        max_length: Prompts are cut from the left so that prompt + action fits.
        prompt: How turns are rendered (the same as the policy's).
        prefix_cache: `sequence_logprobs` (many candidates, one turn) encodes the prompt once and scores the
            candidates on copies of its key/value cache; False re-encodes prompt + candidate each time.
    """

    name = "transformers"

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        device: str = "auto",
        batch_size: int = 8,
        max_length: int = 1024,
        prompt: PromptConfig | None = None,
        prefix_cache: bool = True,
    ):
        self.prefix_cache = prefix_cache
        self.torch = require("torch", "train", what="the transformers scorer")
        if isinstance(model, str):
            from envkit.runtime.models import ModelConfig, load_model

            model, tokenizer = load_model(ModelConfig(path=model, device=device))
        elif tokenizer is None:
            raise ValueError("TransformersScorer needs the tokenizer when given a loaded model")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.prompt = prompt or PromptConfig()

    def _pair_ids(self, x: PolicyInput, action: str) -> tuple[list[int], int]:
        text = render(self.tokenizer, turn_messages(x, self.prompt))
        p = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        a = self.tokenizer(action, add_special_tokens=False)["input_ids"]
        if not a:  # an empty action: score the end-of-sequence token instead
            a = [self.tokenizer.eos_token_id]
        a = a[: self.max_length - 1]
        p = p[-(self.max_length - len(a)) :]
        return p + a, len(a)

    def _sums(self, pairs: Sequence[tuple[PolicyInput, str]]) -> list[tuple[float, int]]:
        torch = self.torch
        out: list[tuple[float, int]] = []
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        for start in range(0, len(pairs), self.batch_size):
            chunk = [self._pair_ids(x, a) for x, a in pairs[start : start + self.batch_size]]
            width = max(len(ids) for ids, _ in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, (seq, _) in enumerate(chunk):
                ids[i, : len(seq)] = torch.tensor(seq)
                mask[i, : len(seq)] = 1
            with torch.no_grad():
                logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1)
            target = ids[:, 1:].to(device)
            tok_lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
            for i, (seq, n_act) in enumerate(chunk):
                end = len(seq) - 1  # position predicting the last token
                out.append((float(tok_lp[i, end - n_act : end].sum()), n_act))
        return out

    def loglik(self, batch: Sequence[PolicyInput], actions: Sequence[str]) -> list[float]:
        _check_lengths(batch, actions)
        return [s / n for s, n in self._sums(list(zip(batch, actions, strict=True)))]

    def sequence_logprobs(self, x: PolicyInput, candidates: Sequence[str]) -> list[float]:
        if not self.prefix_cache or not candidates:
            return [s for s, _ in self._sums([(x, c) for c in candidates])]
        return self._cached_sums(x, candidates)

    def _cached_sums(self, x: PolicyInput, candidates: Sequence[str]) -> list[float]:
        """Sequence log-probs of the candidates, encoding the shared prompt once (key/value cache copies)."""
        import copy

        torch = self.torch
        device = next(self.model.parameters()).device
        cands = [self.tokenizer(c, add_special_tokens=False)["input_ids"] or [self.tokenizer.eos_token_id]
                 for c in candidates]  # fmt: skip
        longest = max(len(c) for c in cands)
        cands = [c[: self.max_length - 1] for c in cands]
        text = render(self.tokenizer, turn_messages(x, self.prompt))
        p = self.tokenizer(text, add_special_tokens=False)["input_ids"][
            -(self.max_length - min(longest, self.max_length - 1)) :
        ]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with torch.no_grad():
            first = self.model(input_ids=torch.tensor([p], device=device), use_cache=True)
            cache, head = output_cache(first), first.logits[:, -1:].float()
            out: list[float] = []
            for start in range(0, len(cands), self.batch_size):
                chunk = cands[start : start + self.batch_size]
                b, width = len(chunk), max(len(c) for c in chunk)
                ids = torch.full((b, width), pad, dtype=torch.long, device=device)
                mask = torch.zeros((b, width), dtype=torch.long, device=device)
                for i, c in enumerate(chunk):
                    ids[i, : len(c)] = torch.tensor(c, device=device)
                    mask[i, : len(c)] = 1
                kv = copy.deepcopy(cache)
                kv.batch_repeat_interleave(b)
                attn = torch.cat([torch.ones((b, len(p)), dtype=torch.long, device=device), mask], dim=1)
                pos = torch.arange(len(p), len(p) + width, device=device).unsqueeze(0).expand(b, -1)
                logits = self.model(
                    input_ids=ids, attention_mask=attn, position_ids=pos, **with_cache(self.model, kv)
                ).logits
                logits = torch.cat([head.expand(b, -1, -1), logits[:, :-1].float()], dim=1)
                tok_lp = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
                out.extend(float(v) for v in (tok_lp * mask).sum(dim=1))
        return out


def _check_lengths(batch: Sequence[PolicyInput], actions: Sequence[str]) -> None:
    if len(batch) != len(actions):
        raise ValueError(f"scorer got {len(batch)} turns but {len(actions)} actions; pass one action per turn")


SCORERS = ("uniform", "hf:PATH")


def make_scorer(spec: str, *, device: str = "auto") -> Scorer:
    """Build a scorer from a spec: ``uniform`` or ``hf:PATH`` (a local model; see `TransformersScorer`).

    Raises:
        EnvkitError: the spec is not one of those.
    """
    if spec == "uniform":
        return UniformScorer()
    if spec.startswith("hf:") and len(spec) > 3:
        return TransformersScorer(spec[3:], device=device)
    raise EnvkitError(
        f"unknown scorer {spec!r}: use 'uniform' or 'hf:PATH' (a local Hugging Face folder, a .gguf file, "
        "'smollm2' or 'tiny:bytes')"
    )
