"""A deterministic toy environment for envkit's own tests and benchmarks (id ``envkit/Toy-v0``).

The agent walks on a line of cells ``0..length-1`` from cell 0 to the goal cell. Actions: ``"left"``,
``"right"``, ``"stay"``, ``"teleport"`` (a random jump drawn from the env's seeded generator, so snapshots must
carry the RNG state). Anything else is an invalid action: the observation says so and ``info["invalid"]`` is
True. Reaching the goal gives reward 1 and ends the episode; the step limit truncates it. ``info["state_key"]`` is
a digest of (length, goal, position): the exact state, whatever the path.

Options of `reset`: ``goal`` (cell index; default drawn from the seed), ``length`` (default 8).
Constructor arguments: ``max_steps`` (default 20), ``step_delay`` (seconds of simulated work per step, for pool
benchmarks), ``allow_crash`` (the action ``"crash"`` kills the process: for pool crash-recovery tests).
"""

from __future__ import annotations

import os
import time
from typing import Any, SupportsFloat

from envkit.capability import SnapshotCapability
from envkit.credit.state_keys import digest
from envkit.snapshot import SnapshotEnvBase

ACTIONS = ("left", "right", "stay", "teleport")


class ToyEnv(SnapshotEnvBase):
    """See the module docstring."""

    metadata = {"render_modes": [], **SnapshotCapability().metadata()}
    reset_options = frozenset({"length", "goal"})

    def __init__(
        self, max_steps: int = 20, step_delay: float = 0.0, allow_crash: bool = False, evaluation: bool = False
    ):
        super().__init__(evaluation=evaluation)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps
        self.step_delay = step_delay
        self.allow_crash = allow_crash
        self._pos = 0
        self._goal = 1
        self._length = 8
        self._t = 0
        self._history: tuple[str, ...] = ()

    def state_settings(self) -> dict[str, Any]:
        return {"max_steps": self.max_steps}

    def _obs(self, feedback: str) -> str:
        return f"You are at cell {self._pos} of {self._length}. The goal is cell {self._goal}. {feedback}".strip()

    def _info(self, invalid: bool = False) -> dict[str, Any]:
        return {
            "admissible_actions": list(ACTIONS),
            "won": self._pos == self._goal,
            "success": self._pos == self._goal,
            "invalid": invalid,
            "step": self._t,
            "task_id": f"goal-{self._goal}-len-{self._length}",
            "state_key": digest("toy", self._length, self._goal, self._pos),
        }

    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._length = int(options.get("length", 8))
        if self._length < 2:
            raise ValueError(f"option length must be >= 2, got {self._length}")
        goal = options.get("goal")
        self._goal = int(goal) if goal is not None else int(self.np_random.integers(1, self._length))
        if not 0 < self._goal < self._length:
            raise ValueError(f"option goal must be in 1..{self._length - 1}, got {self._goal}")
        self._pos = 0
        self._t = 0
        self._history = ()
        return self._obs("Reach the goal."), self._info()

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.step_delay:
            end = time.perf_counter() + self.step_delay
            while time.perf_counter() < end:  # busy work, like a real env's CPU cost
                pass
        a = action.strip().lower()
        if a == "crash" and self.allow_crash:
            os._exit(17)
        invalid = a not in ACTIONS
        if a == "left":
            self._pos = max(0, self._pos - 1)
        elif a == "right":
            self._pos = min(self._length - 1, self._pos + 1)
        elif a == "teleport":
            self._pos = int(self.np_random.integers(0, self._length))
        self._t += 1
        self._history = (*self._history, a)
        won = self._pos == self._goal
        feedback = "Nothing happens." if invalid else ("You reached the goal!" if won else f"You did: {a}.")
        truncated = not won and self._t >= self.max_steps
        return self._obs(feedback), float(won), won, truncated, self._info(invalid)

    def _snapshot(self) -> Any:
        return (self._pos, self._goal, self._length, self._t, self._history)

    def _restore(self, payload: Any, snapshot: Any) -> tuple[str, dict[str, Any]]:
        self._pos, self._goal, self._length, self._t, self._history = payload
        last = self._history[-1] if self._history else None
        if last is None:
            feedback = "Reach the goal."
        elif last not in ACTIONS:
            feedback = "Nothing happens."
        elif self._pos == self._goal:
            feedback = "You reached the goal!"
        else:
            feedback = f"You did: {last}."
        return self._obs(feedback), self._info(invalid=last is not None and last not in ACTIONS)


def oracle_action(observation: str) -> str:
    """The toy domain's oracle: walk towards the goal named in the observation."""
    words = observation.split()
    pos = int(words[4])
    goal = int(words[words.index("goal") + 3].rstrip("."))
    return "right" if goal > pos else "left" if goal < pos else "stay"
