"""One run's per-env values, resolved once: the resolver of both trainers and the oracle pipeline.

As TRL's ``GRPOConfig.__post_init__`` fills and checks its fields once, `resolve_env_settings` takes what the user
set (None: unset) and fills the rest from the env's registry entry (`envkit.registration.env_facts`):

- ``horizon``: the run's turn cap, which is also SERO's episode budget (a root at step t has ``horizon - t``
  steps left, a continuation from it gets as many). Unset: the env's ``EnvEntry.horizon`` whenever SERO is on;
  with SERO off the front-end's own default (``unset_horizon``: the local trainer's 8, OpenRLHF's None = no cap
  of its own, only the env's step limit, the oracle pipeline's env horizon).
- ``root_budget``: the steps of budget a SERO root needs left (unset: ``EnvEntry.min_root_budget``).
- ``gamma_g``: GraphGPO's distance discount (unset: ``EnvEntry.gamma_g``; METHODS 3: 0.10 ALFWorld, 0.20 WebShop).
- ``terminal_reward``: a successful episode's return; every episode's return is ``terminal_reward * success`` in
  both trainers' credit (unset: ``TERMINAL_REWARD``, GiGPO's 10). One rule for both backends: OpenRLHF's scalar
  reward (its length penalties and clipping included) is not the turn credit's return, and the local trainer
  has no other; an env's shaped rewards are not credited by either.

and runs the cross-field checks, each error naming the front-end's own option to set (`OptionNames`):
SERO credits through GraphGPO (`check_sero_estimator`), and with SERO on the turn cap must leave a root its budget.
The result, `EnvSettings`, is frozen; the front-ends keep it and read it, nothing is derived again on read.

Example:
    >>> s = resolve_env_settings("envkit/WebShop-v0", sero=True, estimator="graphgpo", names=ORACLE_NAMES)
    >>> (s.horizon, s.root_budget, s.gamma_g)
    (15, 8, 0.2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from envkit.credit.defaults import TERMINAL_REWARD
from envkit.registration import env_facts

__all__ = [
    "LOCAL_NAMES",
    "OPENRLHF_NAMES",
    "ORACLE_NAMES",
    "EnvSettings",
    "OptionNames",
    "check_sero_estimator",
    "resolve_env_settings",
]


@dataclass(frozen=True)
class OptionNames:
    """How a front-end spells the options the resolver fills and checks (its errors say what to set)."""

    horizon: str
    """The turn cap / episode step budget option."""
    unset_horizon: str
    """How a user leaves the turn cap unset (to get the env's horizon)."""
    root_budget: str
    """A SERO root's minimum budget option."""
    gamma_g: str
    """GraphGPO's discount option."""
    terminal_reward: str
    """A successful episode's return option."""
    graphgpo: str
    """How a user asks for GraphGPO credit (SERO needs it)."""
    sero_off: str
    """How a user turns SERO off."""


LOCAL_NAMES = OptionNames(
    horizon="agent.max_turns", unset_horizon="leave agent.max_turns unset", root_budget="agent.sero_opts.min_budget",
    gamma_g="agent.adv.gamma_g", terminal_reward="agent.adv.terminal_reward", graphgpo="agent.estimator='graphgpo'", sero_off="agent.sero=False",
)  # fmt: skip
OPENRLHF_NAMES = OptionNames(
    horizon="--max-turns", unset_horizon="pass --max-turns 0", root_budget="--sero-opts.min-budget",
    gamma_g="--adv.gamma-g", terminal_reward="--adv.terminal-reward", graphgpo="--advantage graphgpo", sero_off="drop --sero",
)  # fmt: skip
ORACLE_NAMES = OptionNames(
    horizon="--max-steps", unset_horizon="leave --max-steps unset", root_budget="--sero.min-budget",
    gamma_g="--gamma-g", terminal_reward="(no option: TERMINAL_REWARD)", graphgpo="(GraphGPO is the pipeline's only credit)", sero_off="--sero.roots-per-group 0",
)  # fmt: skip


@dataclass(frozen=True)
class EnvSettings:
    """One run's per-env values, filled and checked by `resolve_env_settings`."""

    env_id: str | None
    """The run's env (None: a run without one gets the registry's defaults)."""
    horizon: int | None
    """Turn cap and SERO's episode budget (policy episodes stop there; a root at t has ``horizon - t`` left). None
    only with SERO off where the front-end has no cap of its own (OpenRLHF: the env's own step limit)."""
    root_budget: int
    """Steps of budget a SERO root needs left."""
    gamma_g: float
    """GraphGPO's distance discount."""
    terminal_reward: float = TERMINAL_REWARD
    """A successful episode's return (``terminal_reward * success``, both trainers' credit)."""


def check_sero_estimator(sero: bool, estimator: str, names: OptionNames) -> None:
    """SERO credits oracle continuations through the GraphGPO graph (docs/methods.md section 4).

    Raises:
        ValueError: SERO is on with another estimator; the message says what to set.
    """
    if sero and estimator != "graphgpo":
        raise ValueError(
            f"SERO credits oracle continuations through the GraphGPO graph (docs/methods.md section 4): set "
            f"{names.graphgpo} (got {estimator!r}) or {names.sero_off}"
        )


def resolve_env_settings(
    env_id: str | None,
    *,
    names: OptionNames,
    horizon: int | None = None,
    root_budget: int | None = None,
    gamma_g: float | None = None,
    terminal_reward: float | None = None,
    sero: bool = False,
    estimator: str = "graphgpo",
    unset_horizon: int | Literal["env"] | None = "env",
) -> EnvSettings:
    """The run's `EnvSettings`: what the user set, the rest from `env_id`'s registry entry, checked together.

    Args:
        env_id: The run's env (None or an unregistered id: the registry's defaults, `env_facts`).
        names: The front-end's spelling of each option, for the errors.
        horizon: The turn cap the user set (None: unset).
        root_budget: A SERO root's minimum budget the user set (None: the env's).
        gamma_g: GraphGPO's discount the user set (None: the env's).
        terminal_reward: A successful episode's return the user set (None: ``TERMINAL_REWARD``).
        sero: SERO is on.
        estimator: The run's advantage estimator (SERO needs ``graphgpo``).
        unset_horizon: What an unset turn cap becomes with SERO off: ``"env"`` (the env's horizon), a number,
            or None (no cap of the front-end's own).

    Raises:
        ValueError: SERO without GraphGPO; a turn cap below the root budget with SERO on; a value out of range.
    """
    win = float(terminal_reward) if terminal_reward is not None else TERMINAL_REWARD
    if not math.isfinite(win):
        raise ValueError(f"{names.terminal_reward} {win}: must be finite (or unset: {TERMINAL_REWARD})")
    check_sero_estimator(sero, estimator, names)
    facts = env_facts(env_id or "")
    if horizon is None:
        horizon = unset_horizon if isinstance(unset_horizon, int) and not sero else None
        if horizon is None and (sero or unset_horizon == "env"):
            horizon = facts.horizon
    budget = root_budget if root_budget is not None else facts.min_root_budget
    discount = gamma_g if gamma_g is not None else facts.gamma_g
    if horizon is not None and horizon < 1:
        raise ValueError(f"{names.horizon} {horizon}: must be >= 1 (or unset: the env's horizon {facts.horizon})")
    if budget < 1:
        raise ValueError(f"{names.root_budget} {budget}: must be >= 1 (or unset: the env's {facts.min_root_budget})")
    if not 0.0 < discount <= 1.0:
        raise ValueError(f"{names.gamma_g} {discount}: must be in (0, 1] (or unset: the env's {facts.gamma_g})")
    if sero and horizon is not None and horizon < budget:
        source = f"{names.root_budget}" if root_budget is not None else f"{env_id}'s EnvEntry.min_root_budget"
        raise ValueError(
            f"SERO roots need {budget} steps of budget left ({source}), but {names.horizon} {horizon} leaves no SERO "
            f"root: no state could be rescued. Set {names.horizon} to at least {budget} (the env's horizon is "
            f"{facts.horizon}: {names.unset_horizon} to use it) or lower {names.root_budget}"
        )
    return EnvSettings(env_id=env_id, horizon=horizon, root_budget=budget, gamma_g=discount, terminal_reward=win)
