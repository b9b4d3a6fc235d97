"""XRPO: eXplore-eXploit GRPO (docs/methods.md section 6; arXiv 2510.06672), backend-agnostic planning and maths.

API summary:
    XrpoConfig(n0=4, n_max=None, n_phases=3, chunk_size=2, alpha=0.05, lam=0.03, icl=True, icl_k=2,
               icl_backend="auto", sharpen=True, lambda_n=2.5, kappa=0.5, success_threshold=0.5)
    half_width(rewards, alpha=0.05, n=None) -> float      t_{1-alpha/2, n-1} * s / sqrt(n)
    priority(rewards, step, lam=0.03, alpha=0.05, n=None) -> float   [h(n) - h(n+1)] + lam * sqrt(ln(1+T) / n)
    allocate(rewards_per_prompt, counts, budget, step, config) -> (P,) extra rollouts (greedy, chunked)
    phase_budgets(n_prompts, group_size, config) -> list[int]   phase 1 = n0 * P; the rest over phases 2..
    XrpoPlanner(config, n_prompts, step, group_size)       next_phase() / observe(...) / all_failed() / stats()
    sharpen(advantages, correct, mean_logprobs, group_ids, lambda_n=2.5, kappa=0.5) -> (N,)
    icl_prompts(prompts, problem_ids, seeded, corpus) -> (prompts, augmented mask)   all-fail ICL seeding
    IclCorpus, icl_prefix                                  re-exported from envkit.trainers.explorers.icl

Driving the planner (one training step, P prompts, total budget exactly ``P * group_size``)::

    planner = XrpoPlanner(cfg, n_prompts=P, step=T, group_size=G)
    while (alloc := planner.next_phase()) is not None:     # (P,) rollouts to generate in this phase
        texts, seeded = icl_prompts(prompts, ids, planner.all_failed(), corpus)   # all-fail -> ICL prefix
        ... generate alloc[p] rollouts of texts[p] ...
        planner.observe([rewards of prompt p in this phase for p in range(P)])
    # then: advantages per prompt group over all its rollouts, sharpen(...), add verified successes to the corpus
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from envkit.credit.step_table import factorize
from envkit.trainers.explorers.icl import IclCorpus, IclExample, icl_prefix

__all__ = [
    "IclCorpus",
    "IclExample",
    "XrpoConfig",
    "XrpoPlanner",
    "allocate",
    "half_width",
    "icl_prefix",
    "icl_prompts",
    "phase_budgets",
    "priority",
    "sharpen",
]


@dataclass(frozen=True)
class XrpoConfig:
    """XRPO settings (docs/methods.md section 6; (ours) = the project's choice where the paper is silent).

    The group size n (the baseline's rollouts per prompt; the step's total budget is ``n_prompts * n``) is the
    run's (``TrainConfig.group_size``, OpenRLHF's ``n_samples_per_prompt``), not XRPO's: `check_group(n)` checks
    the settings against it.
    """

    # --- phased rollout budget ---
    n0: int = 4
    """Phase-1 rollouts per prompt (the paper uses n0 >= 4; at least 2 for a sample std; at most n)."""
    n_max: int | None = None
    """Optional cap on rollouts per prompt (>= n so the budget can always be spent)."""
    n_phases: int = 3
    """Number of phases including phase 1 (3)."""
    chunk_size: int = 2
    """Rollouts handed to the top-priority prompt per greedy pick (2, ours)."""
    # --- priority of a prompt ---
    alpha: float = 0.05
    """t-interval level: half-width uses t_{1 - alpha/2, n-1} (0.05)."""
    lam: float = 0.03
    """Exploration-bonus weight lambda (0.03, ours)."""
    # --- ICL seeding of all-fail prompts ---
    icl: bool = True
    """Seed all-fail prompts with ICL examples."""
    icl_k: int = 2
    """Examples per ICL prefix (2)."""
    icl_backend: Literal["auto", "embedding", "bm25", "tfidf"] = "auto"
    """Similarity backend of the corpus: auto, embedding, bm25, tfidf."""
    icl_model_path: str | None = None
    """Local sentence-embedding model folder (optional)."""
    icl_loss_prompt: Literal["augmented", "clean"] = "augmented"
    """Prompt the loss sees for ICL-seeded rollouts: ``augmented`` (the ICL-prefixed prompt they were sampled from;
    ours) or ``clean`` (the plain prompt: the policy learns to produce the demonstrated answer without the
    demonstrations, off-policy with respect to that prompt)."""
    # --- novelty sharpening ---
    sharpen: bool = True
    """Apply novelty-guided sharpening to correct rollouts."""
    lambda_n: float = 2.5
    """Sharpening strength (2.5)."""
    kappa: float = 0.5
    """Sharpening cap relative to A (0.5)."""
    # --- success ---
    success_threshold: float = 0.5
    """A rollout with reward > this is a success (all-fail test, corpus)."""

    def __post_init__(self) -> None:
        checks = [
            (self.n0 >= 2, f"n0 must be >= 2, got {self.n0}"),
            (self.n_phases >= 1, f"n_phases must be >= 1, got {self.n_phases}"),
            (self.chunk_size >= 1, f"chunk_size must be >= 1, got {self.chunk_size}"),
            (0.0 < self.alpha < 1.0, f"alpha must be in (0, 1), got {self.alpha}"),
            (self.lam >= 0.0, f"lam must be >= 0, got {self.lam}"),
            (self.icl_k >= 1, f"icl_k must be >= 1, got {self.icl_k}"),
            (
                self.icl_loss_prompt in ("augmented", "clean"),
                f"icl_loss_prompt must be 'augmented' or 'clean', got {self.icl_loss_prompt!r}",
            ),
            (self.lambda_n >= 0.0 and self.kappa >= 0.0, "lambda_n and kappa must be >= 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"XrpoConfig: {msg}")

    def check_group(self, group_size: int) -> None:
        """Check these settings against the run's group size n.

        Raises:
            ValueError: n0 > n, n_max < n, or one phase with n0 != n (the message says what to set).
        """
        checks = [
            (self.n0 <= group_size, f"n0 ({self.n0}) must be <= the run's group size {group_size}"),
            (self.n_max is None or self.n_max >= group_size, f"n_max must be None or >= the group size {group_size}"),
            (self.n_phases > 1 or self.n0 == group_size, f"with n_phases=1 set n0 = the group size {group_size}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"XrpoConfig: {msg} (--xrpo.* or the run's --group-size / n_samples_per_prompt)")


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: int) -> float:
    """Student-t quantile (cached: the planner asks for the same few (q, df) pairs thousands of times per step)."""
    from scipy import stats  # imported here: scipy.stats takes ~1 s, which every --help would pay

    return float(stats.t.ppf(q, df))


def half_width(rewards: Any, alpha: float = 0.05, n: int | None = None) -> float:
    """Half-width ``t_{1-alpha/2, n-1} * s / sqrt(n)`` of the mean's t-interval.

    Args:
        rewards: Observed rewards of one prompt (s = their unbiased sample std; 0 with fewer than 2).
        alpha: Level.
        n: Rollout count to evaluate at (default ``len(rewards)``); must be >= 2.
    """
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    n = len(r) if n is None else n
    if n < 2:
        raise ValueError(f"half_width needs n >= 2 (a t quantile with n-1 degrees of freedom), got n={n}")
    s = float(r.std(ddof=1)) if len(r) >= 2 else 0.0
    return t_quantile(1.0 - alpha / 2.0, n - 1) * s / math.sqrt(n)


def priority(rewards: Any, step: int, lam: float = 0.03, alpha: float = 0.05, n: int | None = None) -> float:
    """``P_q = [h_q(n) - h_q(n+1)] + lam * sqrt(ln(1 + T) / n)`` with s from the observed rewards.

    Args:
        rewards: Observed rewards of prompt q.
        step: Training step T (>= 0).
        lam: Exploration-bonus weight.
        alpha: t-interval level.
        n: Rollouts planned so far (default ``len(rewards)``).
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    r = np.asarray(rewards, dtype=np.float64).reshape(-1)
    n = len(r) if n is None else n
    gain = half_width(r, alpha, n) - half_width(r, alpha, n + 1)
    return gain + lam * math.sqrt(math.log1p(step) / n)


def allocate(rewards_per_prompt: Sequence[Any], counts: Any, budget: int, step: int, config: XrpoConfig) -> np.ndarray:
    """Greedy chunked allocation of ``budget`` extra rollouts by priority (one phase).

    Each pick gives ``min(chunk_size, budget left, n_max - n_q)`` rollouts to the prompt with the highest
    priority (equal priorities: the one with the fewest planned rollouts, then the lowest index; at step 0 the
    bonus is 0 and every zero-variance prompt ties, so they share the budget round-robin), then recomputes that prompt's priority at its new planned count n_q
    (s stays the observed one: the new rewards are not known before generation).

    Args:
        rewards_per_prompt: Observed rewards of each prompt so far.
        counts: (P,) rollouts planned so far (observed + earlier picks).
        budget: Rollouts to hand out (spent exactly unless every prompt is at n_max).
        step: Training step T.
        config: chunk_size, n_max, alpha, lam.

    Returns:
        (P,) int64 extra rollouts per prompt, summing to ``budget``.

    Raises:
        ValueError: the budget cannot be spent under n_max.
    """
    n = np.asarray(counts, dtype=np.int64).copy()
    cap = int(n.max(initial=0)) + budget + 1 if config.n_max is None else config.n_max
    if int(np.maximum(cap - n, 0).sum()) < budget:
        raise ValueError(f"cannot hand out {budget} rollouts under n_max={config.n_max}; raise n_max")
    extra = np.zeros(len(n), dtype=np.int64)
    prio = np.array([priority(r, step, config.lam, config.alpha, int(c)) for r, c in zip(rewards_per_prompt, n)])
    left = budget
    while left > 0:
        candidates = np.where(n < cap, prio, -np.inf)
        tied = np.flatnonzero(candidates == candidates.max())
        q = int(tied[np.argmin(n[tied])])  # argmin takes the first of equal counts: prompt order
        give = int(min(config.chunk_size, left, cap - n[q]))
        n[q] += give
        extra[q] += give
        left -= give
        prio[q] = priority(rewards_per_prompt[q], step, config.lam, config.alpha, int(n[q]))
    return extra


def phase_budgets(n_prompts: int, group_size: int, config: XrpoConfig) -> list[int]:
    """Rollouts per phase: ``n0 * P`` first, then ``(group_size - n0) * P`` split evenly (earlier phases get the
    remainder). Sums to ``n_prompts * group_size`` exactly."""
    config.check_group(group_size)
    rest = (group_size - config.n0) * n_prompts
    later = config.n_phases - 1
    split = [rest // later + (1 if i < rest % later else 0) for i in range(later)] if later else []
    return [config.n0 * n_prompts, *split]


class XrpoPlanner:
    """Phased rollout allocation for one training step (see the module docstring for the loop).

    Args:
        config: XRPO settings.
        n_prompts: Prompts in the batch (P).
        step: Training step T (for the exploration bonus).
        group_size: The run's rollouts per prompt n: the step's budget is ``n_prompts * group_size``.
    """

    def __init__(self, config: XrpoConfig, n_prompts: int, step: int, group_size: int) -> None:
        if n_prompts < 1:
            raise ValueError(f"n_prompts must be >= 1, got {n_prompts}")
        self.config = config
        self.n_prompts = n_prompts
        self.step = step
        self.group_size = group_size
        self.budgets = phase_budgets(n_prompts, group_size, config)
        self.phase = 0
        self.counts = np.zeros(n_prompts, dtype=np.int64)
        self.rewards: list[list[float]] = [[] for _ in range(n_prompts)]
        self.history: list[np.ndarray] = []
        self._pending: np.ndarray | None = None

    @property
    def total_budget(self) -> int:
        return self.n_prompts * self.group_size

    @property
    def done(self) -> bool:
        return self._pending is None and self.phase >= len(self.budgets)

    def next_phase(self) -> np.ndarray | None:
        """(P,) rollouts to generate in the next phase, or None when the budget is spent.

        Raises:
            RuntimeError: the previous phase's rewards were not observed yet.
        """
        if self._pending is not None:
            raise RuntimeError("call observe() with the previous phase's rewards before next_phase()")
        while self.phase < len(self.budgets):
            budget = self.budgets[self.phase]
            if self.phase == 0:
                alloc = np.full(self.n_prompts, self.config.n0, dtype=np.int64)
            else:
                alloc = allocate(self.rewards, self.counts, budget, self.step, self.config)
            self.phase += 1
            if alloc.sum() == 0:
                continue
            self._pending = alloc
            return alloc.copy()
        return None

    def observe(self, rewards_per_prompt: Sequence[Sequence[float]]) -> None:
        """Record the rewards of the phase just generated (one sequence per prompt, lengths = the allocation)."""
        if self._pending is None:
            raise RuntimeError("observe() without a pending phase: call next_phase() first")
        if len(rewards_per_prompt) != self.n_prompts:
            raise ValueError(f"need rewards for {self.n_prompts} prompts, got {len(rewards_per_prompt)}")
        for p, (r, want) in enumerate(zip(rewards_per_prompt, self._pending)):
            if len(r) != want:
                raise ValueError(f"prompt {p}: {len(r)} rewards for {want} planned rollouts")
        for p, r in enumerate(rewards_per_prompt):
            self.rewards[p].extend(float(x) for x in r)
        self.counts += self._pending
        self.history.append(self._pending)
        self._pending = None

    def all_failed(self) -> np.ndarray:
        """(P,) bool: prompts with observed rollouts, none of them a success (reward > success_threshold)."""
        thr = self.config.success_threshold
        return np.array([len(r) > 0 and max(r) <= thr for r in self.rewards], dtype=bool)

    def stats(self) -> dict[str, float]:
        """Per-step diagnostics: rollout counts per prompt (min / max / mean / std) and phases run."""
        c = self.counts.astype(np.float64)
        return {
            "xrpo_rollouts_min": float(c.min()),
            "xrpo_rollouts_max": float(c.max()),
            "xrpo_rollouts_mean": float(c.mean()),
            "xrpo_rollouts_std": float(c.std()),
            "xrpo_phases": float(len(self.history)),
        }


def icl_prompts(
    prompts: Sequence[str],
    problem_ids: Sequence[str],
    seeded: Any,
    corpus: IclCorpus,
    queries: Sequence[str] | None = None,
) -> tuple[list[str], np.ndarray]:
    """The prompts to sample a phase from: ICL-augmented for the ``seeded`` (all-fail) prompts.

    Args:
        prompts: (P,) prompt texts as the policy sees them.
        problem_ids: (P,) ids (a problem never retrieves itself).
        seeded: (P,) bool, usually ``planner.all_failed()``.
        corpus: The verified-success corpus.
        queries: (P,) retrieval texts (default: the prompts; pass the bare problem text when prompts carry a
            chat template).

    Returns:
        (prompts with ``icl_prefix(examples)`` put in front where seeded and examples exist, (P,) bool mask of
        the prompts actually augmented). The loss is computed on the same augmented prompt (ours).
    """
    seed = np.asarray(seeded, dtype=bool)
    if not (len(prompts) == len(problem_ids) == len(seed)):
        raise ValueError("prompts, problem_ids and seeded must have the same length")
    out, used = list(prompts), np.zeros(len(prompts), dtype=bool)
    for p in np.flatnonzero(seed).tolist():
        q = prompts[p] if queries is None else queries[p]
        examples = corpus.retrieve(q, exclude=problem_ids[p])
        if examples:
            out[p] = icl_prefix(examples) + prompts[p]
            used[p] = True
    return out, used


def sharpen(
    advantages: Any,
    correct: Any,
    mean_logprobs: Any,
    group_ids: Any,
    lambda_n: float = 2.5,
    kappa: float = 0.5,
) -> np.ndarray:
    """Novelty-guided sharpening for correct rollouts.

    ``eta_i = exp(s_i - mean_group s)`` (s = mean token log-prob, group mean over ALL rollouts of the prompt),
    ``A_i+ = A_i + min(max(lambda_n * (1 - eta_i), 0), kappa * A_i)``; incorrect rollouts are unchanged. A rare
    (low-likelihood) correct rollout gets a bonus of at most ``kappa * A_i``.

    Args:
        advantages: (N,) advantages.
        correct: (N,) bool.
        mean_logprobs: (N,) mean token log-prob of each response under the policy that sampled it.
        group_ids: (N,) prompt ids.
        lambda_n: Strength.
        kappa: Cap relative to A_i.

    Returns:
        (N,) float64 sharpened advantages.
    """
    a = np.asarray(advantages, dtype=np.float64)
    c = np.asarray(correct, dtype=bool)
    s = np.asarray(mean_logprobs, dtype=np.float64)
    if not (a.shape == c.shape == s.shape) or a.ndim != 1:
        raise ValueError(f"advantages, correct, mean_logprobs must all be (N,); got {a.shape}, {c.shape}, {s.shape}")
    codes, n_groups = factorize(group_ids, len(a))
    mean_s = np.bincount(codes, weights=s, minlength=n_groups) / np.bincount(codes, minlength=n_groups)
    eta = np.exp(s - mean_s[codes])
    bonus = np.minimum(np.maximum(lambda_n * (1.0 - eta), 0.0), kappa * a)
    return np.where(c, a + bonus, a)
