"""The oracle protocol and the driver that lets an oracle act in a live env.

An oracle is training-only privileged control (SERO, docs/methods.md section 4): it may read the env's hidden state
(goal, PDDL facts, gold patch) through ``env.unwrapped``, and it acts only through ``env.step`` so that every
continuation is executable. Domain oracles live in ``oracles/<domain>.py`` and are looked up by env id in
`ORACLES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from envkit.core import Step, env_success, jsonable
from envkit.errors import EnvkitError, UnknownEnvError


class OracleGaveUp(EnvkitError):
    """Raised by `Oracle.act` when it cannot go on; the message says why (kept in the continuation)."""


@runtime_checkable
class Oracle(Protocol):
    """Privileged controller for one domain.

    `start` is called once at the take-over state (after reset or restore); it may plan. `act` returns the next
    action for the current state, or raises `OracleGaveUp` with the reason.
    """

    name: str

    def start(self, env: gym.Env[Any, Any], observation: str, info: Mapping[str, Any]) -> None: ...

    def act(self, observation: str, info: Mapping[str, Any]) -> str: ...


#: Default oracle per env id, as ``"module:Class"`` (imported lazily).
ORACLES: dict[str, str] = {
    "envkit/Toy-v0": "oracles.toy:ToyOracle",
    "envkit/ALFWorld-v0": "oracles.alfworld:ALFWorldOracle",
    "envkit/WebShop-v0": "oracles.webshop:WebShopOracle",
    "envkit/WebShopBrowser-v0": "oracles.webshop:WebShopOracle",
    "envkit/SWE-v0": "oracles.swe:GoldPatchOracle",
    "envkit/Math-v0": "oracles.reference:MathReferenceOracle",
    "envkit/Code-v0": "oracles.reference:CodeReferenceOracle",
}


def make_oracle(env_id: str, **kwargs: Any) -> Oracle:
    """Build the default oracle for `env_id` (keyword arguments go to its constructor)."""
    if env_id not in ORACLES:
        raise UnknownEnvError(f"no oracle is registered for {env_id!r}; known: {', '.join(sorted(ORACLES))}")
    module, _, cls = ORACLES[env_id].partition(":")
    oracle: Oracle = getattr(importlib.import_module(module), cls)(**kwargs)
    return oracle


@dataclass(frozen=True)
class OracleRun:
    """What `run_oracle` returns.

    Attributes:
        steps: The oracle's transitions (``is_oracle`` True).
        success: The env itself reported success (``info["success"]`` or ``info["won"]``) at the end.
        reason: Why it stopped without success ("" on success).
    """

    steps: tuple[Step, ...]
    success: bool
    reason: str


def run_oracle(
    env: gym.Env[Any, Any],
    oracle: Oracle,
    observation: str,
    info: Mapping[str, Any],
    *,
    max_steps: int,
    snapshot_steps: bool = False,
) -> OracleRun:
    """Let `oracle` act in the live `env` from the current state until success, episode end or `max_steps`.

    Args:
        env: The env, already reset or restored to the take-over state.
        oracle: The oracle.
        observation: Current observation (as returned by reset/restore/step).
        info: Current info.
        max_steps: Step budget for the continuation.
        snapshot_steps: Record a snapshot before each oracle step.

    Raises:
        EnvkitError: `env` is an evaluation env (oracles are training-only).
    """
    if getattr(env.unwrapped, "evaluation", False):
        raise EnvkitError(
            "refusing to run an oracle in an evaluation env (SERO's oracle is training-only); "
            "make training envs with evaluation=False"
        )
    if env_success(info):
        return OracleRun((), True, "")
    try:
        oracle.start(env, observation, info)
    except OracleGaveUp as exc:
        return OracleRun((), False, f"oracle gave up at start: {exc}")
    steps: list[Step] = []
    for _ in range(max_steps):
        try:
            action = oracle.act(observation, info)
        except OracleGaveUp as exc:
            return OracleRun(tuple(steps), False, f"oracle gave up: {exc}")
        snap = env.snapshot() if snapshot_steps else None  # type: ignore[attr-defined]
        nxt, reward, term, trunc, info = env.step(action)
        steps.append(
            Step(observation, action, float(reward), nxt, bool(term), bool(trunc), jsonable(info), snap, is_oracle=True)
        )
        observation = nxt
        if env_success(info):
            return OracleRun(tuple(steps), True, "")
        if term or trunc:
            return OracleRun(tuple(steps), False, "episode ended without success")
    return OracleRun(tuple(steps), False, f"step budget of {max_steps} spent")
