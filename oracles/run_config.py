"""`RunConfig`: the settings of one ``envkit-oracle rollout`` run, and the options of that command.

tyro builds the command line from this dataclass (`envkit.oracles.cli`), so each option's help and default is the
field's own: ``--env``, ``--tasks``, ``--env-kwarg KEY=VALUE``, the SERO options nested as ``--sero.*``
(`OracleSeroOptions`: the shared `envkit.credit.sero.SeroOptions` plus this pipeline's l_j ``weighting``, with the
reachability weight as ``--sero.reach.*``; the trainers' oracle-row cap is not an option here: it acts only in a
trainer). Settings that are facts of
the env (episode budget, a root's minimum budget, GraphGPO's discount) default to None: the env's `EnvEntry`.

Example:
    >>> cfg = RunConfig(env_id="envkit/Toy-v0", sero=OracleSeroOptions(roots_per_group=1))
    >>> (cfg.horizon, cfg.sero_config.roots_per_group, cfg.sero_config.root_budget)
    (20, 1, 2)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import tyro

from envkit.credit.sero import SeroConfig, SeroOptions, widen_options
from envkit.credit.state_keys import StateKeyKind
from envkit.env_settings import ORACLE_NAMES, EnvSettings, resolve_env_settings
from envkit.fleet.config import FleetConfig
from envkit.registration import ENVS, EnvEntry
from envkit.runtime.command_line import key_values
from envkit.runtime.models import DEVICE

__all__ = ["DEFAULT_ENV", "OracleSeroOptions", "RunConfig"]

DEFAULT_ENV = "envkit/WebShop-v0"


def _facts(name: str) -> str:
    """One per-env fact of the registry, for --help (envs that keep the default are summed up as "others")."""
    default = getattr(EnvEntry("", "", None, ""), name)
    own = [
        f"{e.id.split('/')[-1].split('-')[0]} {getattr(e, name)}" for e in ENVS.values() if getattr(e, name) != default
    ]
    return ", ".join([*own, f"others {default}"])


@dataclass(frozen=True)
class OracleSeroOptions(SeroOptions):
    """`SeroOptions` plus what only ``envkit-oracle rollout`` reads (``--sero.*``)."""

    # --- how l_j of the reachability weight is scored ---
    weighting: Literal["sequence", "choice"] = "sequence"
    """How l_j of the reachability weight is computed: ``sequence`` (length-normalised log-likelihood of the
    oracle action) or ``choice`` (its log-probability among the admissible actions; needs an env that lists
    them). The trainers always use ``sequence`` (the trained model's own log-likelihood)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weighting not in ("sequence", "choice"):
            raise ValueError(f"--sero.weighting must be 'sequence' or 'choice', got {self.weighting!r}")


@dataclass(frozen=True)
class RunConfig:
    """G policy rollouts per task, SERO roots, oracle continuations, one record per step.

    Fields in groups: what is rolled out, who acts, how steps are credited, where it runs and where it goes.
    """

    # --- what is rolled out ---
    env_id: Annotated[str, tyro.conf.arg(name="env")] = DEFAULT_ENV
    """Registered env id (``envkit-oracle envs`` lists them)."""
    env_kwargs: Annotated[Mapping[str, Any], key_values("--env-kwarg"), tyro.conf.arg(name="env-kwarg")] = field(
        default_factory=dict
    )
    """Env constructor argument KEY=VALUE (repeatable; VALUE parsed as JSON when it can be)."""
    max_steps: Annotated[
        int | None, tyro.conf.arg(help=f"Episode step budget (None: the env's EnvEntry.horizon: {_facts('horizon')}).")
    ] = None
    tasks: int = 32
    """Number of tasks (task i resets with a seed derived from --seed, i)."""
    group: int = 8
    """Rollouts per task (G)."""
    seed: int = 0
    """Run seed (task seeds, random policy draws)."""
    # --- who acts ---
    policy: str = "random"
    """Rollout policy: random | scripted:FILE | hf:PATH[?mode=choose] | openai:URL#MODEL."""
    oracle_kwargs: Annotated[Mapping[str, Any], key_values("--oracle-kwarg"), tyro.conf.arg(name="oracle-kwarg")] = (
        field(default_factory=dict)
    )
    """Oracle constructor argument KEY=VALUE (repeatable; e.g. ALFWorld ``strategy=...``)."""
    device: str = DEVICE
    """Device of model policies/scorers: auto | cpu | cuda."""
    # --- how steps are credited ---
    sero: OracleSeroOptions = field(default_factory=OracleSeroOptions)
    """SERO options (roots per group, a root's minimum budget, l_j weighting, reachability weight; given a
    plain `SeroOptions`, this pipeline's defaults fill in the rest)."""
    scorer: str = "uniform"
    """Policy scorer for reachability weights: uniform | hf:PATH."""
    gamma_g: Annotated[
        float | None, tyro.conf.arg(help=f"GraphGPO discount (None: the env's EnvEntry.gamma_g: {_facts('gamma_g')}).")
    ] = None
    state_key: StateKeyKind | None = None
    """GraphGPO's graph nodes (`envkit.credit.state_keys`): observation | env | graphgpo-recipe (None: the env's
    exact ``info["state_key"]`` when it offers one, else the observation; the summary counts the tasks per key
    as ``state_key_<kind>``)."""
    # --- where it runs and where it goes ---
    workers: int = 2
    """Env pool size (parallel envs)."""
    backend: Literal["inprocess", "subprocess", "ray", "fleet", "remote"] = "subprocess"
    """Env pool backend (``remote``: envs on an ``envkit-serve`` server, set ``--env-kwarg remote=URL``; that URL
    always uses the remote pool; ``fleet``: sessions on a Ray env fleet sized and placed by ``--fleet.*``,
    docs/fleet.md)."""
    fleet: FleetConfig = field(default_factory=FleetConfig)
    """The env fleet of ``--backend fleet`` (actors, sessions per actor, the custom resource its nodes advertise)."""
    retries: int = 0
    """Times a policy episode whose worker was lost (a crashed worker process, a lost fleet actor or node) is played
    again from reset, any backend; it then gives the record an uninterrupted run gives (same seed and policy key).
    0 (default): it is recorded as failed with the reason. Env errors are never retried. No setting of the
    records: a resume may change it."""
    chunk_tasks: int | None = None
    """Tasks rolled out together (None: max(ceil(workers / group), ceil(workers / roots)), which keeps every worker
    busy in both phases and each worker on one task, so instance-bound native snapshots such as ALFWorld's restore
    natively); no effect on the records, a kill loses at most one."""
    out: str = "runs/oracle.parquet"
    """Output file, .parquet or .jsonl (summary: <out>.summary.json)."""
    progress: bool = True
    """Show progress (a bar on a terminal, plain lines when piped)."""

    def __post_init__(self) -> None:
        for name in ("tasks", "group", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.retries < 0:
            raise ValueError(f"--retries must be >= 0 (0: a lost episode is recorded as failed), got {self.retries}")
        if self.chunk_tasks is not None and self.chunk_tasks < 1:
            raise ValueError(f"--chunk-tasks must be >= 1 (or unset), got {self.chunk_tasks}")
        if self.backend not in ("inprocess", "subprocess", "ray", "fleet", "remote"):
            raise ValueError(f"--backend must be inprocess, subprocess, ray, fleet or remote, got {self.backend!r}")
        if not str(self.out).endswith((".parquet", ".jsonl")):
            raise ValueError(f"--out must end in .parquet or .jsonl, got {self.out!r}")
        object.__setattr__(self, "sero", widen_options(self.sero, OracleSeroOptions, "RunConfig.sero"))
        # the env's facts filled and checked once, by the resolver both trainers share (nothing re-resolved on read)
        settings = resolve_env_settings(
            self.env_id, names=ORACLE_NAMES, horizon=self.max_steps, root_budget=self.sero.min_budget,
            gamma_g=self.gamma_g, sero=self.sero.roots_per_group > 0,
        )  # fmt: skip
        sero = dataclasses.replace(self.sero, min_budget=settings.root_budget)
        resolved = sero.resolve(
            horizon=int(settings.horizon or 1),
            gamma_g=settings.gamma_g,
            terminal_reward=settings.terminal_reward,
            oracle_kwargs=self.oracle_kwargs,
        )
        object.__setattr__(self, "_resolved", (settings, resolved))

    @property
    def settings(self) -> EnvSettings:
        """The env's resolved values (`envkit.env_settings.EnvSettings`: horizon, root budget, gamma_g)."""
        return self.__dict__["_resolved"][0]  # type: ignore[no-any-return]

    @property
    def horizon(self) -> int:
        """Episode step budget (``max_steps``, else the env's)."""
        return int(self.settings.horizon or 1)

    @property
    def root_budget(self) -> int:
        """A root's minimum budget left (``sero.min_budget``, else the env's)."""
        return self.settings.root_budget

    @property
    def sero_config(self) -> SeroConfig:
        """The SERO settings the maths read: ``sero`` plus this run's horizon, env facts and oracle arguments,
        resolved once."""
        return self.__dict__["_resolved"][1]  # type: ignore[no-any-return]

    def meta(self) -> dict[str, Any]:
        """Settings that determine the records (checked on resume; workers/backend/tasks may change).

        Flat keys (``roots``, ``p_floor``, ...), as journals have always stored them, so older runs resume.
        """
        d = dataclasses.asdict(self)
        for k in (
            "out",
            "workers",
            "backend",
            "fleet",
            "retries",
            "tasks",
            "progress",
            "device",
            "chunk_tasks",
            "sero",
        ):
            d.pop(k)
        if d["state_key"] is None:
            d.pop("state_key")  # journals from before state keys resume
        sero = self.sero_config
        d["env_kwargs"] = {k: v for k, v in self.env_kwargs.items() if k != "remote"}  # where envs run: not a setting
        d["oracle_kwargs"] = dict(self.oracle_kwargs)
        d.update(
            roots=sero.roots_per_group,
            weighting=self.sero.weighting,
            p_floor=sero.reach.p_floor,
            tau_w=sero.reach.tau_w,
            w_min=sero.reach.w_min,
            first_weight=sero.reach.first,
            same_state=sero.same_state,
            horizon=self.horizon,
            gamma_g=sero.gamma_g,
            min_budget=sero.root_budget,
        )
        return d
