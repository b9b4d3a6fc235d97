"""Supervised warm-up (teacher forcing on reference answers) before RL, for tasks that know their answers.

A randomly initialised model solves nothing, so every GRPO group would be all-fail (zero advantage). A short
warm-up on the task's reference answers brings it to a partly-solving start; explorer comparisons branch every
arm from the same warm-up checkpoint (FINDINGS, "Models and trainers").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from envkit.trainers.local.generation import batch_sequences, score
from envkit.trainers.local.prompt_encoding import encode_prompt, encode_text
from envkit.trainers.local.tasks import ProblemSource

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def sft_warmup(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: ProblemSource,
    *,
    steps: int,
    batch: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    distractor_ids: Sequence[int] = (),
    distractor_share: float = 0.0,
) -> list[float]:
    """Train on (prompt, answer + EOS) pairs for `steps` AdamW steps (5% linear warm-up, cosine decay to 0.1 lr).

    With `distractor_share` > 0, that share of the rows gets one token drawn uniformly from `distractor_ids`
    appended to the prompt (never in the loss), so the model learns to answer past one extra input position, as a
    pretrained LLM does; EDEN's noisy rollouts add such a position (a model trained without it reads the extra
    word as the first word of its answer).

    Returns the loss per step.

    Raises:
        ValueError: the task's problems have no reference answers.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)
    # Linear warm-up over 5% of the steps, then cosine decay to 10% of lr.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(i, steps) / steps)))
    )
    if not 0.0 <= distractor_share <= 1.0 or (distractor_share > 0 and not distractor_ids):
        raise ValueError(f"distractor_share must be in [0, 1] with distractor_ids given, got {distractor_share}")
    rng = np.random.default_rng([seed, 7919])
    extra = np.random.default_rng([seed, 7920])
    device = next(model.parameters()).device
    losses = []
    for _ in tqdm(range(steps), desc="sft warm-up", disable=not progress, leave=False):
        problems = task.sample(rng, batch)
        if any(p.answer is None for p in problems):
            raise ValueError(f"task {task.name!r} has no reference answers: set sft_steps=0")
        prompts = [encode_prompt(tokenizer, p.prompt, raw=task.raw_prompts) for p in problems]
        if distractor_share > 0:
            add = extra.random(len(prompts)) < distractor_share
            picks = extra.choice(np.asarray(distractor_ids), size=len(prompts))
            prompts = [[*q, int(t)] if a else q for q, a, t in zip(prompts, add, picks, strict=True)]
        answers = [[*encode_text(tokenizer, str(p.answer)), tokenizer.eos_token_id] for p in problems]
        ids, attn, target = batch_sequences(prompts, answers, tokenizer.pad_token_id, device)
        logp = score(model, ids, attn, target, with_entropy=False).logp
        loss = -logp.sum() / target.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses
