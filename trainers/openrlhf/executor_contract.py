"""What the OpenRLHF executor's parts share: the task of one rollout (`RolloutTask`), and what the builders that
finish a group (`envkit.trainers.openrlhf.branch_rows`, `envkit.trainers.openrlhf.sero_rows`) need of the executor
that played it (`GroupExecutor`, met by `envkit.trainers.openrlhf.gym_executor.GymAgentExecutor`).

The executor calls those builders; they know it only through this protocol, so neither imports the other back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym

from envkit.trainers.openrlhf.config import BackendConfig

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class RolloutTask:
    """One episode's env and reset arguments, parsed from a dataset label."""

    env_id: str
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_label(cls, label: Any, config: BackendConfig) -> RolloutTask:
        """Parse a label (JSON object, integer seed, or None) with the config's defaults.

        Raises:
            ValueError: the label cannot be read or no env id is known.
        """
        data: Any = label
        if isinstance(label, str):
            text = label.strip()
            try:
                data = json.loads(text) if text else {}
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"task label {label!r} is neither JSON nor an integer seed; write labels as "
                    '\'{"seed": 3, "options": {...}}\' (and "env": "envkit/<Id>" unless --env is given)'
                ) from exc
        if data is None:
            data = {}
        if isinstance(data, int) and not isinstance(data, bool):
            data = {"seed": data}
        if not isinstance(data, Mapping):
            raise ValueError(f"task label {label!r}: expected a JSON object or an integer seed")
        env_id = data.get("env") or config.env_id
        if not env_id:
            raise ValueError(f"task label {label!r} names no env and --env was not given")
        kwargs = {**config.env_kwargs, **dict(data.get("kwargs", {}))}
        seed = data.get("seed")
        return cls(str(env_id), None if seed is None else int(seed), dict(data.get("options", {})), kwargs)

    @property
    def env_key(self) -> str:
        return json.dumps([self.env_id, self.kwargs], sort_keys=True, default=str)


class GroupExecutor(Protocol):
    """The executor as a group's row builders use it."""

    config: BackendConfig

    def lease(self, task: RolloutTask) -> contextlib.AbstractAsyncContextManager[gym.Env[Any, Any]]:
        """An env for `task`, returned to the executor's cache after."""
        ...

    async def play_episode(
        self,
        env: gym.Env[Any, Any],
        task: RolloutTask,
        prompt: str,
        label: Any,
        sampling_params: Any,
        max_length: int,
        tokenizer: PreTrainedTokenizerBase,
        engine: Any,
        fork: Any = None,
    ) -> dict[str, Any]:
        """One episode in `env` (from reset, or from a fork's restored state), as an OpenRLHF response row."""
        ...
