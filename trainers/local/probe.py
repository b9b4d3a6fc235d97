"""A teacher-forced probe: the policy's probability of the correct action at known-good states.

`probe` scores (state context, correct action) pairs: ``p = exp(sum of the action's token log-probs, EOS
included)`` under the model, no sampling, no gradient, and returns the mean (``probe_p_correct``) and the mean over
pairs marked ``last`` (``probe_p_last``: the action that ends an oracle path, WebShop's ``buy now``). SERO's
diagnostic (docs/methods.md, SERO): if SERO's credit pushes the policy away from the right actions, this falls.

`oracle_path_pairs` is a source of such pairs for any env with a registered oracle (`envkit.registration.EnvEntry.oracle`:
WebShop's oracle path, ALFWorld's expert plan, Toy's walk): the oracle plays each task seed from reset
(`envkit.trainers.local.agent_bc.oracle_demos`, successes only) and every state on its path, with the token context
`envkit.trainers.local.multi_turn.play` would have built had the policy followed it, is paired with the oracle's
action there. `TrainConfig.probe_tasks` turns it on in the local trainer (every ``probe_every`` steps).

Example:
    >>> pairs = oracle_path_pairs(tok, "envkit/WebShop-v0", seeds=range(4), max_steps=15)  # doctest: +SKIP
    >>> probe(model, tok, pairs)["probe_p_last"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from envkit.trainers.local.agent_bc import demo_rows, oracle_demos
from envkit.trainers.local.prompt_encoding import encode_prompt, encode_text
from envkit.trainers.local.shared_prefix import response_logits

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["ProbePair", "oracle_path_pairs", "probe"]


@dataclass(frozen=True)
class ProbePair:
    """One known-good state and its correct action.

    Attributes:
        context: Token ids the policy sees before the action (first prompt, earlier turns), or a text prompt
            (encoded as one user turn by `probe`).
        action: The correct action's text (scored as its ids + EOS, as the policy emits it).
        last: The action ends its path (the committing action: WebShop's ``buy now``).
    """

    context: tuple[int, ...] | str
    action: str
    last: bool = False


def probe(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[ProbePair],
    *,
    system: str | None = None,
    chunk: int = 8,
) -> dict[str, float]:
    """Mean p(correct action) over `pairs` (and over the ``last`` ones); `chunk` pairs per forward.

    Returns:
        ``probe_p_correct``, ``probe_p_last`` (0 when no pair is ``last``), ``probe_pairs``.
    """
    if not pairs:
        raise ValueError("probe needs at least one (state, correct action) pair")
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    prompts, actions = [], []
    for p in pairs:
        ctx = encode_prompt(tokenizer, p.context, raw=False, system=system) if isinstance(p.context, str) else p.context
        if not ctx:
            raise ValueError("a probe pair's context is empty: give the state's prompt text or token ids")
        prompts.append(list(ctx))
        actions.append(encode_text(tokenizer, p.action) + eos)
    logp: list[float] = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for k in range(0, len(pairs), chunk):
            out = response_logits(model, prompts[k : k + chunk], actions[k : k + chunk], tokenizer.pad_token_id)
            lp = out.logprobs().float().cpu().numpy()
            logp += [float(lp[i, : len(a)].sum()) for i, a in enumerate(actions[k : k + chunk])]
    if was_training:
        model.train()
    p = np.exp(np.asarray(logp))
    last = [x for x, pair in zip(p, pairs, strict=True) if pair.last]
    return {
        "probe_p_correct": float(p.mean()),
        "probe_p_last": float(np.mean(last)) if last else 0.0,
        "probe_pairs": float(len(pairs)),
    }


def oracle_path_pairs(
    tokenizer: PreTrainedTokenizerBase, env_id: str, seeds: Sequence[int], max_steps: int, *, max_tokens: int = 4096
) -> list[ProbePair]:
    """Every (state on the oracle's path, oracle action) of the seeds the oracle solves, with the policy's context.

    Args:
        tokenizer: The policy's tokenizer (the contexts are its ids, as `play` builds them).
        env_id: An env with a registered oracle.
        seeds: Task seeds (reset seeds).
        max_steps: The oracle's step budget (the run's turn cap).
        max_tokens: Paths are cut after the last whole action that fits.
    """
    demos = oracle_demos(env_id, seeds, max_steps)
    if not demos:
        raise ValueError(f"the oracle of {env_id} solved none of seeds {list(seeds)} within {max_steps} steps")
    pairs = []
    for (_, steps), (prompt, resp, flags) in zip(demos, demo_rows(tokenizer, demos, max_tokens), strict=True):
        starts = [i for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1])]
        for j, s in enumerate(starts):
            pairs.append(ProbePair(tuple(prompt) + tuple(resp[:s]), steps[j].action, last=j == len(steps) - 1))
    return pairs
