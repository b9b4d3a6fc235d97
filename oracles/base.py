"""The oracle protocol and the driver that lets an oracle act in a live env.

An oracle is training-only privileged control (SERO, docs/methods.md section 4): it may read the env's hidden state
(goal, PDDL facts, gold patch) through ``env.unwrapped``, and it acts only through ``env.step`` so that every
continuation is executable. Domain oracles live in ``oracles/<domain>.py``; an env's default oracle is named by
its registry entry (``envkit.registration.EnvEntry.oracle``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from envkit.core import Step, env_success
from envkit.errors import EnvkitError, UnknownEnvError
from envkit.recorder import EpisodeRecorder
from envkit.registration import ENVS, env_facts
from envkit.snapshot import snapshot_env


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


def dead_end_reason(oracle: Any, env: gym.Env[Any, Any]) -> str | None:
    """Why `env`'s current state provably cannot be won, from the oracle's optional ``dead_end(env)`` check.

    An oracle may define ``dead_end(env) -> str | None``: a cheap check (no acting, no search) that returns the
    reason when no continuation can succeed from the current state. None: no such check, or no reason found.
    """
    check = getattr(oracle, "dead_end", None)
    if check is None:
        return None
    why = check(env)
    return None if why is None else str(why)


def make_oracle(env_id: str, **kwargs: Any) -> Oracle:
    """Build the default oracle for `env_id` (its ``EnvEntry.oracle``; keyword arguments go to its constructor)."""
    spec = env_facts(env_id).oracle
    if spec is None:
        known = ", ".join(sorted(e.id for e in ENVS.values() if e.oracle))
        raise UnknownEnvError(
            f"no oracle is registered for {env_id!r} (its envkit.registration.EnvEntry.oracle); known: {known}"
        )
    module, _, cls = spec.partition(":")
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
    rec = EpisodeRecorder(observation, info, snapshots=snapshot_steps)  # the oracle's steps (envkit.recorder)
    snaps = snapshot_env(env) if snapshot_steps else None
    for _ in range(max_steps):
        try:
            action = oracle.act(observation, info)
        except OracleGaveUp as exc:
            return OracleRun(rec.steps, False, f"oracle gave up: {exc}")
        snap = snaps.snapshot() if snaps is not None else None
        observation, _, term, trunc, info = out = env.step(action)
        rec.step(snap, action, *out, is_oracle=True)
        if env_success(info):
            return OracleRun(rec.steps, True, "")
        if term or trunc:
            return OracleRun(rec.steps, False, "episode ended without success")
    return OracleRun(rec.steps, False, f"step budget of {max_steps} spent")


def oracle_run_to_json(run: OracleRun) -> dict[str, Any]:
    """An `OracleRun` as JSON (``envkit-serve``'s oracle endpoint answers with it)."""
    steps = [
        {"observation": s.observation, "action": s.action, "reward": s.reward, "next_observation": s.next_observation,
         "terminated": s.terminated, "truncated": s.truncated, "info": dict(s.info)}
        for s in run.steps
    ]  # fmt: skip
    return {"steps": steps, "success": run.success, "reason": run.reason}


def oracle_run_from_json(d: Mapping[str, Any]) -> OracleRun:
    """The inverse of `oracle_run_to_json` (steps come back with ``is_oracle`` True and no snapshot)."""
    steps = tuple(
        Step(str(s["observation"]), str(s["action"]), float(s["reward"]), str(s["next_observation"]),
             bool(s["terminated"]), bool(s["truncated"]), dict(s["info"]), None, is_oracle=True)
        for s in d["steps"]
    )  # fmt: skip
    return OracleRun(steps, bool(d["success"]), str(d["reason"]))
