"""Advantage estimators of the GRPO family (docs/methods.md sections 1-4): pure numpy, float64.

API summary (numpy in, numpy out; N = rows, G = rollouts in a group):
    group_advantages(rewards (N,), group_ids (N,), estimator="grpo"|"grpo_mean"|"rloo"|"dr_grpo", eps) -> (N,)
    zero_advantage_fraction(advantages (N,) or (N, T), group_ids (N,), atol=0.0) -> float
    pass_at_k(n, c, k) -> float                                       unbiased 1 - C(n-c, k) / C(n, k)
    StepTable(...)                                                    flat table of multi-turn step rows
    gigpo_advantages(table, *, gamma, omega, episode_stats, norm, invalid_penalty, eps) -> GigpoResult
    graphgpo_advantages(table, *, gamma_g, beta_g, beta_e, reward_scale, ..., extra_transitions) -> GraphgpoResult
    build_transition_graph(transitions) -> TransitionGraph            (re-exported from envkit.credit.graph)
    distances_to_success(graph) -> dict[node, int]                    (re-exported from envkit.credit.graph)
    reachability_weights(loglik_per_action (K,), p_floor, tau_w, w_min) -> (K,)   (envkit.credit.reachability)
    choice_logprob(action_seq_logprobs (A,), chosen_index) -> float               (envkit.credit.reachability)
    apply_sero_weights(advantages (N,) or (N, T), weights (N,)) -> same shape as advantages

Conventions (docs/methods.md, normalisation): ``norm(v) = (v - mean(v)) / (std(v) + eps)`` with the unbiased std
(``norm="std"``); ``norm="mean"`` divides by 1. A group whose values are all equal gets exactly 0 and a singleton
group gets 0 (never NaN). Group ids may be any hashable values (ints, strings); groups may have different sizes.

Example:
    >>> group_advantages([1, 0, 0, 1], [0, 0, 1, 1], estimator="rloo").tolist()
    [1.0, -1.0, -1.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from envkit.credit.defaults import GAMMA_G
from envkit.credit.graph import (
    SUCCESS_NODE,
    TERMINAL_NODE,
    TransitionGraph,
    build_transition_graph,
    distances_to_success,
)
from envkit.credit.reachability import apply_sero_weights, choice_logprob, reachability_weights
from envkit.credit.step_table import StepTable, factorize

__all__ = [
    "ESTIMATORS",
    "SUCCESS_NODE",
    "TERMINAL_NODE",
    "GigpoResult",
    "GraphgpoResult",
    "StepTable",
    "TransitionGraph",
    "apply_sero_weights",
    "build_transition_graph",
    "choice_logprob",
    "discounted_returns",
    "distances_to_success",
    "factorize",
    "gigpo_advantages",
    "graphgpo_advantages",
    "group_advantages",
    "group_normalize",
    "pass_at_k",
    "reachability_weights",
    "zero_advantage_fraction",
]

Estimator = Literal["grpo", "grpo_mean", "rloo", "dr_grpo"]
Norm = Literal["std", "mean"]
ESTIMATORS: tuple[str, ...] = ("grpo", "grpo_mean", "rloo", "dr_grpo")


def _as_1d(name: str, values: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D with one value per row, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} rows but the other inputs have {n}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; fix the reward function before computing advantages")
    return arr


def _group_stats(
    v: np.ndarray, codes: np.ndarray, n_groups: int, norm: Norm, eps: float, m: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group (mean, divisor, degenerate) over the rows in mask m."""
    cnt = np.bincount(codes[m], minlength=n_groups).astype(np.float64)
    total = np.bincount(codes[m], weights=v[m], minlength=n_groups)
    mean = np.divide(total, cnt, out=np.zeros(n_groups), where=cnt > 0)
    sq = np.bincount(codes[m], weights=(v[m] - mean[codes[m]]) ** 2, minlength=n_groups)
    std = np.sqrt(np.divide(sq, cnt - 1, out=np.zeros(n_groups), where=cnt > 1))
    lo = np.full(n_groups, np.inf)
    hi = np.full(n_groups, -np.inf)
    np.minimum.at(lo, codes[m], v[m])
    np.maximum.at(hi, codes[m], v[m])
    degenerate = (cnt < 2) | (lo == hi)
    divisor = std + eps if norm == "std" else np.ones(n_groups)
    divisor[degenerate] = 1.0  # those rows are set to 0 anyway; avoids 0/0 with eps=0
    return mean, divisor, degenerate


def group_normalize(
    values: Any, group_ids: Any, *, norm: Norm = "std", eps: float = 1e-6, stats_mask: Any = None
) -> np.ndarray:
    """Normalise values within groups: ``(v - mean_g) / (std_g + eps)`` (``norm="std"``) or ``v - mean_g``.

    Args:
        values: (N,) values.
        group_ids: (N,) hashable group ids (any order, variable group sizes).
        norm: "std" (unbiased std, docs/methods.md ``norm``) or "mean" (docs/methods.md ``mean``: divide by 1).
        eps: Added to the std.
        stats_mask: Optional (N,) bool: only these rows enter the group mean/std (all rows are normalised).
            A group with fewer than 2 stats rows, or whose stats rows are all equal, gets 0 for every row.

    Returns:
        (N,) float64; exactly 0 for singleton and all-equal groups.
    """
    v = _as_1d("values", values)
    codes, n_groups = factorize(group_ids, len(v))
    if norm not in ("std", "mean"):
        raise ValueError(f"norm must be 'std' or 'mean', got {norm!r}")
    m = np.ones(len(v), dtype=bool) if stats_mask is None else np.asarray(stats_mask, dtype=bool)
    if m.shape != v.shape:
        raise ValueError(f"stats_mask has shape {m.shape}, expected {v.shape}")
    if len(v) == 0:
        return np.zeros(0)
    mean, divisor, degenerate = _group_stats(v, codes, n_groups, norm, eps, m)
    adv = (v - mean[codes]) / divisor[codes]
    adv[degenerate[codes]] = 0.0
    return adv


def group_advantages(rewards: Any, group_ids: Any, estimator: Estimator = "grpo", eps: float = 1e-6) -> np.ndarray:
    """Outcome advantages of single-turn rollouts (docs/methods.md section 1).

    Args:
        rewards: (N,) scalar reward per rollout.
        group_ids: (N,) hashable id of each rollout's prompt; groups may have different sizes.
        estimator: "grpo" ``(r - mean) / (std + eps)`` (unbiased std); "grpo_mean" ``r - mean``; "rloo"
            ``r_i - mean_{j != i} r_j``; "dr_grpo" ``r - mean`` (Dr. GRPO also drops the length normalisation
            in the loss: use ``losses.policy_loss(agg="token_sum_norm")``).
        eps: Added to the std ("grpo" only).

    Returns:
        (N,) float64 advantage per rollout, to broadcast to its response tokens. All-equal and singleton
        groups get exactly 0.
    """
    if estimator in ("grpo", "grpo_mean", "dr_grpo"):
        return group_normalize(rewards, group_ids, norm="std" if estimator == "grpo" else "mean", eps=eps)
    if estimator == "rloo":
        r = _as_1d("rewards", rewards)
        codes, n_groups = factorize(group_ids, len(r))
        cnt = np.bincount(codes, minlength=n_groups).astype(np.float64)[codes]
        # r_i - mean_{j != i} r_j == G / (G - 1) * (r_i - mean_g r)
        centred = group_normalize(r, group_ids, norm="mean")
        return np.where(cnt > 1, centred * cnt / np.maximum(cnt - 1, 1), 0.0)
    raise ValueError(f"unknown estimator {estimator!r}; choose one of {ESTIMATORS}")


def zero_advantage_fraction(advantages: Any, group_ids: Any, atol: float = 0.0) -> float:
    """Share of groups whose advantages are all zero (|A| <= atol): the explorers' headline diagnostic.

    Args:
        advantages: (N,) per-rollout advantages or (N, T) per-token advantages (a row counts as zero when
            all its entries are).
        group_ids: (N,) hashable group ids.
        atol: Tolerance for "zero".

    Returns:
        Fraction in [0, 1]; 0.0 for an empty batch.
    """
    a = np.asarray(advantages, dtype=np.float64)
    if a.ndim == 0 or a.shape[0] == 0:
        return 0.0
    row_zero = np.all(np.abs(a.reshape(a.shape[0], -1)) <= atol, axis=1)
    codes, n_groups = factorize(group_ids, a.shape[0])
    nonzero_rows = np.bincount(codes, weights=(~row_zero).astype(np.float64), minlength=n_groups)
    return float(np.mean(nonzero_rows == 0))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k ``1 - C(n - c, k) / C(n, k)`` for n samples of which c are correct (Chen et al. 2021).

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - math.comb(n - c, k) / math.comb(n, k))


def discounted_returns(table: StepTable, gamma: float, rewards: Any = None) -> np.ndarray:
    """Per-row discounted return ``R_t = sum_{k >= t} gamma^(k - t) r_k`` within each trajectory.

    Args:
        table: The step rows (any row order; the trajectory order is ``table.step``).
        gamma: Discount in [0, 1].
        rewards: Optional (N,) rewards to use instead of ``table.reward``.

    Returns:
        (N,) float64, aligned with the table's rows.
    """
    r = table.reward if rewards is None else _as_1d("rewards", rewards, len(table))
    out = np.zeros(len(table))
    for rows in table.trajectory_rows():
        running = 0.0
        for i in rows[::-1]:
            running = r[i] + gamma * running
            out[i] = running
    return out


@dataclass(frozen=True)
class GigpoResult:
    """GiGPO advantages and their parts, all (N,) float64 aligned with the table's rows.

    Attributes:
        advantages: ``A_E + omega * A_S``.
        episode: Episode advantage ``A_E``.
        step: Step (anchor-state) advantage ``A_S``.
        step_group: (N,) int id of each row's anchor-state step group.
        returns: Discounted step returns after the invalid-action penalty.
    """

    advantages: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    step_group: np.ndarray
    returns: np.ndarray


def _episode_advantages(
    table: StepTable, *, episode_stats: str, norm: Norm, invalid_penalty: float, eps: float
) -> np.ndarray:
    """A_E per row: the row's score ``R_i - penalty * invalid`` centred on the group's episode statistics."""
    if episode_stats not in ("steps", "trajectories"):
        raise ValueError(
            f"episode_stats must be 'steps' (released code) or 'trajectories' (paper), got {episode_stats!r}"
        )
    score = table.episode_return - invalid_penalty * table.invalid
    if episode_stats == "steps":
        return group_normalize(score, table.group, norm=norm, eps=eps)
    # Paper: statistics over the G (unpenalised) trajectory returns, one value per trajectory.
    first = np.zeros(len(table), dtype=bool)
    first[[rows[0] for rows in table.trajectory_rows()]] = True
    codes, n_groups = factorize(table.group, len(table))
    mean, divisor, degenerate = _group_stats(table.episode_return, codes, n_groups, norm, eps, first)
    adv = (score - mean[codes]) / divisor[codes]
    adv[degenerate[codes]] = 0.0
    return adv


def gigpo_advantages(
    table: StepTable,
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    episode_stats: Literal["steps", "trajectories"] = "steps",
    norm: Norm = "std",
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
) -> GigpoResult:
    """GiGPO advantages (docs/methods.md section 2; arXiv 2505.10978, verl-agent ``gigpo/core_gigpo.py``).

    Episode level ``A_E = (R_i - mean) / F`` with R_i the trajectory's episode return minus the row's invalid
    penalty; ``episode_stats="steps"`` (released code, default) takes mean/std over all step rows of the group
    (length-weighted), ``"trajectories"`` (paper) over the G trajectory returns. Step level: rows of one group
    sharing the exact anchor state (``table.state``) form a step group (repeat visits are separate members);
    ``A_S = (R_t - mean) / F`` with ``R_t`` the discounted return minus the invalid penalty (subtracted after
    discounting, as the released code does). ``F`` = std (+eps) for ``norm="std"``, 1 for ``norm="mean"``.

    Args:
        table: Step rows of all groups.
        gamma: Step-return discount.
        omega: Weight of the step advantage.
        episode_stats: "steps" or "trajectories" (see above).
        norm: "std" or "mean".
        invalid_penalty: Subtracted from an invalid row's episode score and discounted step return.
        eps: Added to the std.

    Returns:
        GigpoResult with (N,) arrays; broadcast ``advantages[i]`` to the tokens of row i's response.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    episode = _episode_advantages(
        table, episode_stats=episode_stats, norm=norm, invalid_penalty=invalid_penalty, eps=eps
    )
    returns = discounted_returns(table, gamma) - invalid_penalty * table.invalid
    step_group = table.anchor_groups()
    step = group_normalize(returns, step_group, norm=norm, eps=eps)
    return GigpoResult(episode + omega * step, episode, step, step_group, returns)


@dataclass(frozen=True)
class GraphgpoResult:
    """GraphGPO advantages and their parts, all (N,) aligned with the table's rows unless noted.

    Attributes:
        advantages: ``beta_G * A_G + beta_E * A_E``.
        graph_adv: ``A_G``: graph step reward normalised within same-state groups.
        episode: ``A_E``: GiGPO's episode advantage.
        step_reward: ``R_G = reward_scale * gamma_g ** d(s')`` (minus the invalid penalty).
        distance: d(s') of each row's next state.
        graphs: One TransitionGraph per group id.
        distances: Per group id, the distance of every node.
    """

    advantages: np.ndarray
    graph_adv: np.ndarray
    episode: np.ndarray
    step_reward: np.ndarray
    distance: np.ndarray
    graphs: dict[Hashable, TransitionGraph]
    distances: dict[Hashable, dict[str, int]]


def graphgpo_advantages(
    table: StepTable,
    *,
    gamma_g: float = GAMMA_G,
    beta_g: float = 1.0,
    beta_e: float = 1.0,
    reward_scale: float = 10.0,
    episode_stats: Literal["steps", "trajectories"] = "steps",
    norm: Norm = "std",
    invalid_penalty: float = 0.1,
    eps: float = 1e-6,
    extra_transitions: Mapping[Hashable, Iterable[tuple[str, str, str]]] | None = None,
) -> GraphgpoResult:
    """GraphGPO advantages (docs/methods.md section 3; verl-agent ``recipe/GraphGPO``).

    Per group: a graph over anchor states + SUCCESS with one edge per step (s_t, a_t, s_{t+1}); the last step of
    a successful episode points to SUCCESS (``table.transitions()``). ``d(s)`` = reverse shortest path to SUCCESS
    (unit costs), unreachable nodes ``d_max + 1``, every node 1 when the group has no success. Each row gets
    ``R_G = reward_scale * gamma_g ** d(s')`` for its next state s' (minus ``invalid_penalty`` when invalid),
    normalised within the group's same-state rows, and ``A = beta_G * A_G + beta_E * A_E`` with A_E GiGPO's
    episode advantage. The invalid penalty stays in ``R_G`` (a decision, as in GiGPO's episode and step parts):
    a group with no success has ``A_G = 0`` exactly when none of its rows is invalid; otherwise ``A_G`` only
    separates invalid rows from valid ones that share their state.

    Args:
        table: Step rows of all groups.
        gamma_g: Distance discount (0.10 ALFWorld, 0.20 WebShop).
        beta_g: Weight of the graph advantage.
        beta_e: Weight of the episode advantage.
        reward_scale: R_G at distance 0 (10).
        episode_stats: Episode statistics mode, as in `gigpo_advantages`.
        norm: "std" or "mean", for both parts.
        invalid_penalty: Subtracted from an invalid row's episode score and graph step reward.
        eps: Added to the std.
        extra_transitions: Per group id, more (state, action, next_state) edges to add to the graph (SERO's
            oracle continuations; use ``SUCCESS_NODE`` as next_state for a confirmed success).

    Returns:
        GraphgpoResult.
    """
    if not 0.0 < gamma_g <= 1.0:
        raise ValueError(f"gamma_g must be in (0, 1], got {gamma_g}")
    extra = extra_transitions or {}
    unknown = set(extra) - set(table.group.tolist())
    if unknown:
        raise ValueError(f"extra_transitions names groups that have no rows: {sorted(map(str, unknown))}")
    next_nodes = table.next_nodes()
    graphs: dict[Hashable, TransitionGraph] = {}
    distances: dict[Hashable, dict[str, int]] = {}
    distance = np.zeros(len(table), dtype=np.int64)
    for gid, rows in table.group_rows().items():
        own = [(table.state[i], table.action[i], next_nodes[i]) for i in rows.tolist()]
        graph = build_transition_graph([*own, *extra.get(gid, ())])
        dist = distances_to_success(graph)
        graphs[gid], distances[gid] = graph, dist
        distance[rows] = [dist[next_nodes[i]] for i in rows]
    step_reward = reward_scale * np.power(gamma_g, distance.astype(np.float64)) - invalid_penalty * table.invalid
    graph_adv = group_normalize(step_reward, table.anchor_groups(), norm=norm, eps=eps)
    episode = _episode_advantages(
        table, episode_stats=episode_stats, norm=norm, invalid_penalty=invalid_penalty, eps=eps
    )
    return GraphgpoResult(
        beta_g * graph_adv + beta_e * episode, graph_adv, episode, step_reward, distance, graphs, distances
    )
