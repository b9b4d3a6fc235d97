"""`PlayedPath`: one played episode in the form every step-table caller hands over, and the one state-key rule.

The local trainer (token `Episode`s), the OpenRLHF backend (rollout records' steps) and ``envkit-oracle rollout``
(`envkit.core.Trajectory`) each reduce an episode to a `PlayedPath`; `envkit.credit.step_table.StepTable.from_paths`
turns paths into step rows with one set of conventions (issue 36; they used to differ between the backends):

- **State key** (`paths_state_key`): ``adv.state_key``; unset: ``env`` when every state the table names (each path's
  states, its final state included when known, and the caller's extra states: SERO's oracle steps) carries the env's
  exact key, else ``observation`` (`envkit.credit.state_keys.resolve_state_key`).
- **Terminal node**: each step points to the recorded state after it, the last step of a failed or truncated
  episode included (docs/methods.md section 3: "every step adds edge (s_t, a_t, s_{t+1})"; SERO's roots are chosen
  on the same graph, `envkit.credit.sero.group_transitions`). Only where that state was never recorded does the
  row point to ``TERMINAL_NODE``; a successful episode's last step points to SUCCESS (`StepTable.next_nodes`).
- **Rewards** (`PlayedPath.credit_rewards`): with ``adv.terminal_reward`` set the episode is rewarded for success
  only: its last step's reward is ``terminal_reward * success`` (0 elsewhere), the episode return the same
  (docs/methods.md section 2: "terminal reward 10*success"); unset: the env's step rewards, and the caller's
  episode return (default their sum).

Example:
    >>> p = PlayedPath(0, 0, ("a", "b", "c"), ("go", "go"), (0.0, 0.0), (False, False), False)
    >>> p.nodes("observation"), p.credit_rewards(10.0)
    (['a', 'b', 'c'], ((0.0, 0.0), 0.0))
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from envkit.credit.state_keys import StateKeyKind, path_anchors, resolve_state_key

__all__ = ["PlayedPath", "paths_state_key"]


@dataclass(frozen=True)
class PlayedPath:
    """One played episode as a step table reads it.

    Attributes:
        group: Task-group id of its rows.
        trajectory: Its id, unique within the group.
        observations: The observation before each of the T actions, then the one after the last action when it
            was recorded (T + 1 entries) or not (T entries: the last step points to ``TERMINAL_NODE``).
        actions: The T actions.
        rewards: The env's T step rewards.
        invalid: The T invalid-action flags.
        success: The episode succeeded.
        infos: The env's info of each state, aligned with `observations` (anchors are derived from them,
            `envkit.credit.state_keys.path_anchors`); None: only the ``observation`` key is possible.
        episode_return: The return when ``terminal_reward`` is unset (None: the sum of `rewards`).
    """

    group: Hashable
    trajectory: Hashable
    observations: tuple[str, ...]
    actions: tuple[str, ...]
    rewards: tuple[float, ...]
    invalid: tuple[bool, ...]
    success: bool
    infos: tuple[Mapping[str, Any], ...] | None = None
    episode_return: float | None = None

    def __post_init__(self) -> None:
        n = len(self.actions)
        if len(self.rewards) != n or len(self.invalid) != n:
            raise ValueError(
                f"PlayedPath {self.group!r}/{self.trajectory!r}: {n} actions but {len(self.rewards)} rewards and "
                f"{len(self.invalid)} invalid flags; give one of each per action"
            )
        if len(self.observations) not in (n, n + 1) or (n == 0 and len(self.observations) != 1):
            raise ValueError(
                f"PlayedPath {self.group!r}/{self.trajectory!r}: {len(self.observations)} observations for {n} "
                "actions; give the state before each action, then the final one if it was recorded"
            )
        if self.infos is not None and len(self.infos) != len(self.observations):
            raise ValueError(f"PlayedPath: {len(self.infos)} infos for {len(self.observations)} observations")

    @property
    def final_known(self) -> bool:
        """The state after the last action was recorded."""
        return len(self.observations) == len(self.actions) + 1

    def key_infos(self) -> list[Mapping[str, Any]]:
        """What the state-key rule reads of each state: its info (none known: empty)."""
        return list(self.infos) if self.infos is not None else [{} for _ in self.observations]

    def nodes(self, kind: StateKeyKind) -> list[str]:
        """The node of each state under `kind` (T or T + 1, as `observations`).

        Raises:
            ValueError: `kind` is not ``observation`` but the path has no infos, or (``env``) a state has no key
                (says which key to use instead).
        """
        obs = [str(o) for o in self.observations]
        if kind == "observation":
            return obs
        if self.infos is None:
            if not self.actions:
                return obs[:0]
            raise ValueError(
                f"--adv.state-key={kind} but a path has no infos to read {kind!r} anchors from; set "
                "--adv.state-key=observation"
            )
        return path_anchors(kind, obs, self.actions[: len(obs) - 1], self.infos)

    def credit_rewards(self, terminal_reward: float | None) -> tuple[tuple[float, ...], float]:
        """(step rewards, episode return) the credit uses (module docstring, "Rewards")."""
        if terminal_reward is None:
            ret = float(sum(self.rewards)) if self.episode_return is None else float(self.episode_return)
            return tuple(float(r) for r in self.rewards), ret
        ret = float(terminal_reward) * float(self.success)
        n = len(self.actions)
        return tuple(ret if t == n - 1 else 0.0 for t in range(n)), ret


def paths_state_key(
    kind: StateKeyKind | None, paths: Iterable[PlayedPath], extra: Iterable[Mapping[str, Any]] = ()
) -> StateKeyKind:
    """The one state-key rule of a batch (module docstring): `kind`, or for None ``env`` when every state of the
    paths and every `extra` state info (SERO's oracle steps) carries the env's key, else ``observation``."""
    return resolve_state_key(kind, [*(i for p in paths for i in p.key_infos()), *extra])
