"""Oracle of the toy env (``envkit/Toy-v0``): walk straight to the goal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from envkit.testing import oracle_action


class ToyOracle:
    """Reads the goal from the observation and walks to it."""

    name = "toy"

    def start(self, env: gym.Env[Any, Any], observation: str, info: Mapping[str, Any]) -> None:
        """Nothing to plan."""

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        return oracle_action(observation)
