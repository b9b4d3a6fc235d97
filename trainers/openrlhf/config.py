"""The OpenRLHF backend's configuration: what the driver parses and every Ray worker reads back.

`BackendConfig` travels from the driver to the PPO-trainer actor and the vLLM rollout actors as JSON in the
environment variable `CONFIG_ENV` (set through Ray's ``runtime_env``), so the workers of a multi-node cluster see
the same options without any file on a shared disk.

Example:
    >>> cfg = BackendConfig(explorer="xrpo", n_samples_per_prompt=16, xrpo=XrpoConfig(lam=0.05))
    >>> BackendConfig.from_json(cfg.to_json()) == cfg
    True
    >>> BackendConfig(explorer="xrpo", n_samples_per_prompt=6).xrpo_config().n0  # sized to the run: min(4, n)
    4
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import tyro

from envkit.config_io import from_data
from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.sero import SeroConfig, widen_options
from envkit.env_settings import OPENRLHF_NAMES, EnvSettings, resolve_env_settings
from envkit.fleet.config import FleetConfig
from envkit.runtime.command_line import id_list, json_object
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.explorers.eden import EdenConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.sero_options import TrainerSeroOptions

#: Environment variable holding the JSON of the `BackendConfig` in every Ray worker.
CONFIG_ENV = "ENVKIT_OPENRLHF_CONFIG"

EXPLORERS = ("none", "eden", "xrpo", "branch")
#: The option sections of explorers (``--eden.*``, ...): given only with their explorer.
EXPLORER_SECTIONS = ("eden", "xrpo", "branch")
ADVANTAGES = ("grpo", "gigpo", "graphgpo")
Explorer = Literal["none", "eden", "xrpo", "branch"]
ExplorerConfig = EdenConfig | XrpoConfig | BranchConfig
C = TypeVar("C", EdenConfig, XrpoConfig, BranchConfig)
Advantage = Literal["grpo", "gigpo", "graphgpo"]


@dataclass(frozen=True)
class BackendConfig:
    """Everything the OpenRLHF backend adds to a ``train_ppo_ray`` run (``envkit-train openrlhf`` options)."""

    # --- method ---
    explorer: Explorer = "none"
    """Exploration strategy: "none", "eden" (noisy rollouts from prompt embeddings), "xrpo" (phased rollout budget, ICL
    seeding, novelty sharpening) or "branch" (branching rollouts: forks from restored high-entropy decisions with
    leave-one-out sibling credit; `envkit.trainers.openrlhf.branch_rows`)."""
    advantage: Advantage = "grpo"
    """Advantage estimator: "grpo" (outcome, per rollout), "gigpo" or "graphgpo" (per turn, multi-turn envs)."""
    sero: bool = False
    """Add SERO oracle continuations from restored states, weighted by policy reachability."""
    # --- env and episodes ---
    env_id: Annotated[str | None, tyro.conf.arg(name="env")] = None
    """Default envkit env id of a task (a task's label may name another with ``{"env": ...}``)."""
    env_kwargs: Annotated[dict[str, Any], json_object("--env-kwargs")] = field(default_factory=dict)
    """JSON object of keyword arguments for ``gymnasium.make(env_id, ...)``."""
    fleet: FleetConfig | None = None
    """Play the episodes in envs of a Ray env fleet on CPU nodes (`envkit.fleet`, docs/fleet.md: ``--fleet.resource
    envkit_webshop``) instead of building them in the rollout actor; SERO's restores and branching's forks run on
    the actor holding the snapshot. None: envs in the rollout actor."""
    max_turns: int = 0
    """Policy turns per episode, also SERO's episode budget (a continuation from turn t gets ``max_turns - t``). 0:
    with ``--sero`` the env's ``EnvEntry.horizon`` (as in ``envkit-train local`` and ``envkit-oracle rollout``),
    else no cap of its own (only the env's step limit). Resolved once with ``--adv.gamma-g`` and
    ``--sero-opts.min-budget`` from ``--env``'s registry entry (`envkit.env_settings`)."""
    feedback_template: str = "\n{obs}\n"
    """How an env observation is appended after an action (``{obs}`` is replaced)."""
    # --- run size (OpenRLHF's flags after --, read not set) ---
    n_samples_per_prompt: tyro.conf.Suppress[int] = 8
    """OpenRLHF's ``--rollout.n_samples_per_prompt`` (the per-prompt budget; read from OpenRLHF's flags after ``--``)."""
    rollout_batch_size: tyro.conf.Suppress[int] = 1024
    """OpenRLHF's ``--rollout.batch_size`` (prompts per step; read from OpenRLHF's flags)."""
    # --- planners ---
    seed: int = 0
    """Seed of the planners (EDEN anchors and noise, XRPO tie-breaks)."""
    # --- method settings (an explorer's None: sized to the run) ---
    adv: AdvantageOptions = field(default_factory=AdvantageOptions)
    """Advantage options (``gamma_g`` None: ``--env``'s ``EnvEntry.gamma_g``, as in the local trainer)."""
    sero_opts: TrainerSeroOptions = field(default_factory=TrainerSeroOptions)
    """SERO options (`TrainerSeroOptions`, the local trainer's; a plain `SeroOptions` gets the trainers' defaults).
    ``min_budget`` None: ``--env``'s ``EnvEntry.min_root_budget``."""
    eden: EdenConfig | None = None
    """EDEN settings (None: `EdenConfig`'s defaults sized to the run: n_noisy = a quarter of n_samples_per_prompt). The
    group (standard + noisy) is the run's n_samples_per_prompt (EdenConfig has no group size); the bank is given
    (``eden_bank``/``eden_anchors``), so the local trainer's selection knobs (`EdenBankConfig`) are not options here;
    the update is OpenRLHF's own (its flags after ``--``)."""
    xrpo: XrpoConfig | None = None
    """XRPO settings (None: `XrpoConfig`'s defaults sized to the run: n0 = min(XrpoConfig's n0, n)). XRPO spends the
    run's per-prompt budget n = n_samples_per_prompt (XrpoConfig has no group size)."""
    branch: BranchConfig | None = None
    """Branching-rollout settings (`BranchConfig`, the local trainer's; None: sized to the run, `sized_branch`).
    backbones + points x branches must be n_samples_per_prompt (`branch_config`)."""
    # --- EDEN anchor bank (given: OpenRLHF does not select one) ---
    eden_bank: str | None = None
    """EDEN anchor bank .npz (written by ``envkit.trainers.explorers.anchors.AnchorBank.save``); its token ids fill
    ``eden_anchors``."""
    eden_anchors: Annotated[tuple[int, ...], id_list("--eden-anchors")] = ()
    """Token ids of EDEN's anchor bank, comma-separated (or from ``eden_bank``); the engines read their embedding rows
    from the live weights."""
    # --- hardware and checks ---
    cpu: bool = False
    """Run on CPUs only (no CUDA): loads the CPU shim (`envkit.trainers.openrlhf.cpu_shim`: DeepSpeed's CPU
    accelerator with gloo, a gloo weight-sync group, vLLM CPU engines with unpacked linear weights, a flash_attn
    import stub) in the driver and every Ray worker, and starts a private Ray with one logical GPU. Never on a GPU."""
    verify_weights: bool = True
    """After every weight broadcast, compare a checksum of every actor tensor with the engines' copy (in the synced
    dtype) and stop the run when one differs (`envkit.trainers.openrlhf.weight_check`)."""
    credit_log: bool = False
    """Write one group's credit per step, as it reached the loss, to ``envkit_credit.jsonl`` in ``--ckpt.output_dir``
    (`envkit.trainers.openrlhf.credit_log`); ``python scripts/openrlhf_credit_check.py FILE`` recomputes it with the
    local trainer's credit and compares value by value."""

    def __post_init__(self) -> None:
        if self.explorer not in EXPLORERS:
            raise ValueError(f"--explorer {self.explorer!r}: choose one of {', '.join(EXPLORERS)}")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"--advantage {self.advantage!r}: choose one of {', '.join(ADVANTAGES)}")
        if self.n_samples_per_prompt < 2:
            raise ValueError(
                f"--rollout.n_samples_per_prompt {self.n_samples_per_prompt}: group baselines need >= 2 rollouts "
                "per prompt; pass e.g. '--rollout.n_samples_per_prompt 8' after '--'"
            )
        if self.rollout_batch_size < 1:
            raise ValueError(f"--rollout.batch_size {self.rollout_batch_size}: must be >= 1")
        if self.max_turns < 0:
            raise ValueError(f"--max-turns {self.max_turns}: must be >= 0 (0: unset, see --max-turns' help)")
        if "{obs}" not in self.feedback_template:
            raise ValueError(f"--feedback-template {self.feedback_template!r} must contain '{{obs}}'")
        object.__setattr__(self, "sero_opts", widen_options(self.sero_opts, TrainerSeroOptions, "--sero-opts"))
        self._resolve_env_settings()
        anchors = tuple(int(t) for t in self.eden_anchors)
        if self.eden_bank and not anchors:
            from envkit.trainers.explorers.anchors import AnchorBank

            if not Path(self.eden_bank).exists():
                raise ValueError(f"--eden-bank {self.eden_bank}: no such file (write one with AnchorBank.save)")
            anchors = tuple(int(t) for t in AnchorBank.load(self.eden_bank).token_ids)
        object.__setattr__(self, "eden_anchors", anchors)
        # the chosen explorer's config, sized to the run and checked once; `eden_config` & co. read it
        build = self._explorer_builds().get(self.explorer)
        object.__setattr__(self, "_explorer_config", build() if build is not None else None)

    def _resolve_env_settings(self) -> None:
        """``--env``'s per-env values, filled and checked once by the resolver the local trainer and the oracle
        pipeline share (`envkit.env_settings.resolve_env_settings`); the options stay as the user gave them (they
        travel to the workers as given and resolve there to the same values)."""
        s = resolve_env_settings(
            self.env_id, names=OPENRLHF_NAMES, horizon=self.max_turns or None,
            root_budget=self.sero_opts.min_budget, gamma_g=self.adv.gamma_g,
            terminal_reward=self.adv.terminal_reward, sero=self.sero, estimator=self.advantage, unset_horizon=None,
        )  # fmt: skip
        adv = dataclasses.replace(self.adv, gamma_g=s.gamma_g, terminal_reward=s.terminal_reward)
        sero = dataclasses.replace(self.sero_opts, min_budget=s.root_budget).resolve(
            horizon=s.horizon or 1, gamma_g=s.gamma_g, terminal_reward=s.terminal_reward
        )  # the root-selection settings (horizon 1 where there is no turn cap: SERO is then off)
        object.__setattr__(self, "_resolved", (s, adv, sero))

    # ----- the run's resolved values (`_resolve_env_settings`) -------------------------------------------------
    @property
    def settings(self) -> EnvSettings:
        """``--env``'s resolved values: turn cap (``horizon``; None: no cap of this backend's own), a SERO root's
        budget and GraphGPO's gamma_g."""
        return self.__dict__["_resolved"][0]  # type: ignore[no-any-return]

    @property
    def turn_cap(self) -> int | None:
        """Policy turns per episode (``--max-turns``, with ``--sero`` unset: the env's horizon; None: no cap)."""
        return self.settings.horizon

    @property
    def credit_options(self) -> AdvantageOptions:
        """``adv`` with ``gamma_g`` (unset: the env's) and ``terminal_reward`` (unset: ``TERMINAL_REWARD``, 10, as
        the local trainer's) resolved: what the credit reads."""
        return self.__dict__["_resolved"][1]  # type: ignore[no-any-return]

    @property
    def sero_config(self) -> SeroConfig:
        """SERO's resolved settings (`SeroConfig`: the run's turn cap as horizon, root budget, gamma_g)."""
        return self.__dict__["_resolved"][2]  # type: ignore[no-any-return]

    # ----- serialisation ------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """JSON of every field (nested option dataclasses as objects)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BackendConfig:
        """Inverse of `to_json` (`envkit.config_io.from_data`: nested configs, tuples; unknown keys refused)."""
        return from_data(cls, json.loads(text))

    @classmethod
    def from_env(cls) -> BackendConfig:
        """The config a Ray worker was started with (see `CONFIG_ENV`).

        Raises:
            RuntimeError: the variable is missing (the worker was not started by ``envkit-train openrlhf``).
        """
        text = os.environ.get(CONFIG_ENV)
        if not text:
            raise RuntimeError(
                f"{CONFIG_ENV} is not set in this Ray worker: start training with 'envkit-train openrlhf ...', "
                "which passes the backend config to every worker through Ray's runtime_env"
            )
        return cls.from_json(text)

    # ----- explorer configs -----------------------------------------------------------------------------------
    def sized_eden(self) -> EdenConfig:
        """`EdenConfig`'s defaults sized to this run: ``n_noisy`` = a quarter of n_samples_per_prompt (the
        paper's 4 of 16)."""
        return EdenConfig(n_noisy=max(1, self.n_samples_per_prompt // 4))

    def sized_xrpo(self) -> XrpoConfig:
        """`XrpoConfig`'s defaults sized to this run (the step's total stays ``batch x n``, n =
        n_samples_per_prompt): ``n0`` = `XrpoConfig`'s own n0, at most n."""
        default = XrpoConfig()
        return dataclasses.replace(default, n0=min(default.n0, self.n_samples_per_prompt))

    def eden_config(self) -> EdenConfig:
        """The run's `EdenConfig`: ``eden``, else `sized_eden` (resolved once when EDEN is the explorer)."""
        return self._chosen(EdenConfig, self._eden_config)

    def xrpo_config(self) -> XrpoConfig:
        """The run's `XrpoConfig`: ``xrpo``, else `sized_xrpo` (resolved and checked once when XRPO is the
        explorer).

        Raises:
            ValueError: it does not fit n_samples_per_prompt (`XrpoConfig.check_group`), or it asks for what only
                the local trainer does.
        """
        return self._chosen(XrpoConfig, self._xrpo_config)

    def branch_config(self) -> BranchConfig:
        """The run's `BranchConfig`: ``branch``, else `sized_branch` (resolved and checked once when branching
        is the explorer).

        Raises:
            ValueError: backbones + points x branches differs from n_samples_per_prompt, no ``--max-turns``, SERO
                on, or ``--branch.reserve backbone`` (this backend does not size forks by the budget).
        """
        return self._chosen(BranchConfig, self._branch_config)

    def _chosen(self, kind: type[C], build: Callable[[], C]) -> C:
        """The explorer config of type `kind`: the one resolved in `__post_init__` when it is the run's explorer's,
        else built now (a caller asking for another explorer's config, e.g. a test)."""
        chosen = self.__dict__["_explorer_config"]
        return chosen if isinstance(chosen, kind) else build()

    def _explorer_builds(self) -> dict[str, Callable[[], ExplorerConfig]]:
        """``--explorer`` -> how its config is sized to the run and checked (``none`` has none)."""
        return {"eden": self._checked_eden, "xrpo": self._xrpo_config, "branch": self._branch_config}

    def _eden_config(self) -> EdenConfig:
        return self.eden if self.eden is not None else self.sized_eden()

    def _checked_eden(self) -> EdenConfig:
        """`_eden_config`, checked against this backend: a bank, a group larger than n_noisy, no no_anchor."""
        if not self.eden_anchors:
            raise ValueError(
                "--explorer eden needs an anchor bank: pass --eden-bank PATH (an AnchorBank .npz written by "
                "envkit.trainers.explorers.anchors.AnchorBank.save) or --eden-anchors ID,ID,... (token ids)"
            )
        ecfg = self._eden_config()
        ecfg.n_standard(self.n_samples_per_prompt)  # the group (standard + noisy) is the per-prompt budget
        if ecfg.ablation == "no_anchor":
            raise ValueError(
                "--eden.ablation no_anchor is not available on the OpenRLHF backend (its engines build noisy "
                "rows from anchor tokens); run that ablation with the local trainer"
            )
        return ecfg

    def _xrpo_config(self) -> XrpoConfig:
        cfg = self.xrpo if self.xrpo is not None else self.sized_xrpo()
        cfg.check_group(self.n_samples_per_prompt)  # XRPO spends the run's per-prompt budget n
        if cfg.icl_loss_prompt != "augmented":
            raise ValueError(
                "--xrpo.icl-loss-prompt clean is implemented in the local trainer only (envkit-train local); on "
                "OpenRLHF the ICL prefix is part of the generated sample's prompt. Drop the option."
            )
        return cfg

    def sized_branch(self) -> BranchConfig:
        """`BranchConfig` sized to this run's group of n rows: ``ceil(n / 2)`` backbones and F = the rest as forks,
        K = 2 branches per point when F is even (else 1) and M = F / K points."""
        n = self.n_samples_per_prompt
        backbones = (n + 1) // 2
        forks = n - backbones
        k = 2 if forks % 2 == 0 else 1
        return BranchConfig(points=max(forks // k, 1), branches=k, backbones=backbones)

    def _branch_config(self) -> BranchConfig:
        cfg = self.branch if self.branch is not None else self.sized_branch()
        n = self.n_samples_per_prompt
        if self.sero:
            raise ValueError("--explorer branch is the policy-only control to SERO: drop --sero (or the explorer)")
        if not self.max_turns:
            raise ValueError(
                "--explorer branch needs --max-turns N: the turn cap sizes the env-step budget (n x max_turns per "
                "task) that the branches are checked against"
            )
        backbones = cfg.resolve(n, self.max_turns)[0]
        rows = backbones + cfg.points * cfg.branches
        if rows != n:
            sized = self.sized_branch()
            raise ValueError(
                f"--explorer branch: --branch.backbones {backbones} + --branch.points {cfg.points} x "
                f"--branch.branches {cfg.branches} = {rows} rows per prompt, but OpenRLHF's batch arithmetic "
                f"needs exactly --rollout.n_samples_per_prompt {n}: set them so that backbones + points x branches "
                f"= {n} (e.g. --branch.backbones {sized.backbones} --branch.points {sized.points} --branch.branches "
                f"{sized.branches}, the default), or change n"
            )
        if cfg.reserve != "worst":
            raise ValueError(
                "--branch.reserve backbone: on the OpenRLHF backend the forks are a fixed points x branches rows per "
                "prompt and the env-step budget is checked and reported, never reserved; drop --branch.reserve"
            )
        return cfg
