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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from envkit.config_io import from_data
from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.sero import widen_options
from envkit.fleet.config import FleetConfig
from envkit.runtime.command_line import id_list, json_object
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.explorers.eden import EdenConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.sero_options import TrainerSeroOptions

#: Environment variable holding the JSON of the `BackendConfig` in every Ray worker.
CONFIG_ENV = "ENVKIT_OPENRLHF_CONFIG"

EXPLORERS = ("none", "eden", "xrpo", "branch")
ADVANTAGES = ("grpo", "gigpo", "graphgpo")
Explorer = Literal["none", "eden", "xrpo", "branch"]
Advantage = Literal["grpo", "gigpo", "graphgpo"]


@dataclass(frozen=True)
class OpenRLHFSeroOptions(TrainerSeroOptions):
    """The trainers' SERO options plus what only the OpenRLHF backend reads (``--sero-opts.*``)."""

    # --- how far a continuation may run ---
    oracle_max_steps: int = 30
    """Step budget of one oracle continuation where the run sets no turn cap (no ``--max-turns``); with one,
    the run's turn cap is the budget."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.oracle_max_steps < 1:
            raise ValueError(f"--sero-opts.oracle-max-steps must be >= 1, got {self.oracle_max_steps}")


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
    """Policy turns per episode (0: only the env's own step limit)."""
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
    """Advantage options."""
    sero_opts: OpenRLHFSeroOptions = field(default_factory=OpenRLHFSeroOptions)
    """SERO options (`OpenRLHFSeroOptions`; ``sero_opts.oracle_max_steps`` is the continuation budget without
    --max-turns; a plain `SeroOptions` gets this backend's defaults)."""
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
            raise ValueError(f"--max-turns {self.max_turns}: must be >= 0 (0 = the env's own limit)")
        if "{obs}" not in self.feedback_template:
            raise ValueError(f"--feedback-template {self.feedback_template!r} must contain '{{obs}}'")
        if self.sero and self.advantage != "graphgpo":
            raise ValueError(
                f"--sero credits oracle continuations through the GraphGPO graph (docs/methods.md, SERO): pass "
                f"--advantage graphgpo (got {self.advantage!r}) or drop --sero"
            )
        object.__setattr__(self, "sero_opts", widen_options(self.sero_opts, OpenRLHFSeroOptions, "--sero-opts"))
        if self.sero and self.max_turns and self.env_id:
            from envkit.registration import env_facts

            need = self.sero_opts.root_budget_for(self.env_id)
            if self.max_turns < need:
                raise ValueError(
                    f"--max-turns {self.max_turns} leaves no SERO root: a root needs {need} steps of budget left "
                    f"({self.env_id}'s min_root_budget unless --sero-opts.min-budget is set); set --max-turns to at "
                    f"least {need} (the env's horizon is {env_facts(self.env_id).horizon}) or 0 (the env's own limit)"
                )
        if self.explorer == "branch":
            self.branch_config()  # refuses a row count other than n, or what this backend cannot do
        anchors = tuple(int(t) for t in self.eden_anchors)
        if self.eden_bank and not anchors:
            from envkit.trainers.explorers.anchors import AnchorBank

            if not Path(self.eden_bank).exists():
                raise ValueError(f"--eden-bank {self.eden_bank}: no such file (write one with AnchorBank.save)")
            anchors = tuple(int(t) for t in AnchorBank.load(self.eden_bank).token_ids)
        object.__setattr__(self, "eden_anchors", anchors)
        if self.explorer == "eden":
            if not self.eden_anchors:
                raise ValueError(
                    "--explorer eden needs an anchor bank: pass --eden-bank PATH (an AnchorBank .npz written by "
                    "envkit.trainers.explorers.anchors.AnchorBank.save) or --eden-anchors ID,ID,... (token ids)"
                )
            ecfg = self.eden_config()
            ecfg.n_standard(self.n_samples_per_prompt)  # the group (standard + noisy) is the per-prompt budget
            if ecfg.ablation == "no_anchor":
                raise ValueError(
                    "--eden.ablation no_anchor is not available on the OpenRLHF backend (its engines build noisy "
                    "rows from anchor tokens); run that ablation with the local trainer"
                )

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
        """The run's `EdenConfig`: ``eden``, else `sized_eden`."""
        return self.eden if self.eden is not None else self.sized_eden()

    def xrpo_config(self) -> XrpoConfig:
        """The run's `XrpoConfig`: ``xrpo``, else `sized_xrpo`.

        Raises:
            ValueError: it does not fit n_samples_per_prompt (`XrpoConfig.check_group`), or it asks for what only
                the local trainer does.
        """
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

    def branch_config(self) -> BranchConfig:
        """The run's `BranchConfig`: ``branch``, else `sized_branch`.

        Raises:
            ValueError: backbones + points x branches differs from n_samples_per_prompt, no ``--max-turns``, SERO
                on, or ``--branch.reserve backbone`` (this backend does not size forks by the budget).
        """
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
