"""The OpenRLHF backend's configuration: what the driver parses and every Ray worker reads back.

`BackendConfig` travels from the driver to the PPO-trainer actor and the vLLM rollout actors as JSON in the
environment variable `CONFIG_ENV` (set through Ray's ``runtime_env``), so the workers of a multi-node cluster see
the same options without any file on a shared disk.

Example:
    >>> cfg = BackendConfig(explorer="eden", advantage="grpo", n_samples_per_prompt=16)
    >>> BackendConfig.from_json(cfg.to_json()) == cfg
    True
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from envkit.credit.defaults import GAMMA_G
from trainers.sero_options import SeroOptions

#: Environment variable holding the JSON of the `BackendConfig` in every Ray worker.
CONFIG_ENV = "ENVKIT_OPENRLHF_CONFIG"

EXPLORERS = ("none", "eden", "xrpo")
ADVANTAGES = ("grpo", "gigpo", "graphgpo")


@dataclass(frozen=True)
class AdvantageOptions:
    """Options of the advantage estimators (docs/methods.md sections 1-3; defaults are the papers').

    Attributes:
        eps: Added to the group std ("grpo"; OpenRLHF's own group_norm uses 1e-9).
        gamma: GiGPO step-return discount.
        omega: GiGPO step-advantage weight.
        episode_stats: "steps" (released GiGPO code) or "trajectories" (paper).
        norm: "std" or "mean" (divide by 1).
        invalid_penalty: Subtracted for invalid actions (GiGPO / GraphGPO).
        gamma_g: GraphGPO distance discount (0.10 ALFWorld, 0.20 WebShop).
        beta_g: GraphGPO graph-advantage weight.
        beta_e: GraphGPO episode-advantage weight.
        reward_scale: GraphGPO step reward at distance 0.
        terminal_reward: When set, a trajectory's episode return is ``terminal_reward * success`` (GiGPO's
            ``10 * success``) instead of the sum of the env's rewards.
    """

    eps: float = 1e-6
    gamma: float = 0.95
    omega: float = 1.0
    episode_stats: str = "steps"
    norm: str = "std"
    invalid_penalty: float = 0.1
    gamma_g: float = GAMMA_G
    beta_g: float = 1.0
    beta_e: float = 1.0
    reward_scale: float = 10.0
    terminal_reward: float | None = None

    def __post_init__(self) -> None:
        if self.eps < 0:
            raise ValueError(f"--adv eps={self.eps}: must be >= 0")
        if self.episode_stats not in ("steps", "trajectories"):
            raise ValueError(f"--adv episode_stats={self.episode_stats!r}: set 'steps' or 'trajectories'")
        if self.norm not in ("std", "mean"):
            raise ValueError(f"--adv norm={self.norm!r}: set 'std' or 'mean'")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"--adv gamma={self.gamma}: must be in [0, 1]")
        if not 0.0 < self.gamma_g <= 1.0:
            raise ValueError(f"--adv gamma_g={self.gamma_g}: must be in (0, 1]")


@dataclass(frozen=True)
class BackendConfig:
    """Everything the OpenRLHF backend adds to a ``train_ppo_ray`` run.

    Attributes:
        explorer: "none", "eden" (noisy rollouts from prompt embeddings) or "xrpo" (phased rollout budget,
            ICL seeding, novelty sharpening).
        advantage: "grpo" (outcome, per rollout), "gigpo" or "graphgpo" (per turn, multi-turn envs).
        sero: Add SERO oracle continuations from restored states, weighted by policy reachability.
        env_id: Default envkit env of a task (a task's label may name another with ``{"env": ...}``).
        env_kwargs: Keyword arguments for ``gymnasium.make(env_id, ...)``.
        max_turns: Stop an episode after this many policy turns (0: only the env's own step limit).
        feedback_template: How an env observation is appended after an action (``{obs}`` is replaced).
        n_samples_per_prompt: OpenRLHF's ``--rollout.n_samples_per_prompt`` (the per-prompt budget).
        rollout_batch_size: OpenRLHF's ``--rollout.batch_size`` (prompts per step).
        seed: Seed of the planners (EDEN anchors and noise, XRPO tie-breaks).
        adv: Advantage options.
        sero_opts: SERO options.
        eden: Overrides of ``trainers.explorers.eden.EdenConfig`` fields.
        xrpo: Overrides of ``trainers.explorers.xrpo.XrpoConfig`` fields.
        eden_anchors: Token ids of EDEN's anchor bank (from ``--eden-bank`` / ``--eden-anchors``); the engines
            read their embedding rows from the live weights.
    """

    explorer: str = "none"
    advantage: str = "grpo"
    sero: bool = False
    env_id: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 0
    feedback_template: str = "\n{obs}\n"
    n_samples_per_prompt: int = 8
    rollout_batch_size: int = 1024
    seed: int = 0
    adv: AdvantageOptions = field(default_factory=AdvantageOptions)
    sero_opts: SeroOptions = field(default_factory=SeroOptions)
    eden: dict[str, Any] = field(default_factory=dict)
    xrpo: dict[str, Any] = field(default_factory=dict)
    eden_anchors: tuple[int, ...] = ()

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
        if self.eden and self.explorer != "eden":
            raise ValueError("--eden options were given but --explorer is not 'eden'")
        if self.xrpo and self.explorer != "xrpo":
            raise ValueError("--xrpo options were given but --explorer is not 'xrpo'")
        object.__setattr__(self, "eden_anchors", tuple(int(t) for t in self.eden_anchors))
        if self.explorer == "eden":
            if not self.eden_anchors:
                raise ValueError(
                    "--explorer eden needs an anchor bank: pass --eden-bank PATH (an AnchorBank .npz written by "
                    "trainers.explorers.anchors.AnchorBank.save) or --eden-anchors ID,ID,... (token ids)"
                )
            ecfg = self.eden_config()
            if ecfg.group_size != self.n_samples_per_prompt:
                raise ValueError(
                    f"--eden group_size={ecfg.group_size} differs from --rollout.n_samples_per_prompt "
                    f"{self.n_samples_per_prompt}: the group (standard + noisy) is the per-prompt budget; drop "
                    "group_size from --eden (it defaults to n_samples_per_prompt)"
                )
            if ecfg.ablation == "no_anchor":
                raise ValueError(
                    "--eden ablation=no_anchor is not available on the OpenRLHF backend (its engines build noisy "
                    "rows from anchor tokens); run that ablation with the local trainer"
                )

    # ----- serialisation ------------------------------------------------------------------------------------
    def to_json(self) -> str:
        """JSON of every field (nested option dataclasses as objects)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BackendConfig:
        """Inverse of `to_json`."""
        data = json.loads(text)
        data["adv"] = AdvantageOptions(**data.get("adv", {}))
        data["sero_opts"] = SeroOptions(**data.get("sero_opts", {}))
        return cls(**data)

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

    # ----- explorer configs (built lazily: trainers.explorers is imported only when used) -------------------
    def eden_config(self) -> Any:
        """``trainers.explorers.eden.EdenConfig`` with this config's overrides.

        Defaults that follow the run: ``group_size`` = n_samples_per_prompt, ``n_noisy`` = a quarter of it (the
        paper's 4 of 16), ``n_anchors`` = the bank's size.
        """
        from trainers.explorers.eden import EdenConfig

        n = self.n_samples_per_prompt
        overrides: dict[str, Any] = {
            "group_size": n,
            "n_noisy": max(1, n // 4),
            "n_anchors": max(len(self.eden_anchors), 1),
        }
        overrides.update(self.eden)
        return EdenConfig(**overrides)

    def xrpo_config(self) -> Any:
        """``trainers.explorers.xrpo.XrpoConfig`` with this config's overrides.

        Defaults that follow the run: ``group_size`` = n_samples_per_prompt (the per-prompt budget, so the step's
        total stays ``batch x n``), ``n0`` = min(4, n).
        """
        from trainers.explorers.xrpo import XrpoConfig

        n = self.n_samples_per_prompt
        overrides: dict[str, Any] = {"group_size": n, "n0": min(4, n)}
        overrides.update(self.xrpo)
        cfg = XrpoConfig(**overrides)
        if cfg.icl_loss_prompt != "augmented":
            raise ValueError(
                "--xrpo icl_loss_prompt=clean is implemented in the local trainer only (envkit-train local); on "
                "OpenRLHF the ICL prefix is part of the generated sample's prompt. Drop the override."
            )
        return cfg


def parse_overrides(pairs: list[str] | None, allowed: list[str] | None, what: str) -> dict[str, Any]:
    """Parse ``key=value`` strings; values are JSON when they parse as JSON (numbers, true/false, null).

    Args:
        pairs: The strings, e.g. ``["rho=0.12", "noisy_share=0.25"]``.
        allowed: The valid keys (None: accept any; the target dataclass validates).
        what: Option name for messages, e.g. ``"--eden"``.

    Raises:
        ValueError: a string has no ``=`` or names an unknown key (with the closest valid one).
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"{what} {pair!r}: write KEY=VALUE, e.g. {what} rho=0.12")
        if allowed is not None and key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(allowed)}"
            raise ValueError(f"{what} {key!r} is not an option{hint}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def field_names(cls: type) -> list[str]:
    """Names of a dataclass's fields."""
    return [f.name for f in dataclasses.fields(cls)]
