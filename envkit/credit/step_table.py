"""`StepTable`: the flat table of multi-turn step rows that GiGPO / GraphGPO / SERO advantages read.

API summary:
    StepTable(group, trajectory, step, state, reward, invalid=None, next_state=None, action=None,
              episode_return=None, success=None)         arrays of N rows, validated and frozen
    StepTable.from_paths(paths: Iterable[PlayedPath], state_key=None, terminal_reward=None) -> StepTable   THE builder
    StepTable.from_trajectories(groups: Sequence[Sequence[envkit.core.Trajectory]], state_key=None) -> StepTable
    trajectory_path(traj, group, index) -> PlayedPath
    trajectory_anchors(traj, kind) -> [anchor of s_0 .. s_T]     steps_anchors(kind, obs0, info0, steps) -> same
    trajectories_state_key(kind, trajectories, steps=()) -> the kind a batch uses (None: env when all have a key)
    steps_anchor_dicts(obs0, info0, steps) -> [{kind: anchor} of s_0 .. s_T]
    rows = StepRows(); rows.add(group=..., ..., success=...); rows.table(n=None)   one row at a time, all columns
    table.group_rows() -> {group id: row indices}        table.trajectory_rows() -> [row indices in step order]
    table.anchor_groups() -> (N,) int step-group code    table.next_nodes() -> (N,) next graph node per row
    table.transitions(rows) -> [(state, action, next_node)]
    factorize(ids, n) -> (codes (N,), n_groups)          any hashable ids, first-appearance order

Rows may come in any order; a trajectory is identified by (group, trajectory) and ordered by ``step``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from envkit.credit.graph import SUCCESS_NODE, TERMINAL_NODE
from envkit.credit.played_path import PlayedPath, paths_state_key
from envkit.credit.state_keys import AnchorTracker, StateKeyKind, path_anchors

if TYPE_CHECKING:
    from envkit.core import Step, Trajectory

__all__ = [
    "StepRows",
    "StepTable",
    "factorize",
    "steps_anchor_dicts",
    "steps_anchors",
    "trajectories_state_key",
    "trajectory_anchors",
    "trajectory_path",
]


def trajectories_state_key(
    kind: StateKeyKind | None, trajectories: Iterable[Trajectory], steps: Iterable[Step] = ()
) -> StateKeyKind:
    """`paths_state_key` over the trajectories that ran (`trajectory_path`) and `steps` (SERO: the successful
    continuations' oracle steps) (None: ``env`` if every state has one)."""
    used = [trajectory_path(t, 0, i) for i, t in enumerate(trajectories) if not t.failed and t.steps]
    return paths_state_key(kind, used, [s.info for s in steps])


def steps_anchors(kind: StateKeyKind, observation: str, info: Mapping[str, Any], steps: Sequence[Step]) -> list[str]:
    """The anchor (`envkit.credit.state_keys`) of every state of a path that starts at (`observation`, `info`)
    and takes `steps`: T + 1 anchors, the state before each step, then the state after the last one."""
    observations = [observation, *(s.next_observation for s in steps)]
    infos = [info, *(s.info for s in steps)]
    return path_anchors(kind, observations, [s.action for s in steps], infos)


def steps_anchor_dicts(observation: str, info: Mapping[str, Any], steps: Sequence[Step]) -> list[dict[str, str]]:
    """Like `steps_anchors`, each state's digest anchors (`AnchorTracker.anchors`: graphgpo-recipe, and env when
    the env gave a key)."""
    tracker = AnchorTracker(observation, info)
    out = [tracker.anchors()]
    for s in steps:
        tracker.step(s.action, s.next_observation, s.info)
        out.append(tracker.anchors())
    return out


def trajectory_anchors(traj: Trajectory, kind: StateKeyKind) -> list[str]:
    """The anchor of each state s_0..s_T of a trajectory under `kind`."""
    return steps_anchors(kind, traj.initial_observation, traj.initial_info, traj.steps)


def factorize(ids: Any, n: int | None = None) -> tuple[np.ndarray, int]:
    """Integer codes for hashable ids in first-appearance order.

    Args:
        ids: (N,) ids: ints, strings, tuples, any hashable.
        n: Expected N (raises on mismatch).

    Returns:
        (codes (N,) int64, number of distinct ids).
    """
    seq = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    if n is not None and len(seq) != n:
        raise ValueError(f"group ids have {len(seq)} rows but the values have {n}")
    table: dict[Hashable, int] = {}
    codes = np.fromiter((table.setdefault(x, len(table)) for x in seq), dtype=np.int64, count=len(seq))
    return codes, len(table)


def _obj(name: str, values: Any, n: int) -> np.ndarray:
    arr = np.empty(n, dtype=object)
    seq = list(values)
    if len(seq) != n:
        raise ValueError(f"StepTable.{name} has {len(seq)} rows, expected {n}")
    arr[:] = seq
    return arr


@dataclass(frozen=True, eq=False)
class StepTable:
    """N step rows of multi-turn rollouts (one row = one policy turn).

    Pass array-likes; after construction every attribute is a numpy array (strings/ids as object arrays).

    Attributes:
        group: (N,) task-group id (hashable) of each row.
        trajectory: (N,) trajectory id, unique within its group.
        step: (N,) int step index within the trajectory (0-based, unique per trajectory).
        state: (N,) str anchor state of the state before the action: the raw observation (no history), or
            another anchor (`envkit.credit.state_keys`: the env's exact key, the graphgpo-recipe anchor).
        reward: (N,) float env reward of the step.
        invalid: (N,) bool, the action was invalid/malformed. Default all False.
        next_state: (N,) str observation after the action, or None: derived as the next row's state, and for a
            trajectory's last row ``TERMINAL_NODE`` (a failed end with unknown observation).
        action: (N,) str action text (graph edge labels). Default "".
        episode_return: (N,) float episode return R_i of the row's trajectory. Default: the undiscounted sum of
            the trajectory's step rewards.
        success: (N,) bool the row's trajectory succeeded; its last step points to SUCCESS in GraphGPO.
            Default ``episode_return > 0`` (docs/methods.md: "an episode with reward > 0").
    """

    group: Any
    trajectory: Any
    step: Any
    state: Any
    reward: Any
    invalid: Any = None
    next_state: Any = None
    action: Any = None
    episode_return: Any = None
    success: Any = None

    def __post_init__(self) -> None:
        n = len(self.state)
        put = object.__setattr__
        put(self, "group", _obj("group", self.group, n))
        put(self, "trajectory", _obj("trajectory", self.trajectory, n))
        put(self, "state", _obj("state", self.state, n))
        if not all(isinstance(s, str) for s in self.state):
            raise TypeError("StepTable.state must hold str observations (hash other observations to str first)")
        step = np.asarray(self.step, dtype=np.int64)
        reward = np.asarray(self.reward, dtype=np.float64)
        for name, arr in (("step", step), ("reward", reward)):
            if arr.shape != (n,):
                raise ValueError(f"StepTable.{name} has shape {arr.shape}, expected ({n},)")
        if not np.all(np.isfinite(reward)):
            raise ValueError("StepTable.reward contains NaN or inf")
        put(self, "step", step)
        put(self, "reward", reward)
        invalid = np.zeros(n, dtype=bool) if self.invalid is None else np.asarray(self.invalid, dtype=bool)
        if invalid.shape != (n,):
            raise ValueError(f"StepTable.invalid has shape {invalid.shape}, expected ({n},)")
        put(self, "invalid", invalid)
        put(self, "action", _obj("action", [""] * n if self.action is None else self.action, n))
        if self.next_state is not None:
            put(self, "next_state", _obj("next_state", self.next_state, n))
        keys = list(zip(self.group.tolist(), self.trajectory.tolist(), step.tolist()))
        if len(set(keys)) != n:
            raise ValueError(
                "StepTable has two rows with the same (group, trajectory, step); step indices must be unique"
            )
        traj_rows = self._compute_trajectory_rows()
        put(self, "_traj_rows", traj_rows)
        if self.episode_return is None:
            ret = np.zeros(n)
            for rows in traj_rows:
                ret[rows] = reward[rows].sum()
        else:
            ret = np.asarray(self.episode_return, dtype=np.float64)
            if ret.shape != (n,):
                raise ValueError(f"StepTable.episode_return has shape {ret.shape}, expected ({n},)")
        put(self, "episode_return", ret)
        succ = (ret > 0) if self.success is None else np.asarray(self.success, dtype=bool)
        if succ.shape != (n,):
            raise ValueError(f"StepTable.success has shape {succ.shape}, expected ({n},)")
        put(self, "success", succ)
        for rows in traj_rows:
            if len(set(ret[rows].tolist())) > 1 or len(set(succ[rows].tolist())) > 1:
                raise ValueError("episode_return and success must be equal on every row of one trajectory")

    def __len__(self) -> int:
        return len(self.state)

    def _compute_trajectory_rows(self) -> list[np.ndarray]:
        by_traj: dict[tuple[Hashable, Hashable], list[int]] = {}
        for i, key in enumerate(zip(self.group.tolist(), self.trajectory.tolist())):
            by_traj.setdefault(key, []).append(i)
        out = []
        for rows in by_traj.values():
            idx = np.asarray(rows, dtype=np.int64)
            out.append(idx[np.argsort(self.step[idx], kind="stable")])
        return out

    def trajectory_rows(self) -> list[np.ndarray]:
        """Row indices of each trajectory, ordered by step (trajectories in first-appearance order)."""
        return list(self._traj_rows)  # type: ignore[attr-defined]

    def group_rows(self) -> dict[Hashable, np.ndarray]:
        """Row indices of each group id (in row order)."""
        out: dict[Hashable, list[int]] = {}
        for i, g in enumerate(self.group.tolist()):
            out.setdefault(g, []).append(i)
        return {g: np.asarray(r, dtype=np.int64) for g, r in out.items()}

    def anchor_groups(self) -> np.ndarray:
        """(N,) int code of each row's step group: same group id and exactly the same anchor state."""
        codes, _ = factorize(list(zip(self.group.tolist(), self.state.tolist())))
        return codes

    def next_nodes(self) -> np.ndarray:
        """(N,) graph node each row's action leads to: SUCCESS for a successful trajectory's last step, else
        ``next_state`` (or the next row's state; ``TERMINAL_NODE`` after a last step with no next_state)."""
        out = np.empty(len(self), dtype=object)
        for rows in self._traj_rows:  # type: ignore[attr-defined]
            for pos, i in enumerate(rows):
                last = pos == len(rows) - 1
                if last and self.success[i]:
                    out[i] = SUCCESS_NODE
                elif self.next_state is not None:
                    out[i] = self.next_state[i]
                else:
                    out[i] = TERMINAL_NODE if last else self.state[rows[pos + 1]]
        return out

    def transitions(self, rows: Sequence[int] | np.ndarray | None = None) -> list[tuple[str, str, str]]:
        """Edges (state, action, next node) of the given rows (default all), in row order."""
        nxt = self.next_nodes()
        idx = range(len(self)) if rows is None else [int(i) for i in rows]
        return [(self.state[i], self.action[i], nxt[i]) for i in idx]

    @classmethod
    def from_paths(
        cls,
        paths: Iterable[PlayedPath],
        *,
        state_key: StateKeyKind | None = None,
        terminal_reward: float | None = None,
        extra_infos: Iterable[Mapping[str, Any]] = (),
    ) -> StepTable:
        """The one step-table builder (`envkit.credit.played_path`: its state-key rule, terminal-node and reward
        conventions), for every caller: one row per action of each path, in path order.

        Args:
            paths: The played paths (`PlayedPath`).
            state_key: ``adv.state_key`` (None: `paths_state_key`'s rule over the paths and `extra_infos`).
            terminal_reward: ``adv.terminal_reward`` (`PlayedPath.credit_rewards`).
            extra_infos: Infos of other states the credit names (SERO's oracle steps), for the state-key rule.
        """
        paths = list(paths)
        kind = paths_state_key(state_key, paths, extra_infos)
        rows = StepRows()
        for p in paths:
            nodes = p.nodes(kind)
            rewards, ret = p.credit_rewards(terminal_reward)
            for t, action in enumerate(p.actions):
                rows.add(
                    group=p.group, trajectory=p.trajectory, step=t, state=nodes[t], reward=rewards[t],
                    invalid=bool(p.invalid[t]), next_state=nodes[t + 1] if t + 1 < len(nodes) else TERMINAL_NODE,
                    action=action, episode_return=ret, success=bool(p.success),
                )  # fmt: skip
        return cls(**rows.columns)

    @classmethod
    def from_trajectories(
        cls,
        groups: Sequence[Sequence[Trajectory]],
        *,
        terminal_reward: float | None = None,
        state_key: StateKeyKind | None = None,
        extra_steps: Iterable[Step] = (),
    ) -> StepTable:
        """Rows from ``groups[g][i]`` = trajectory i of task group g (envkit.core.Trajectory), by `from_paths`
        (`trajectory_path`; `extra_steps`: SERO's oracle steps, for the state-key rule).

        Failed-to-run trajectories (``failed``) and empty ones are skipped. ``invalid`` is read from each step's
        ``info["invalid"]``; each step points to its recorded next observation.
        """
        paths = [
            trajectory_path(traj, g, i)
            for g, trajs in enumerate(groups)
            for i, traj in enumerate(trajs)
            if not traj.failed and traj.steps
        ]
        extra = [s.info for s in extra_steps]
        return cls.from_paths(paths, state_key=state_key, terminal_reward=terminal_reward, extra_infos=extra)


def trajectory_path(traj: Trajectory, group: Hashable, index: Hashable) -> PlayedPath:
    """A trajectory as a `PlayedPath` (every state recorded, the final one included)."""
    return PlayedPath(
        group, index, tuple(traj.observations()), tuple(s.action for s in traj.steps),
        tuple(float(s.reward) for s in traj.steps), tuple(bool(s.info.get("invalid", False)) for s in traj.steps),
        bool(traj.success), infos=(traj.initial_info, *(s.info for s in traj.steps)),
        episode_return=float(traj.total_reward),
    )  # fmt: skip


STEP_COLUMNS = (
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


class StepRows:
    """Builds a `StepTable` with every column given, one row at a time.

    Attributes:
        columns: Column name -> the values added so far (`STEP_COLUMNS` order).
    """

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {k: [] for k in STEP_COLUMNS}

    def __len__(self) -> int:
        return len(self.columns["state"])

    def add(
        self,
        *,
        group: Hashable,
        trajectory: Hashable,
        step: int,
        state: str,
        reward: float,
        invalid: bool,
        next_state: str,
        action: str,
        episode_return: float,
        success: bool,
    ) -> None:
        """Append one row (see `StepTable` for what each column means)."""
        row = (group, trajectory, step, state, reward, invalid, next_state, action, episode_return, success)
        for name, value in zip(STEP_COLUMNS, row, strict=True):
            self.columns[name].append(value)

    def table(self, n: int | None = None) -> StepTable:
        """The `StepTable` of the rows added so far (of the first `n` rows when `n` is given)."""
        return StepTable(**{name: values[:n] for name, values in self.columns.items()})
