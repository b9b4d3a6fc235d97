"""Values that cross module lines: steps, trajectories, oracle roots and continuations.

All are frozen dataclasses. Observations and actions are strings (LLM text); `info` holds the JSON-able part
of the env's info dict. Snapshots are opaque objects produced by `SnapshotEnvBase.snapshot()`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-serialisable subset of an info dict (other values are dropped, tuples become lists)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_"):
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[str(key)] = value
    return out


def env_success(info: Mapping[str, Any]) -> bool:
    """The env's own verdict on the task: ``info["success"]`` when present, else ``info["won"]`` (ALFWorld)."""
    if "success" in info:
        return bool(info["success"])
    return bool(info.get("won", False))


@dataclass(frozen=True)
class Step:
    """One transition.

    Attributes:
        observation: What the agent saw before acting.
        action: The action text it sent.
        reward: Reward returned by `env.step`.
        next_observation: Observation returned by `env.step`.
        terminated: Episode ended by the task (success or failure state).
        truncated: Episode ended by a limit (step budget).
        info: JSON-able part of the info returned by `env.step` (``admissible_actions``, ``won``, ...).
        snapshot: Snapshot of the state *before* the action (a root candidate), or None if not recorded.
        is_oracle: True when an oracle, not the policy, chose the action.
    """

    observation: str
    action: str
    reward: float
    next_observation: str
    terminated: bool
    truncated: bool
    info: Mapping[str, Any] = field(default_factory=dict)
    snapshot: Any = field(default=None, repr=False, compare=False)
    is_oracle: bool = False

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass(frozen=True)
class Trajectory:
    """One episode of one env.

    Attributes:
        env_id: Registered id of the env, e.g. ``"envkit/WebShop-v0"``.
        task_id: Stable id of the task (game, goal, problem) the episode was reset to.
        seed: Seed passed to `reset`.
        options: Options passed to `reset` (JSON-able).
        initial_observation: Observation returned by `reset`.
        initial_info: JSON-able info returned by `reset`.
        steps: The transitions, in order.
        success: Whether the env reported success (``info["success"]`` or ``info["won"]`` at the end).
        failed: True when the episode could not run to the end (worker crash, env error); see `error`.
        error: What went wrong when `failed`.
        final_snapshot: Snapshot after the last step (None unless recorded).
    """

    env_id: str
    task_id: str
    seed: int | None
    options: Mapping[str, Any]
    initial_observation: str
    initial_info: Mapping[str, Any]
    steps: tuple[Step, ...]
    success: bool
    failed: bool = False
    error: str | None = None
    final_snapshot: Any = field(default=None, repr=False, compare=False)

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def done(self) -> bool:
        return bool(self.steps) and self.steps[-1].done

    def observations(self) -> list[str]:
        """The observations s_0..s_T (T = length): the initial one, then each step's next observation."""
        return [self.initial_observation, *(s.next_observation for s in self.steps)]

    def snapshot_at(self, t: int) -> Any:
        """Snapshot of the state before step t (t == length: the final state)."""
        if t == len(self.steps):
            return self.final_snapshot
        return self.steps[t].snapshot

    def without_snapshots(self) -> Trajectory:
        """A copy with every snapshot dropped (for storage and cross-process transfer)."""
        return dataclasses.replace(
            self, steps=tuple(dataclasses.replace(s, snapshot=None) for s in self.steps), final_snapshot=None
        )


@dataclass(frozen=True)
class Root:
    """A state a policy reached, from which an oracle may take over (SERO, docs/methods.md section 4).

    Attributes:
        group: Index of the task group.
        trajectory: Index of the trajectory within its group.
        t: The root is the state before step t of that trajectory (t == length: its final state).
        observation: The observation at the root.
        snapshot: Snapshot of the root state (None: restore by replaying `actions`).
        actions: The action prefix that reaches the root from `reset(seed, options)`.
        budget_left: Steps the episode may still take from the root.
        depth: Number of steps taken before the root (== t).
    """

    group: int
    trajectory: int
    t: int
    observation: str
    snapshot: Any = field(default=None, repr=False, compare=False)
    actions: tuple[str, ...] = ()
    budget_left: int = 0

    @property
    def depth(self) -> int:
        return self.t


@dataclass(frozen=True)
class Continuation:
    """What an oracle did from a root.

    Attributes:
        root: Where it started.
        steps: The oracle's transitions in the live env (``is_oracle`` is True on each).
        success: The env itself confirmed success at the end.
        restored_by: ``"native"`` or ``"replay"``.
        weights: Reachability weight of each oracle step (docs/methods.md section 4), filled by SERO.
        reason: Why it stopped without success (empty on success).
    """

    root: Root
    steps: tuple[Step, ...]
    success: bool
    restored_by: str
    weights: tuple[float, ...] = ()
    reason: str = ""
