"""Single-turn rollout collection for the local trainer: plain GRPO groups, EDEN noisy rows, XRPO planning.

`collect` samples the responses of one training step and scores them with the task's verifier; the trainer
then computes advantages (`envkit.credit.advantages`) and applies the explorer's post-processing (EDEN's absorb,
XRPO's sharpening) before the update. The explorer maths lives in `envkit.trainers.explorers`; this module only
drives the model with it:

- ``none``: `group_size` rollouts per prompt at `temperature`, one `generate` call.
- ``eden``: per prompt, K_r clean rollouts plus K_n noisy ones; each noisy row appends ONE extra input position
  (the prompt's anchor, perturbed per rollout) and samples at the warmed-up noisy temperature. Clean and noisy
  rows share one `generate` call. The rows keep the CLEAN prompt ids for the loss.
- ``xrpo``: the planner hands out the same total budget in phases; prompts whose rollouts all failed so far
  get an ICL prefix of verified solutions; the loss uses the same augmented prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envkit.trainers.local.generation import sample
from envkit.trainers.local.prompt_encoding import decode
from envkit.trainers.local.tasks import Problem, ProblemSource

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Rollout:
    """One sampled response, a frozen value: a step's credit is `envkit.trainers.local.contracts.RolloutCredit`,
    returned by the explorer, not written into the rollouts.

    Attributes:
        group: Index of its prompt in the step's batch.
        prompt_ids: The prompt the loss scores it under (clean; ICL-augmented for XRPO seeded rows).
        response_ids: Response token ids (EOS included when it came).
        text: Decoded response.
        truncated: No EOS within the token cap.
        reward: Verifier reward in [0, 1] (0 until verified: `verify` returns scored copies).
        noisy: EDEN noisy rollout.
        icl: XRPO rollout sampled from an ICL-augmented prompt.
        logprobs: The response tokens' sampling log-probs, when recorded (``generate_rows(return_logprobs=True)``).
    """

    group: int
    prompt_ids: list[int]
    response_ids: list[int]
    text: str
    truncated: bool
    reward: float = 0.0
    noisy: bool = False
    icl: bool = False
    logprobs: tuple[float, ...] | None = None


def generate_rows(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[tuple[int, list[int]]],
    temperatures: Sequence[float],
    *,
    max_new_tokens: int,
    seed: int,
    extra_rows: Sequence[Any] | None = None,
    return_logprobs: bool = False,
) -> list[Rollout]:
    """Sample one response for each (group, prompt ids) row in one `generate` call.

    With `return_logprobs`, each rollout's `Rollout.logprobs` holds its tokens' sampling log-probs.
    """
    out = sample(
        model,
        tokenizer,
        [p for _, p in rows],
        temperatures,
        max_new_tokens=max_new_tokens,
        extra_rows=extra_rows,
        seed=seed,
        return_logprobs=return_logprobs,
    )
    logprobs: Sequence[Sequence[float] | None] = out.logprobs if out.logprobs is not None else [None] * len(rows)
    rows_out = zip(rows, out.tokens, out.truncated, logprobs, strict=True)
    return [
        Rollout(g, list(p), t, decode(tokenizer, t), tr, logprobs=None if lp is None else tuple(lp))
        for (g, p), t, tr, lp in rows_out
    ]


def verify(task: ProblemSource, problems: Sequence[Problem], rollouts: Sequence[Rollout]) -> list[Rollout]:
    """The rollouts with their rewards from the task's verifier (one batch call)."""
    rewards = task.score([problems[r.group] for r in rollouts], [r.text for r in rollouts])
    return [dataclasses.replace(r, reward=float(reward)) for r, reward in zip(rollouts, rewards, strict=True)]


def collect_plain(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: ProblemSource,
    problems: Sequence[Problem],
    prompts: Sequence[list[int]],
    *,
    group_size: int,
    temperature: float,
    max_new_tokens: int,
    seed: int,
) -> list[Rollout]:
    """GRPO: `group_size` rollouts per prompt, one generate call, verified."""
    rows = [(g, p) for g, p in enumerate(prompts) for _ in range(group_size)]
    rollouts = generate_rows(
        model, tokenizer, rows, [temperature] * len(rows), max_new_tokens=max_new_tokens, seed=seed
    )
    return verify(task, problems, rollouts)
