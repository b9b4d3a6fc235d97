"""SERO: roots, restore, executable oracle continuations, GraphGPO credit and reachability weights.

docs/methods.md section 4 (the steps marked *ours* there are this module's documented defaults):

1. `select_roots`: in a group with success rate < 1, the states on failed trajectories that have no known path to
   SUCCESS in the group's GraphGPO graph, deepest first, distinct states, at most ``roots_per_group``, each with
   at least ``min_budget`` steps of the episode budget (``horizon``) left. Terminal states are never roots.
2. `continue_from_root` (in `oracles.continuation`, re-exported here; runs inside a pool worker through the
   pool's ``call`` request): restore the root by
   the env's native ``restore`` (which may itself fall back to verified replay: counted by
   ``env.unwrapped.last_restore_kind``), or, when there is no usable snapshot, by replaying the action prefix from
   the task's seed with every observation hash checked (`envkit.snapshot.replay`; a mismatch drops the root and is
   counted as diverged). Then `oracles.base.run_oracle` lets the domain oracle act in the live env; only
   continuations the env confirms as success are kept.
3. `credit_group`: the group's GraphGPO graph with the oracle transitions added (distances recomputed, so the
   policy's own earlier steps get finite distances), GraphGPO advantages for policy and oracle rows
   (`trainers.advantages.graphgpo_advantages`).
4. `reach_weights`: ``l_j`` from a policy `oracles.scorers.Scorer` (length-normalised, or the admissible-choice
   variant), then `trainers.reachability.reachability_weights` (floor, temperature, minimum).

`oracles.pipeline` strings these together for the ``envkit-oracle rollout`` command.

Example:
    >>> from envkit.pool import EnvFactory, make_pool
    >>> from envkit.policies import RandomAdmissiblePolicy
    >>> from envkit.rollout import Task, rollout
    >>> with make_pool(EnvFactory("envkit/Toy-v0", {"max_steps": 6}), 2, "inprocess") as pool:
    ...     group = rollout(RandomAdmissiblePolicy(0), pool, [Task("t", seed=3)] * 4)
    ...     roots = select_roots(group, group=0, config=SeroConfig(horizon=6))
    ...     outs = run_continuations(pool, [job_for(r, group[r.trajectory], "envkit/Toy-v0", 6) for r in roots])
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from envkit.core import Root, Step, Trajectory
from envkit.policies import PolicyInput
from oracles.continuation import (
    ContinuationJob,
    ContinuationOutcome,
    OwnerTrackingPool,
    continue_from_root,
    continue_many,
    job_for,
    replay_state_at,
    run_continuations,
)
from oracles.scorers import Scorer
from trainers.advantages import graphgpo_advantages
from trainers.graph import SUCCESS_NODE, TransitionGraph, build_transition_graph
from trainers.reachability import choice_logprob, reachability_weights
from trainers.step_table import StepRows

__all__ = [
    "ContinuationJob",
    "ContinuationOutcome",
    "OwnerTrackingPool",
    "RowCredit",
    "SeroConfig",
    "Weighted",
    "continue_from_root",
    "continue_many",
    "credit_group",
    "group_transitions",
    "job_for",
    "oracle_turns",
    "reach_weights",
    "reaching_success",
    "replay_state_at",
    "run_continuations",
    "select_roots",
]


@dataclass(frozen=True)
class SeroConfig:
    """SERO settings (docs/methods.md section 4; defaults are the project's).

    Attributes:
        roots_per_group: At most this many roots per task group.
        min_budget: A root needs at least this many steps of the episode budget left.
        horizon: Episode step budget: policy rollouts stop there, a continuation from root t gets horizon - t.
        p_floor: Per-step likelihood floor of the reachability weight.
        tau_w: Temperature of the reachability weight.
        w_min: Lower clip of the reachability weight.
        weighting: ``"sequence"``: l_j = length-normalised log-likelihood of the oracle action; ``"choice"``: the
            log-probability of choosing it among the admissible actions (softmax of sequence log-probs).
        gamma_g: GraphGPO distance discount (0.10 ALFWorld, 0.20 WebShop).
        terminal_reward: Episode return of a successful episode (GiGPO's 10 * success) for the advantages.
        oracle_kwargs: Keyword arguments of the domain oracle's constructor.
    """

    roots_per_group: int = 2
    min_budget: int = 2
    horizon: int = 15
    p_floor: float = 0.05
    tau_w: float = 1.0
    w_min: float = 0.05
    weighting: Literal["sequence", "choice"] = "sequence"
    gamma_g: float = 0.10
    terminal_reward: float = 10.0
    oracle_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.roots_per_group < 0:
            raise ValueError(f"roots_per_group must be >= 0 (0 turns SERO off), got {self.roots_per_group}")
        if self.min_budget < 1:
            raise ValueError(f"min_budget must be >= 1, got {self.min_budget}")
        if self.horizon < 1:
            raise ValueError(f"horizon (the episode step budget, --max-steps) must be >= 1, got {self.horizon}")
        if self.weighting not in ("sequence", "choice"):
            raise ValueError(f"weighting must be 'sequence' or 'choice', got {self.weighting!r}")
        if not 0.0 < self.gamma_g <= 1.0:
            raise ValueError(f"gamma_g must be in (0, 1], got {self.gamma_g}")
        reachability_weights([], self.p_floor, self.tau_w, self.w_min)  # validates the three weight settings


# ----- 1. roots -------------------------------------------------------------------------------------------------
def group_transitions(trajs: Sequence[Trajectory]) -> list[tuple[str, str, str]]:
    """GraphGPO edges (s_t, a_t, s_{t+1}) of a group; a successful episode's last step points to SUCCESS."""
    edges = []
    for traj in trajs:
        if traj.failed:
            continue
        obs = traj.observations()
        for t, st in enumerate(traj.steps):
            last = t == len(traj.steps) - 1
            edges.append((obs[t], st.action, SUCCESS_NODE if last and traj.success else obs[t + 1]))
    return edges


def reaching_success(graph: TransitionGraph) -> set[str]:
    """Nodes with a known path to SUCCESS (SUCCESS included); empty when the graph has no success."""
    if not graph.has_success:
        return set()
    pred = graph.predecessors()
    seen = {SUCCESS_NODE}
    queue = deque([SUCCESS_NODE])
    while queue:
        for p in pred[queue.popleft()]:
            if p not in seen:
                seen.add(p)
                queue.append(p)
    return seen


def select_roots(trajs: Sequence[Trajectory], *, group: int, config: SeroConfig) -> list[Root]:
    """Roots of one task group (docs/methods.md section 4, step 1); see the module docstring.

    Args:
        trajs: The group's G trajectories (with snapshots when recorded).
        group: The group's index (kept in each Root).
        config: SERO settings (``roots_per_group``, ``min_budget``, ``horizon``).

    Returns:
        Up to ``roots_per_group`` roots, deepest first (ties: lower trajectory index first).
    """
    done = [t for t in trajs if not t.failed]
    if config.roots_per_group == 0 or not done or all(t.success for t in done):
        return []
    known = reaching_success(build_transition_graph(group_transitions(trajs)))
    candidates: list[tuple[int, int, Root]] = []
    for i, traj in enumerate(trajs):
        if traj.failed or traj.success:
            continue
        obs = traj.observations()
        last_t = traj.length - 1 if traj.done else traj.length  # a terminal state cannot be continued
        for t in range(last_t + 1):
            budget = config.horizon - t
            if budget < config.min_budget or obs[t] in known:
                continue
            root = Root(
                group=group,
                trajectory=i,
                t=t,
                observation=obs[t],
                snapshot=traj.snapshot_at(t),
                actions=tuple(s.action for s in traj.steps[:t]),
                budget_left=budget,
            )
            candidates.append((-t, i, root))
    candidates.sort(key=lambda c: (c[0], c[1]))
    roots: list[Root] = []
    seen: set[str] = set()
    for _, _, root in candidates:
        if root.observation in seen:
            continue
        seen.add(root.observation)
        roots.append(root)
        if len(roots) == config.roots_per_group:
            break
    return roots


# ----- 4. reachability weights --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Weighted:
    """Reachability weights of one continuation.

    Attributes:
        loglik: l_j of each oracle action (the value the weight formula used).
        weights: w_k of each oracle step (the first is 1).
        choice_fallbacks: Steps where the choice variant fell back to the sequence variant (the oracle's action
            was not among the admissible actions).
    """

    loglik: tuple[float, ...]
    weights: tuple[float, ...]
    choice_fallbacks: int = 0


def oracle_turns(prefix: Sequence[Step], outcome: ContinuationOutcome, task_id: str) -> list[PolicyInput]:
    """The policy's view of each oracle step: observation, info before the action, history so far."""
    history = [
        s
        if s.snapshot is None
        else Step(
            s.observation, s.action, s.reward, s.next_observation, s.terminated, s.truncated, s.info, None, s.is_oracle
        )
        for s in prefix
    ]
    turns = []
    info = outcome.root_info
    for st in outcome.steps:
        turns.append(PolicyInput(st.observation, info, tuple(history), task_id))
        history.append(st)
        info = st.info
    return turns


def reach_weights(
    scorer: Scorer, prefix: Sequence[Step], outcome: ContinuationOutcome, config: SeroConfig, task_id: str = ""
) -> Weighted:
    """l_j from the scorer, then `trainers.reachability.reachability_weights` (docs/methods.md section 4, step 5)."""
    if not outcome.steps:
        return Weighted((), ())
    turns = oracle_turns(prefix, outcome, task_id)
    actions = [s.action for s in outcome.steps]
    fallbacks = 0
    if config.weighting == "sequence":
        ll = scorer.loglik(turns, actions)
    else:
        ll = []
        need: list[int] = []
        for j, (x, a) in enumerate(zip(turns, actions, strict=True)):
            cands = [str(c) for c in x.info.get("admissible_actions") or []]
            if a in cands:
                ll.append(choice_logprob(scorer.sequence_logprobs(x, cands), cands.index(a)))
            else:
                ll.append(0.0)
                need.append(j)
        if need:
            fallbacks = len(need)
            seq = scorer.loglik([turns[j] for j in need], [actions[j] for j in need])
            for j, v in zip(need, seq, strict=True):
                ll[j] = v
    w = reachability_weights(np.asarray(ll, dtype=np.float64), config.p_floor, config.tau_w, config.w_min)
    return Weighted(tuple(float(v) for v in ll), tuple(float(v) for v in w), fallbacks)


# ----- 3. GraphGPO credit with the oracle transitions -------------------------------------------------------------
@dataclass(frozen=True)
class RowCredit:
    """GraphGPO quantities of one step row (the advantage inputs stored in every record).

    Attributes:
        distance: d(s') of the row's next state in the graph WITH the oracle transitions.
        distance_before: d(s') in the policy-only graph (None for oracle rows).
        step_reward: ``10 * gamma_g ** distance`` minus the invalid penalty.
        graph_advantage: A_G (step reward normalised within same-state rows).
        episode_advantage: A_E (GiGPO's episode advantage over the group's episodes, oracle ones included).
        advantage: ``A_G + A_E`` (before the reachability weight).
    """

    distance: int
    distance_before: int | None
    step_reward: float
    graph_advantage: float
    episode_advantage: float
    advantage: float


def credit_group(
    trajs: Sequence[Trajectory], continuations: Sequence[ContinuationOutcome], config: SeroConfig
) -> tuple[dict[tuple[int, int], RowCredit], dict[tuple[int, int], RowCredit]]:
    """GraphGPO credit of one group before and after adding successful continuations (docs/methods.md section 3 and 4.4).

    Each successful continuation joins the group as one more successful episode made of its oracle steps (its
    last step points to SUCCESS), so the policy's earlier states on its root's trajectory get finite distances.

    Returns:
        (policy rows keyed (trajectory, step), oracle rows keyed (continuation index, oracle step index)).
    """
    rows = StepRows()
    keys: list[tuple[str, int, int]] = []

    def add(tid: Any, t: int, st: Step, success: bool, key: tuple[str, int, int]) -> None:
        rows.add(
            group=0,
            trajectory=tid,
            step=t,
            state=st.observation,
            reward=st.reward,
            invalid=bool(st.info.get("invalid", False)),
            next_state=st.next_observation,
            action=st.action,
            episode_return=config.terminal_reward * success,
            success=success,
        )
        keys.append(key)

    for i, traj in enumerate(trajs):
        if not traj.failed:
            for t, st in enumerate(traj.steps):
                add(i, t, st, traj.success, ("policy", i, t))
    n_policy = len(keys)
    for k, c in enumerate(continuations):
        if c.success:
            for j, st in enumerate(c.steps):
                add(f"oracle-{k}", c.root.t + j, st, True, ("oracle", k, j))
    if not keys:
        return {}, {}
    before = None
    if n_policy:
        before = graphgpo_advantages(rows.table(n_policy), gamma_g=config.gamma_g).distance
    res = graphgpo_advantages(rows.table(), gamma_g=config.gamma_g)
    pol: dict[tuple[int, int], RowCredit] = {}
    ora: dict[tuple[int, int], RowCredit] = {}
    for r, (kind, a, b) in enumerate(keys):
        credit = RowCredit(
            int(res.distance[r]),
            int(before[r]) if kind == "policy" and before is not None else None,
            float(res.step_reward[r]),
            float(res.graph_adv[r]),
            float(res.episode[r]),
            float(res.advantages[r]),
        )
        (pol if kind == "policy" else ora)[(a, b)] = credit
    return pol, ora
