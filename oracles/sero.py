"""SERO: roots, restore, executable oracle continuations, GraphGPO credit and reachability weights.

METHODS.md section 4 (the steps marked *ours* there are this module's documented defaults):

1. `select_roots`: in a group with success rate < 1, the states on failed trajectories that have no known path to
   SUCCESS in the group's GraphGPO graph, deepest first, distinct states, at most ``roots_per_group``, each with
   at least ``min_budget`` steps of the episode budget (``horizon``) left. Terminal states are never roots.
2. `continue_from_root` (runs inside a pool worker through the pool's ``call`` request): restore the root by
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

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from envkit.core import Root, Step, Trajectory, jsonable
from envkit.errors import ReplayDivergenceError, SnapshotError
from envkit.policies import PolicyInput
from envkit.pool import EnvPool, Request
from envkit.snapshot import ReplayState, observation_hash, replay
from oracles.base import Oracle, make_oracle, run_oracle
from oracles.scorers import Scorer
from trainers.advantages import StepTable, graphgpo_advantages
from trainers.graph import SUCCESS_NODE, TransitionGraph, build_transition_graph
from trainers.reachability import choice_logprob, reachability_weights


@dataclass(frozen=True)
class SeroConfig:
    """SERO settings (METHODS section 4; defaults are the project's).

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
    """Roots of one task group (METHODS section 4, step 1); see the module docstring.

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


def replay_state_at(traj: Trajectory, t: int) -> ReplayState | None:
    """The verified-replay recipe of the state before step t, from the recorded trajectory (None: no seed)."""
    if traj.seed is None:
        return None
    obs = traj.observations()
    hashes = [observation_hash(obs[0])] + [observation_hash(obs[k + 1], traj.steps[k].reward) for k in range(t)]
    return ReplayState(int(traj.seed), dict(traj.options), tuple(s.action for s in traj.steps[:t]), tuple(hashes))


# ----- 2. restore and continue (inside a pool worker) ---------------------------------------------------------
@dataclass(frozen=True)
class ContinuationJob:
    """What a worker needs to continue from one root (picklable).

    Attributes:
        root: The root (its snapshot, when recorded, is restored natively).
        replay: The verified-replay recipe (used when there is no snapshot or the native restore is refused).
        env_id: Id of the env (picks the oracle from `oracles.base.ORACLES`).
        max_steps: Step budget of the continuation.
        oracle_kwargs: Keyword arguments of the oracle's constructor.
    """

    root: Root
    replay: ReplayState | None
    env_id: str
    max_steps: int
    oracle_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContinuationOutcome:
    """What happened at one root.

    Attributes:
        root: The root (snapshot dropped).
        restored_by: ``"native"`` or ``"replay"``; ``""`` when the root could not be restored.
        diverged: Replay did not reproduce the recorded observations (the root was dropped).
        steps: The oracle's transitions (``is_oracle`` True).
        success: The env confirmed success at the end.
        reason: Why it stopped without success ("" on success).
        root_info: JSON-able info at the restored root (admissible actions for the first oracle step).
        restore_s: Seconds spent restoring.
        oracle_s: Seconds spent in the oracle's ``start``/``act`` (planning).
        env_s: Seconds spent in ``env.step`` during the continuation.
    """

    root: Root
    restored_by: str
    diverged: bool = False
    steps: tuple[Step, ...] = ()
    success: bool = False
    reason: str = ""
    root_info: Mapping[str, Any] = field(default_factory=dict)
    restore_s: float = 0.0
    oracle_s: float = 0.0
    env_s: float = 0.0


class _TimedOracle:
    """Wraps an oracle and accumulates the seconds spent in it."""

    def __init__(self, oracle: Oracle):
        self.oracle = oracle
        self.name = oracle.name
        self.seconds = 0.0

    def start(self, env: gym.Env[Any, Any], observation: str, info: Mapping[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            self.oracle.start(env, observation, info)
        finally:
            self.seconds += time.perf_counter() - t0

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        t0 = time.perf_counter()
        try:
            return self.oracle.act(observation, info)
        finally:
            self.seconds += time.perf_counter() - t0


_ORACLE_CACHE: dict[tuple[str, str], Oracle] = {}


def _oracle(env_id: str, kwargs: Mapping[str, Any]) -> Oracle:
    key = (env_id, repr(sorted(kwargs.items())))
    if key not in _ORACLE_CACHE:
        _ORACLE_CACHE[key] = make_oracle(env_id, **dict(kwargs))
    return _ORACLE_CACHE[key]


def _restore(env: gym.Env[Any, Any], job: ContinuationJob) -> tuple[str, Any, dict[str, Any]]:
    """Restore the root; returns (kind, obs, info). Raises ReplayDivergenceError / SnapshotError."""
    snap = job.root.snapshot
    if snap is not None:
        try:
            obs, info = env.restore(snap)  # type: ignore[attr-defined]
            kind = getattr(env.unwrapped, "last_restore_kind", "") or str(env.metadata.get("snapshot", "native"))
            return kind, obs, info
        except ReplayDivergenceError:
            raise
        except SnapshotError:
            if job.replay is None:
                raise
    if job.replay is None:
        raise SnapshotError(
            "the root has neither a snapshot nor a replay recipe (its episode was reset without a seed)"
        )
    obs, info = replay(env, job.replay)
    return "replay", obs, info


def continue_from_root(env: gym.Env[Any, Any], job: ContinuationJob) -> ContinuationOutcome:
    """Restore `job.root` in `env` and let the env's oracle continue (run it in a worker: pool ``call``)."""
    root = _bare(job.root)
    t0 = time.perf_counter()
    try:
        kind, obs, raw_info = _restore(env, job)
    except ReplayDivergenceError as exc:
        return ContinuationOutcome(root, "", diverged=True, reason=str(exc), restore_s=time.perf_counter() - t0)
    except SnapshotError as exc:
        return ContinuationOutcome(root, "", reason=f"restore failed: {exc}", restore_s=time.perf_counter() - t0)
    restore_s = time.perf_counter() - t0
    if obs != job.root.observation:
        return ContinuationOutcome(
            root, "", diverged=True, reason="the restored observation differs from the root's", restore_s=restore_s
        )
    info = jsonable(raw_info)
    timed = _TimedOracle(_oracle(job.env_id, job.oracle_kwargs))
    t1 = time.perf_counter()
    run = run_oracle(env, timed, obs, info, max_steps=job.max_steps)
    total = time.perf_counter() - t1
    return ContinuationOutcome(
        root,
        kind,
        False,
        run.steps,
        run.success and bool(run.steps),
        run.reason or ("" if run.steps else "no steps"),
        info,
        restore_s,
        timed.seconds,
        max(0.0, total - timed.seconds),
    )


def job_for(root: Root, traj: Trajectory, env_id: str, horizon: int, **oracle_kwargs: Any) -> ContinuationJob:
    """The job for one root of `traj` (budget: ``horizon - root.t``)."""
    return ContinuationJob(root, replay_state_at(traj, root.t), env_id, max(1, horizon - root.t), oracle_kwargs)


def _bare(root: Root) -> Root:
    return Root(root.group, root.trajectory, root.t, root.observation, None, root.actions, root.budget_left)


def continue_many(env: gym.Env[Any, Any], jobs: Sequence[ContinuationJob]) -> list[ContinuationOutcome]:
    """`continue_from_root` for several jobs in one worker call; an error in one job is kept as its reason."""
    out = []
    for job in jobs:
        try:
            out.append(continue_from_root(env, job))
        except Exception as exc:  # an env/oracle bug ends that continuation, not the batch
            out.append(ContinuationOutcome(_bare(job.root), "", reason=f"error: {type(exc).__name__}: {exc}"))
    return out


def run_continuations(
    pool: EnvPool, jobs: Sequence[ContinuationJob], *, per_call: int | None = None, on_done: Any = None
) -> list[ContinuationOutcome]:
    """Run jobs on the pool's workers; outcomes in job order.

    Jobs are dealt round-robin to the workers, up to `per_call` jobs per worker per request (default: all of them
    in one request per worker, which keeps the inter-process round trips to one per worker). A crashed worker's
    jobs come back with a reason; the pool restarts the worker. `on_done(n)` is called after each round.
    """
    out: list[ContinuationOutcome | None] = [None] * len(jobs)
    per = per_call or max(1, -(-len(jobs) // pool.size))
    order = list(range(len(jobs)))
    while order:
        take, order = order[: per * pool.size], order[per * pool.size :]
        batches = [take[w :: pool.size] for w in range(pool.size)]
        reqs: list[Request] = [(w, "call", (continue_many, [jobs[i] for i in b]), {}) for w, b in enumerate(batches) if b]
        results = pool.call_many(reqs)
        for (w, *_), res in zip(reqs, results, strict=True):
            if res.ok:
                for i, o in zip(batches[w], res.value, strict=True):
                    out[i] = o
            else:
                last = res.error.strip().splitlines()[-1] if res.error.strip() else "unknown error"
                for i in batches[w]:
                    out[i] = ContinuationOutcome(_bare(jobs[i].root), "", reason=f"worker error: {last}")
        if on_done is not None:
            on_done(len(take))
    return [o for o in out if o is not None]


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
    """l_j from the scorer, then `trainers.reachability.reachability_weights` (METHODS section 4, step 5)."""
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
    """GraphGPO credit of one group before and after adding successful continuations (METHODS 3 and 4.4).

    Each successful continuation joins the group as one more successful episode made of its oracle steps (its
    last step points to SUCCESS), so the policy's earlier states on its root's trajectory get finite distances.

    Returns:
        (policy rows keyed (trajectory, step), oracle rows keyed (continuation index, oracle step index)).
    """
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "group",
            "trajectory",
            "step",
            "state",
            "reward",
            "invalid",
            "next_state",
            "action",
            "episode_return",
            "success",
        )
    }
    keys: list[tuple[str, int, int]] = []

    def add(tid: Any, t: int, st: Step, success: bool, key: tuple[str, int, int]) -> None:
        for name, value in (
            ("group", 0),
            ("trajectory", tid),
            ("step", t),
            ("state", st.observation),
            ("reward", st.reward),
            ("invalid", bool(st.info.get("invalid", False))),
            ("next_state", st.next_observation),
            ("action", st.action),
            ("episode_return", config.terminal_reward * success),
            ("success", success),
        ):
            cols[name].append(value)
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
        table_b = StepTable(**{name: v[:n_policy] for name, v in cols.items()})  # type: ignore[arg-type]
        before = graphgpo_advantages(table_b, gamma_g=config.gamma_g).distance
    res = graphgpo_advantages(StepTable(**cols), gamma_g=config.gamma_g)  # type: ignore[arg-type]
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
