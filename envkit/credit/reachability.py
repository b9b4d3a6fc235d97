"""SERO's policy-reachability weights for oracle steps and their application (docs/methods.md section 4, steps 5-6).

API summary (numpy, float64):
    ReachConfig(p_floor=0.05, tau_w=1.0, w_min=0.05)     the weight's settings, declared once (METHODS 4.5)
    reachability_weights(loglik_per_action (K,), p_floor=0.05, tau_w=1.0, w_min=0.05) -> (K,) weights
    choice_logprob(action_seq_logprobs (A,), chosen_index) -> float     admissible-choice variant of l_j
    apply_sero_weights(advantages (N,) or (N, T), weights (N,)) -> advantages * weights (row-wise)

For the K oracle steps of one continuation started at root t, ``loglik_per_action[j]`` is ``l_{t+j}``: the
current policy's length-normalised log-likelihood of oracle action t+j (computed without gradient). Then
``log w_k = sum_{j=t}^{k-1} max(l_j, log p_floor)`` and ``w_k = clip(exp(log w_k / tau_w), w_min, 1)``, with
``w_t = 1``: a step's own likelihood never enters its weight, only the actions that lead to its state.
Policy rows get weight 1. The clipped surrogate is positively homogeneous in A, so scaling the advantage equals
scaling the row's per-token loss (``losses.policy_loss(token_weights=...)`` is the other way to apply it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["ReachConfig", "apply_sero_weights", "choice_logprob", "reachability_weights"]


@dataclass(frozen=True)
class ReachConfig:
    """Settings of SERO's reachability weight ``w_k = clip(exp(sum_j max(l_j, log p_floor) / tau_w), w_min, 1)``.

    The one home of these defaults (docs/methods.md section 4.5); the SERO options of the oracle pipeline and both
    trainers nest it (``--sero.reach.p-floor``, ``--agent.sero-opts.reach.p-floor``, ``--sero-opts.reach.p-floor``).

    """

    # --- the weight of a continuation ---
    p_floor: float = 0.05
    """Per-step likelihood floor: each l_j is floored at ``log(p_floor)`` before summing."""
    tau_w: float = 1.0
    """Temperature: ``exp(log w / tau_w)``; > 1 flattens, < 1 sharpens."""
    w_min: float = 0.05
    """Lower clip of a weight."""
    # --- the first oracle action's ---
    first: Literal["own", "one"] = "one"
    """Weight of the first oracle action (the one at the root, a state the policy reached): ``one`` (default,
    the paper's) ``w_t = 1``, as reachability alone weighs it (the root is reached by the policy); ``own`` (our
    ablation) its own likelihood, ``clip(exp(max(l_t, log p_floor) / tau_w), w_min, 1)``, so the most
    off-policy sample of a rescue weighs what the policy's chance of taking it says. Later steps: the formula
    above."""

    def __post_init__(self) -> None:
        if not 0.0 < self.p_floor <= 1.0:
            raise ValueError(f"p_floor must be in (0, 1], got {self.p_floor}")
        if self.tau_w <= 0.0:
            raise ValueError(f"tau_w must be > 0, got {self.tau_w}")
        if not 0.0 <= self.w_min <= 1.0:
            raise ValueError(f"w_min must be in [0, 1], got {self.w_min}")
        if self.first not in ("own", "one"):
            raise ValueError(f"reach.first must be 'own' (its own likelihood) or 'one' (weight 1), got {self.first!r}")

    def weights(self, loglik_per_action: Any) -> np.ndarray:
        """`reachability_weights` with these settings, and the first action's weight by ``first``."""
        w = reachability_weights(loglik_per_action, self.p_floor, self.tau_w, self.w_min)
        if len(w) and self.first == "own":
            own = max(float(np.asarray(loglik_per_action, dtype=np.float64)[0]), math.log(self.p_floor))
            w[0] = min(max(math.exp(own / self.tau_w), self.w_min), 1.0)
        return w


def reachability_weights(
    loglik_per_action: Any,
    p_floor: float = ReachConfig.p_floor,
    tau_w: float = ReachConfig.tau_w,
    w_min: float = ReachConfig.w_min,
) -> np.ndarray:
    """Weights of one oracle continuation's steps.

    Args:
        loglik_per_action: (K,) policy log-likelihood l_j (<= 0) of each oracle action, in order from the root.
        p_floor: Each step's likelihood is floored at ``log(p_floor)`` before summing.
        tau_w: Temperature: ``exp(log w / tau_w)``; > 1 flattens, < 1 sharpens.
        w_min: Lower clip of a weight.

    Returns:
        (K,) float64 weights in [w_min, 1]; the first is 1. Empty in, empty out.
    """
    ReachConfig(p_floor, tau_w, w_min)  # validates the three settings
    ll = np.asarray(loglik_per_action, dtype=np.float64)
    if ll.ndim != 1:
        raise ValueError(f"loglik_per_action must be 1-D (one value per oracle step), got shape {ll.shape}")
    if np.any(np.isnan(ll)):
        raise ValueError("loglik_per_action contains NaN")
    floored = np.maximum(ll, math.log(p_floor))
    log_w = np.concatenate([[0.0], np.cumsum(floored)[:-1]]) if len(ll) else np.zeros(0)
    w = np.clip(np.exp(log_w / tau_w), w_min, 1.0)
    if len(w):
        w[0] = 1.0
    return w


def choice_logprob(action_seq_logprobs: Any, chosen_index: int) -> float:
    """Log-probability of the chosen action among the admissible ones: ``log_softmax(seq_logprobs)[chosen]``.

    Args:
        action_seq_logprobs: (A,) sequence log-probabilities (sum over tokens) of each admissible action
            under the current policy.
        chosen_index: Index of the oracle's action among them.

    Returns:
        A value <= 0 usable as ``l_j`` in `reachability_weights`.
    """
    x = np.asarray(action_seq_logprobs, dtype=np.float64)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError(f"action_seq_logprobs must be a non-empty 1-D array, got shape {x.shape}")
    if not 0 <= chosen_index < len(x):
        raise IndexError(f"chosen_index {chosen_index} out of range for {len(x)} admissible actions")
    m = float(np.max(x))
    return float(x[chosen_index] - (m + math.log(float(np.sum(np.exp(x - m))))))


def apply_sero_weights(advantages: Any, weights: Any) -> np.ndarray:
    """Scale each row's advantage by its reachability weight (1 for policy rows).

    Args:
        advantages: (N,) per-row or (N, T) per-token advantages.
        weights: (N,) non-negative finite weights.

    Returns:
        float64 array of the advantages' shape.
    """
    a = np.asarray(advantages, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or a.ndim == 0 or a.shape[0] != w.shape[0]:
        raise ValueError(f"weights must be (N,) matching advantages' first dim; got {w.shape} vs {a.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0")
    return a * w.reshape((-1,) + (1,) * (a.ndim - 1))
