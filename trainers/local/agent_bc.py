"""Oracle demonstrations on agent envs and a behaviour-cloning warm-up on them, token-in/token-out.

`oracle_demos` lets the env's oracle play tasks from reset (`envkit.oracles.base.run_oracle`) and keeps the
successful episodes; `demo_rows` turns each into the same token row that `envkit.trainers.local.multi_turn.play` builds for
a policy episode (first prompt, then each action's ids + EOS with loss flag 1 and the ids of the text that
follows, flag 0), so `bc_warmup` trains exactly the ids the policy will later sample and see. Used by
`scripts/compare_agents.py` to give a small CPU model a partly-solving start ("a short supervised warm-up on a
few oracle trajectories").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from envkit.core import Step
from envkit.oracles.base import make_oracle, run_oracle
from envkit.registration import make
from envkit.trainers.local.generation import batch_sequences, score
from envkit.trainers.local.multi_turn import continuation_ids
from envkit.trainers.local.prompt_encoding import encode_prompt, encode_text

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def oracle_demos(env_id: str, seeds: Sequence[int], max_steps: int) -> list[tuple[str, tuple[Step, ...]]]:
    """(first observation, oracle steps) of every seed whose oracle episode the env confirms as a success."""
    env = make(env_id).unwrapped
    oracle = make_oracle(env_id)
    out = []
    for s in seeds:
        obs, info = env.reset(seed=int(s))
        run = run_oracle(env, oracle, obs, info, max_steps=max_steps)
        if run.success:
            out.append((str(obs), run.steps))
    return out


def demo_words(demos: Sequence[tuple[str, Sequence[Step]]]) -> set[str]:
    """Every word (``\\w+`` run) and punctuation run of the demos' observations and actions (a tokenizer's
    vocabulary)."""
    words: set[str] = set()
    for first, steps in demos:
        for text in (first, *(s.next_observation for s in steps), *(s.action for s in steps)):
            words.update(re.findall(r"\w+|[^\w\s]+", text))
    return words


def demo_rows(
    tokenizer: PreTrainedTokenizerBase, demos: Sequence[tuple[str, Sequence[Step]]], max_tokens: int
) -> list[tuple]:
    """(prompt ids, response ids, loss flags) per demo, as `envkit.trainers.local.multi_turn.play` would build them; demos
    longer than `max_tokens` are cut after their last whole action that fits."""
    eos = [tokenizer.eos_token_id]
    rows = []
    for first, steps in demos:
        prompt = encode_prompt(tokenizer, first, raw=False)
        resp: list[int] = []
        flags: list[int] = []
        for j, st in enumerate(steps):
            act = encode_text(tokenizer, st.action) + eos
            if len(prompt) + len(resp) + len(act) > max_tokens:
                break
            resp += act
            flags += [1] * len(act)
            if j + 1 < len(steps):
                more = continuation_ids(tokenizer, act, st.next_observation, raw=False)
                resp += more
                flags += [0] * len(more)
        if any(flags):
            rows.append((prompt, resp, flags))
    return rows


def bc_warmup(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[tuple],
    *,
    steps: int,
    batch: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    every: int = 0,
    callback: Callable[[int], None] | None = None,
) -> list[float]:
    """`steps` AdamW steps of teacher forcing on the action tokens of `rows`; returns the loss per step.
    With `callback`, ``callback(k)`` runs after every `every`-th step k (1-based; a checkpoint criterion reads the
    model there, in eval mode, and the loop goes on in train mode: the steps are the same with or without it)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng([seed, 4241])
    device = next(model.parameters()).device
    model.train()
    losses = []
    for _ in range(steps):
        pick = [rows[i] for i in rng.integers(0, len(rows), size=min(batch, len(rows))).tolist()]
        ids, attn, target = batch_sequences(
            [p for p, _, _ in pick], [r for _, r, _ in pick], tokenizer.pad_token_id, device, [f for _, _, f in pick]
        )
        logp = score(model, ids, attn, target, with_entropy=False).logp
        loss = -logp.sum() / target.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.item()))
        if callback is not None and every and len(losses) % every == 0:
            model.eval()
            callback(len(losses))
            model.train()
    return losses
