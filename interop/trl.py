"""An envkit env as a TRL environment: ``GRPOTrainer(environment_factory=trl_environment("envkit/WebShop-v0"))``.

TRL 1.16's multi-turn path: the trainer builds one instance per rollout, calls ``reset(**row)`` (the dataset row;
its ``seed`` / ``options`` columns pick the task) and appends the returned text to the prompt, exposes every public
method as a tool the model calls during generation, and scores the rollout with ``get_reward()``. The class made
here has exactly one tool, ``act(action)``, which steps the envkit env; ``get_reward`` returns the episode's summed
env reward. Envs may be local or on a server (``remote="http://host:port"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


def render(obs: str, info: Mapping[str, Any], *, max_actions: int = 30) -> str:
    """The observation text, with the admissible actions listed when the env gives them."""
    acts = list(info.get("admissible_actions") or [])
    if not acts:
        return obs
    more = f" (+{len(acts) - max_actions} more)" if len(acts) > max_actions else ""
    return f"{obs}\nAdmissible actions: " + "; ".join(acts[:max_actions]) + more


def trl_environment(
    env_id: str, *, remote: str | None = None, seed_key: str = "seed", **make_kwargs: Any
) -> Callable[[], Any]:
    """A class to pass as TRL's ``environment_factory`` (each call builds one envkit env).

    Args:
        env_id: A registered envkit id.
        remote: URL of an ``envkit-serve`` server of `env_id` (None: the env runs in the trainer's process).
        seed_key: The dataset column with the task's seed (absent: seeds 0, 1, 2, ... per instance).
        **make_kwargs: Passed to ``envkit.make``.
    """
    import envkit

    class EnvkitTRLEnv:
        __doc__ = f"TRL environment for {env_id} (one envkit env per instance)"

        def __init__(self):  # type: ignore[no-untyped-def]
            self._env = (
                envkit.make(env_id, remote=remote, **make_kwargs) if remote else envkit.make(env_id, **make_kwargs)
            )
            self._episodes = 0
            self._reward = 0.0
            self._done = False

        def reset(self, **row: Any) -> str:  # type: ignore[no-untyped-def]
            seed = row.get(seed_key)
            seed = int(seed) if seed is not None else self._episodes
            self._episodes += 1
            obs, info = self._env.reset(seed=seed, options=dict(row.get("options") or {}))
            self._reward, self._done = 0.0, False
            return render(obs, info)

        # `self` is left unannotated: transformers' get_json_schema reads the annotations of the tool's arguments.
        def act(self, action: str) -> str:  # type: ignore[no-untyped-def]
            """Take one action in the environment.

            Args:
                action: The action text, for example one of the admissible actions listed in the observation.

            Returns:
                The observation after the action.
            """
            if self._done:
                raise ValueError("the episode is over: no more actions are accepted")
            obs, reward, term, trunc, info = self._env.step(str(action))
            self._reward += float(reward)
            self._done = bool(term or trunc)
            return render(obs, info) + ("\nThe episode is over." if self._done else "")

        def get_reward(self) -> float:  # type: ignore[no-untyped-def]
            return self._reward

    # TRL lists the class's public functions as tools: `act` only (the env sits in `_env`). The class name names
    # the reward column (``rewards/Envkit_WebShop_v0/mean``).
    EnvkitTRLEnv.__name__ = EnvkitTRLEnv.__qualname__ = "Envkit_" + re.sub(r"\W", "_", env_id.split("/")[-1])
    return EnvkitTRLEnv
