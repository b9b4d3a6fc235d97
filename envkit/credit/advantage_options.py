"""`AdvantageOptions`: the settings of the GRPO / GiGPO / GraphGPO advantages, declared once for both trainers.

Example:
    >>> AdvantageOptions(gamma_g=0.2).graphgpo_kwargs()["gamma_g"]
    0.2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from envkit.credit.defaults import GAMMA_G
from envkit.credit.state_keys import STATE_KEY_KINDS, StateKeyKind

__all__ = ["AdvantageOptions"]


@dataclass(frozen=True)
class AdvantageOptions:
    """Options of the advantage estimators (docs/methods.md sections 1-3; defaults are the papers').

    The one home of these settings: the OpenRLHF backend nests it as ``--adv.*``, the local trainer's multi-turn
    config as ``--agent.adv.*`` (with ``terminal_reward`` 10: it rewards success only).

    Attributes:
        eps: Added to the group std ("grpo"; OpenRLHF's own group_norm uses 1e-9).
        gamma: GiGPO step-return discount.
        omega: GiGPO step-advantage weight.
        episode_stats: "steps" (released GiGPO code) or "trajectories" (paper).
        norm: "std" or "mean" (divide by 1).
        invalid_penalty: Subtracted for invalid actions (GiGPO / GraphGPO).
        gamma_g: GraphGPO distance discount (0.10 ALFWorld, 0.20 WebShop). None (default): the env's
            ``EnvEntry.gamma_g``, filled once per run by `envkit.env_settings.resolve_env_settings` (both trainers,
            the oracle pipeline); ``GAMMA_G`` (0.10) where no env resolves it (direct calls).
        beta_g: GraphGPO graph-advantage weight.
        beta_e: GraphGPO episode-advantage weight.
        reward_scale: GraphGPO step reward at distance 0.
        terminal_reward: When set, a trajectory's episode return is ``terminal_reward * success`` (GiGPO's
            ``10 * success``) instead of the sum of the env's rewards.
        state_key: What GiGPO's step groups and GraphGPO's graph nodes compare (`envkit.credit.state_keys`):
            ``observation`` (the raw text, GiGPO's paper), ``env`` (the env's exact ``info["state_key"]``) or
            ``graphgpo-recipe`` (GraphGPO's published ALFWorld anchor); None: ``env`` when every recorded state
            has a key, else ``observation``. The key a batch used is logged (``state_key`` in the metrics).
    """

    eps: float = 1e-6
    gamma: float = 0.95
    omega: float = 1.0
    episode_stats: Literal["steps", "trajectories"] = "steps"
    norm: Literal["std", "mean"] = "std"
    invalid_penalty: float = 0.1
    gamma_g: float | None = None
    beta_g: float = 1.0
    beta_e: float = 1.0
    reward_scale: float = 10.0
    terminal_reward: float | None = None
    state_key: StateKeyKind | None = None

    def __post_init__(self) -> None:
        if self.state_key is not None and self.state_key not in STATE_KEY_KINDS:
            raise ValueError(f"adv.state-key {self.state_key!r}: set one of {STATE_KEY_KINDS}, or leave it unset")
        if self.eps < 0:
            raise ValueError(f"adv.eps {self.eps}: must be >= 0")
        if self.episode_stats not in ("steps", "trajectories"):
            raise ValueError(f"adv.episode-stats {self.episode_stats!r}: set 'steps' or 'trajectories'")
        if self.norm not in ("std", "mean"):
            raise ValueError(f"adv.norm {self.norm!r}: set 'std' or 'mean'")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"adv.gamma {self.gamma}: must be in [0, 1]")
        if self.gamma_g is not None and not 0.0 < self.gamma_g <= 1.0:
            raise ValueError(f"adv.gamma-g {self.gamma_g}: must be in (0, 1]")

    def gigpo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `envkit.credit.advantages.gigpo_advantages`."""
        return {
            "gamma": self.gamma, "omega": self.omega, "episode_stats": self.episode_stats, "norm": self.norm,
            "invalid_penalty": self.invalid_penalty, "eps": self.eps,
        }  # fmt: skip

    def graphgpo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `envkit.credit.advantages.graphgpo_advantages`."""
        return {
            "gamma_g": GAMMA_G if self.gamma_g is None else self.gamma_g, "beta_g": self.beta_g, "beta_e": self.beta_e, "reward_scale": self.reward_scale,
            "episode_stats": self.episode_stats, "norm": self.norm, "invalid_penalty": self.invalid_penalty,
            "eps": self.eps,
        }  # fmt: skip
