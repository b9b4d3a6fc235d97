"""SERO's settings and root selection (docs/methods.md section 4); the credit is `envkit.credit.sero_advantages`.

docs/methods.md section 4 (the steps marked *ours* there are this module's documented defaults, `SeroOptions`):

Settings: `SeroOptions` (what a user chooses in every front-end; nests `envkit.credit.reachability.ReachConfig`;
each front-end extends it with the knobs that act only there) and `SeroConfig` (the options plus the run's horizon,
gamma_g, terminal reward and oracle arguments: what the functions here read), built once by `SeroOptions.resolve`.

1. `select_roots`: in a group with success rate < 1, the states on failed trajectories that have no known path to
   SUCCESS in the group's GraphGPO graph, distinct states, at most ``roots_per_group``, each with at least
   ``min_budget`` steps of the episode budget (``horizon``) left; episodes take turns (no episode gets a second
   root before every failed episode with a candidate has one), deepest first within a turn. Terminal states are
   never roots.
   `RootRounds` replaces a root the oracle proves dead with the group's next candidate (never one already tried),
   so dead ends do not use up ``roots_per_group``; the pipeline and both trainers pick roots through it.
2. Restore and continue (`envkit.oracles.continuation.continue_from_root`, inside a pool worker): native restore or
   verified replay, then the domain oracle acts in the live env; only continuations the env confirms count.
3. Credit: `envkit.credit.sero_advantages.sero_advantages` (policy rows keep plain GraphGPO's episode baseline;
   oracle rows get a success's advantage times their reachability weight, `envkit.credit.reachability`), with
   ``l_j`` from the policy (a scorer in ``envkit-oracle rollout``, the trained model in the trainers).

`envkit.oracles.pipeline` strings these together for the ``envkit-oracle rollout`` command; the local trainer
(`envkit.trainers.local.sero`) and the OpenRLHF backend (`envkit.trainers.openrlhf.sero_rows`) call them per group.

Example:
    >>> from envkit.core import Step, Trajectory
    >>> def walk(states, success):
    ...     steps = [Step(a, "go", float(success and b == states[-1]), b, False, False, {})
    ...              for a, b in zip(states, states[1:])]
    ...     return Trajectory("envkit/Toy-v0", "t", 0, {}, states[0], {}, tuple(steps), success)
    >>> group = [walk(["s0", "s1", "win"], True), walk(["s0", "x1", "x2"], False)]
    >>> [(r.trajectory, r.t, r.observation) for r in select_roots(group, group=0, config=SeroConfig(horizon=6))]
    [(1, 2, 'x2'), (1, 1, 'x1')]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypeVar

from envkit.core import Root, Trajectory
from envkit.credit.defaults import GAMMA_G, MIN_ROOT_BUDGET, TERMINAL_REWARD
from envkit.credit.graph import SUCCESS_NODE, TransitionGraph, build_transition_graph
from envkit.credit.reachability import ReachConfig

__all__ = [
    "DEAD_ROOT_ROUNDS",
    "MIN_ROOT_BUDGET",  # re-exported from envkit.credit.defaults
    "RootRounds",
    "SeroConfig",
    "SeroOptions",
    "group_transitions",
    "reaching_success",
    "root_rounds",
    "select_roots",
    "widen_options",
]


@dataclass(frozen=True)
class SeroOptions:
    """SERO's options that act in every front-end (docs/methods.md section 4; defaults are the project's).

    Nested as ``sero`` in ``envkit-oracle rollout`` (``--sero.*``, extended there by the oracle pipeline's own
    ``weighting``: `envkit.oracles.run_config.OracleSeroOptions`), as ``agent.sero_opts`` in the local trainer and
    ``sero_opts`` in the OpenRLHF backend (extended there by the trainers' oracle-row cap,
    `envkit.trainers.sero_options.TrainerSeroOptions`, and OpenRLHF's continuation budget). `resolve` adds what
    the run fixes and gives the `SeroConfig` the maths read. ``min_budget=None`` becomes the env's value in one place,
    the per-env resolver every front-end calls (`envkit.env_settings.resolve_env_settings`), before `resolve`.
    """

    # --- which states are roots ---
    roots_per_group: int = 2
    """At most this many roots (restored states) per task group (0 turns SERO off)."""
    min_budget: int | None = None
    """A root needs at least this many steps of the episode budget left (None: the env's minimum, its registered
    value ``EnvEntry.min_root_budget``, see ``envkit-oracle envs``)."""
    # --- how oracle steps are credited ---
    reach: ReachConfig = field(default_factory=ReachConfig)
    """Reachability-weight settings."""
    same_state: Literal["policy", "all"] = "policy"
    """Which rows form the same-state statistics of a POLICY row's graph advantage (in the
    module `envkit.credit.sero_advantages`): ``policy`` (default, ours) its same-state policy rows only, so an oracle
    action changes the policy's own ranking only through the distances it reveals; ``all`` the oracle rows too,
    unweighted. Oracle rows always normalise over all same-state rows."""

    def __post_init__(self) -> None:
        if self.roots_per_group < 0:
            raise ValueError(f"SERO roots_per_group must be >= 0 (0 turns SERO off), got {self.roots_per_group}")
        if self.min_budget is not None and self.min_budget < 1:
            raise ValueError(f"SERO min_budget must be >= 1 (or unset: the env's), got {self.min_budget}")
        if self.same_state not in ("policy", "all"):
            raise ValueError(f"SERO same_state must be 'policy' or 'all', got {self.same_state!r}")

    def resolve(
        self,
        *,
        horizon: int,
        gamma_g: float = GAMMA_G,
        terminal_reward: float = TERMINAL_REWARD,
        oracle_kwargs: Mapping[str, Any] | None = None,
    ) -> SeroConfig:
        """The `SeroConfig` of a run: the shared options (`SeroOptions`' own fields; a front-end's extension
        fields stay with the front-end) plus what the run fixes.

        Args:
            horizon: The run's episode step budget (its turn cap).
            gamma_g: GraphGPO discount of the run's credit.
            terminal_reward: Episode return of a successful episode.
            oracle_kwargs: Keyword arguments of the domain oracle's constructor.
        """
        own = {f.name: getattr(self, f.name) for f in fields(SeroOptions)}
        return SeroConfig(
            **own, horizon=horizon, gamma_g=gamma_g, terminal_reward=terminal_reward,
            oracle_kwargs=dict(oracle_kwargs or {}),
        )  # fmt: skip


OptionsT = TypeVar("OptionsT", bound=SeroOptions)


def widen_options(opts: SeroOptions, cls: type[OptionsT], where: str) -> OptionsT:
    """`opts` as the front-end's own options class `cls` (a subclass of `SeroOptions`): options of a base class
    (e.g. a plain `SeroOptions`) keep their values and get `cls`' defaults for the knobs they lack.

    Raises:
        TypeError: `opts` belongs to another front-end (its class is not a base of `cls`).
    """
    if isinstance(opts, cls):
        return opts
    if not isinstance(opts, SeroOptions) or not issubclass(cls, type(opts)):
        raise TypeError(
            f"{where}: got {type(opts).__name__}, the SERO options of another front-end; pass {cls.__module__}."
            f"{cls.__name__} (or a plain envkit.credit.sero.SeroOptions)"
        )
    return cls(**{f.name: getattr(opts, f.name) for f in fields(opts)})


@dataclass(frozen=True)
class SeroConfig(SeroOptions):
    """SERO settings of one run as the maths read them: `SeroOptions` plus what the run fixes.

    Built by `SeroOptions.resolve` (or directly in tests) from options whose ``min_budget`` the per-env resolver
    filled (`envkit.env_settings`); ``min_budget`` None (no env) becomes `MIN_ROOT_BUDGET`.
    """

    horizon: int = 15
    """Episode step budget: policy rollouts stop there, a continuation from root t gets horizon - t."""
    gamma_g: float = GAMMA_G
    """GraphGPO distance discount (0.10 ALFWorld, 0.20 WebShop: ``EnvEntry.gamma_g``)."""
    terminal_reward: float = TERMINAL_REWARD
    """Episode return of a successful episode (GiGPO's 10 * success) for the advantages."""
    oracle_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the domain oracle's constructor."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_budget is None:
            object.__setattr__(self, "min_budget", MIN_ROOT_BUDGET)
        if self.horizon < 1:
            raise ValueError(f"horizon (the episode step budget, --max-steps) must be >= 1, got {self.horizon}")
        if not 0.0 < self.gamma_g <= 1.0:
            raise ValueError(f"gamma_g must be in (0, 1], got {self.gamma_g}")

    @property
    def root_budget(self) -> int:
        """The minimum budget a root needs (``min_budget``, filled in by `__post_init__`)."""
        return int(self.min_budget)  # type: ignore[arg-type]


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


def select_roots(
    trajs: Sequence[Trajectory],
    *,
    group: int,
    config: SeroConfig,
    exclude: Collection[str] = (),
    taken: Mapping[int, int] | None = None,
) -> list[Root]:
    """Roots of one task group (docs/methods.md section 4, step 1); see the module docstring.

    Episodes take turns: no episode gets a second root before every episode with a candidate has one (counting
    the roots in ``taken``), so two near-identical roots of one episode (its steps t and t-1) are not continued
    while another failed episode has none. Within a turn, deeper roots first (ties: lower trajectory index).

    Args:
        trajs: The group's G trajectories (with snapshots when recorded).
        group: The group's index (kept in each Root).
        config: SERO settings (``roots_per_group``, ``min_budget``, ``horizon``).
        exclude: Observations never to pick (the pipeline passes roots already tried, e.g. ones found dead).
        taken: Roots each trajectory already holds (`RootRounds` passes its live roots).

    Returns:
        Up to ``roots_per_group`` roots with distinct states, in the order picked.
    """
    done = [t for t in trajs if not t.failed]
    if config.roots_per_group == 0 or not done or all(t.success for t in done):
        return []
    known = reaching_success(build_transition_graph(group_transitions(trajs)))
    queues: dict[int, list[Root]] = {}
    for i, traj in enumerate(trajs):
        if traj.failed or traj.success:
            continue
        obs = traj.observations()
        last_t = traj.length - 1 if traj.done else traj.length  # a terminal state cannot be continued
        for t in range(last_t, -1, -1):
            budget = config.horizon - t
            if budget < config.root_budget or obs[t] in known or obs[t] in exclude:
                continue
            queues.setdefault(i, []).append(
                Root(
                    group=group,
                    trajectory=i,
                    t=t,
                    observation=obs[t],
                    snapshot=traj.snapshot_at(t),
                    actions=tuple(s.action for s in traj.steps[:t]),
                    budget_left=budget,
                )
            )
    count = dict(taken or {})
    roots: list[Root] = []
    seen: set[str] = set()
    while len(roots) < config.roots_per_group:
        for q in queues.values():
            while q and q[0].observation in seen:
                q.pop(0)
        heads = [q[0] for q in queues.values() if q]
        if not heads:
            break
        fewest = min(count.get(r.trajectory, 0) for r in heads)
        root = min((r for r in heads if count.get(r.trajectory, 0) == fewest), key=lambda r: (-r.t, r.trajectory))
        queues[root.trajectory].pop(0)
        seen.add(root.observation)
        count[root.trajectory] = count.get(root.trajectory, 0) + 1
        roots.append(root)
    return roots


#: Rounds of replacement roots after roots were found dead (`RootRounds`).
DEAD_ROOT_ROUNDS = 8


class RootRounds:
    """The roots of one group in rounds: each root found dead is replaced by the next candidate.

    ``pick()`` returns the next round's roots (the first round: up to ``roots_per_group``; later rounds: one per
    root reported dead with ``settle(dead=True)`` in the round before, never a state already tried) and ``[]``
    once nothing is owed or after 1 + `rounds` rounds. Episodes take turns across rounds too: a live root counts
    for its episode (`select_roots`' ``taken``); a root settled dead with ``settle(dead=True, root=root)`` does
    not. Pure bookkeeping over `select_roots`: who continues the roots (a pool, an env, a server) is the caller's.

    Example:
        >>> from envkit.core import Step, Trajectory
        >>> steps = tuple(Step(a, "go", 0.0, b, False, False, {}) for a, b in [("s0", "s1"), ("s1", "s2")])
        >>> picker = RootRounds([Trajectory("envkit/Toy-v0", "t", 0, {}, "s0", {}, steps, False)], 0,
        ...                     SeroConfig(roots_per_group=1, min_budget=1, horizon=6))
        >>> [r.observation for r in picker.pick()]
        ['s2']
        >>> picker.settle(dead=True)
        >>> [r.observation for r in picker.pick()], picker.pick()
        (['s1'], [])
    """

    def __init__(
        self, trajs: Sequence[Trajectory], group: int, config: SeroConfig, rounds: int = DEAD_ROOT_ROUNDS
    ) -> None:
        self.trajs, self.group, self.config = trajs, group, config
        self.rounds_left = 1 + rounds
        self.owed = config.roots_per_group
        self.tried: set[str] = set()
        self.taken: dict[int, int] = {}

    def pick(self) -> list[Root]:
        """The next round's roots ([] when the group is done)."""
        if self.owed <= 0 or self.rounds_left <= 0:
            return []
        self.rounds_left -= 1
        config = replace(self.config, roots_per_group=self.owed)
        roots = select_roots(self.trajs, group=self.group, config=config, exclude=self.tried, taken=self.taken)
        self.tried.update(r.observation for r in roots)
        for r in roots:
            self.taken[r.trajectory] = self.taken.get(r.trajectory, 0) + 1
        self.owed = 0
        return roots

    def roots(self) -> Iterator[Root]:
        """This group's roots one at a time, round after round (`root_rounds` over this picker alone): settle each
        before the next round begins."""
        for picks in root_rounds([self]):
            yield from (root for _, root in picks)

    def settle(self, *, dead: bool, root: Root | None = None) -> None:
        """Report one picked root's outcome; a dead one is owed a replacement in the next round (and, given as
        ``root``, no longer counts as its episode's root)."""
        self.owed += int(dead)
        if dead and root is not None and self.taken.get(root.trajectory, 0) > 0:
            self.taken[root.trajectory] -= 1


def root_rounds(pickers: Sequence[RootRounds]) -> Iterator[list[tuple[int, Root]]]:
    """The one loop over rounds of SERO roots, for every caller (``envkit-oracle``'s pipeline over many groups, both
    trainers over one group at a time through `RootRounds.roots`): each round, the roots every group's picker owes,
    as (index in `pickers`, root). Settle each round's roots (`RootRounds.settle`) before the next round; it ends
    when no group owes a root."""
    while picks := [(k, r) for k, picker in enumerate(pickers) for r in picker.pick()]:
        yield picks
