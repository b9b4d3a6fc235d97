"""Gymnasium ids ``envkit/<Domain>-v0``, registered by string entry point.

Registering imports nothing heavy: the domain module (and its optional dependencies) is imported only when
`gymnasium.make` builds that env. Domain modules import their dependencies through `envkit.errors.require`, so
a missing extra raises `MissingExtraError` naming the ``pip install`` that fixes it.

`envkit.make` is `gymnasium.make` plus an "unknown id" error that suggests the closest registered id.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

NAMESPACE = "envkit"


@dataclass(frozen=True)
class EnvEntry:
    """One registered environment.

    Attributes:
        id: The gymnasium id.
        entry_point: ``"module:Class"``, imported lazily by gymnasium.
        extra: The envkit extra that installs its dependencies (``pip install 'envkit[<extra>]'``).
        description: One line for ``envkit-oracle envs`` and the README.
        needs_data: Environment variable naming its data directory, if it needs downloaded data.
    """

    id: str
    entry_point: str
    extra: str | None
    description: str
    needs_data: str | None = None


ENVS: dict[str, EnvEntry] = {
    e.id: e
    for e in (
        EnvEntry("envkit/Toy-v0", "envkit.testing:ToyEnv", None, "deterministic line-walk env for envkit's own tests"),
        EnvEntry(
            "envkit/ALFWorld-v0",
            "envs.alfworld.env:ALFWorldEnv",
            "alfworld",
            "ALFWorld text games on the real TextWorld/PDDL engine",
            needs_data="ALFWORLD_DATA",
        ),
        EnvEntry("envkit/WebShop-v0", "envs.webshop.env:WebShopEnv", "webshop", "WebShop text shopping env"),
        EnvEntry(
            "envkit/WebShopBrowser-v0",
            "envs.webshop.browser:WebShopBrowserEnv",
            "browser",
            "WebShop in headless Chromium through selenium",
        ),
        EnvEntry("envkit/SWE-v0", "envs.swe.env:SWEEnv", "swe", "software-engineering tasks in sandboxed repos"),
        EnvEntry("envkit/Math-v0", "envs.math.env:MathEnv", "math", "math problems verified by math-verify"),
        EnvEntry("envkit/Code-v0", "envs.code.env:CodeEnv", "code", "code problems checked by tests in a sandbox"),
    )
}


def register_envs() -> None:
    """Register every envkit id with gymnasium (idempotent)."""
    for entry in ENVS.values():
        if entry.id in gym.registry:
            continue
        # No gymnasium wrappers: step limits and order checks live inside the envs so that they are part of
        # the snapshot (contract rule 4), and `gymnasium.make(...)` returns an object with snapshot().
        gym.register(id=entry.id, entry_point=entry.entry_point, order_enforce=False, disable_env_checker=True)


def suggest(env_id: str) -> str | None:
    """The registered id closest to `env_id` (case-insensitive), or None."""
    ids = list(gym.registry)
    lowered = {i.lower(): i for i in ids}
    if env_id.lower() in lowered:
        return lowered[env_id.lower()]
    close = difflib.get_close_matches(env_id.lower(), list(lowered), n=1, cutoff=0.5)
    return lowered[close[0]] if close else None


def make(env_id: str, *, remote: str | None = None, **kwargs: Any) -> gym.Env[Any, Any]:
    """`gymnasium.make` with a helpful error for unknown ids; ``remote=URL``: a session on an env server.

    With ``remote="http://host:port"`` (or ``ws://``) the env runs in an ``envkit-serve`` server and this returns
    an `envkit.remote.RemoteEnv`, itself a snapshot env (other keyword arguments: see `RemoteEnv`).

    Raises:
        UnknownEnvError: `env_id` is not registered; the message suggests the closest id.
        MissingExtraError: the env's optional dependencies are not installed.
    """
    from envkit.errors import UnknownEnvError

    if remote is not None:
        from envkit.remote.client import RemoteEnv

        return RemoteEnv(env_id, remote, **kwargs)
    register_envs()
    if env_id not in gym.registry:
        hint = suggest(env_id)
        known = ", ".join(sorted(ENVS))
        raise UnknownEnvError(
            f"unknown environment id {env_id!r}."
            + (f" Did you mean {hint!r}?" if hint else "")
            + f" envkit registers: {known}"
        )
    return gym.make(env_id, **kwargs)
