"""``--explorer eden`` on OpenRLHF: noisy first turns from prompt embeddings and EDEN's select + absorb.

- engines: built with ``enable_prompt_embeds=True`` (the rollout actor appends the perturbed anchor row,
  `envkit.trainers.openrlhf.rollout_actor.EnvkitRolloutActor.generate_noisy`);
- plan (`eden_specs`): K_r standard rollouts + K_n noisy ones sharing ONE anchor per prompt (drawn uniformly from
  the bank), each with its own noise seed, at the cosine-warmed temperature ``tau_n(step)``;
- credit: with an episode-level estimator `envkit.trainers.explorers.eden.eden_advantages` (mixed-group
  normalisation, select, absorb); after a per-turn one (GiGPO, GraphGPO, SERO)
  `envkit.trainers.explorers.eden.eden_turn_credit`, the call the local trainer's `AgentEdenDriver` makes too.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from envkit.trainers.explorers.eden import eden_advantages, eden_turn_credit, noisy_temperature
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.explorers.base import Explorer, RowCredit, TurnCredit
from envkit.trainers.openrlhf.rollout_records import RolloutSpec

if TYPE_CHECKING:
    from envkit.trainers.openrlhf.turn_paths import SampleRow

__all__ = ["EdenExplorer", "eden_specs"]


def eden_specs(group: str, n: int, config: BackendConfig, step: int, rng: np.random.Generator) -> list[RolloutSpec]:
    """EDEN's plan for one prompt: K_r standard + K_n noisy rollouts (docs/methods.md section 5).

    The noisy rollouts share one anchor drawn uniformly from the bank (``fixed_anchor``: the configured one;
    ``random_anchor_per_rollout``: one per rollout), each with its own noise seed.
    """
    ecfg = config.eden_config()
    bank = config.eden_anchors
    k_n = ecfg.n_noisy
    tau_n = noisy_temperature(step, ecfg.tau_n_start, ecfg.tau_n_end, ecfg.warmup_steps)
    if ecfg.ablation == "fixed_anchor":
        anchors = [bank[ecfg.fixed_anchor_index]] * k_n
    elif ecfg.ablation == "random_anchor_per_rollout":
        anchors = [bank[int(i)] for i in rng.integers(0, len(bank), size=k_n)]
    else:
        anchors = [bank[int(rng.integers(0, len(bank)))]] * k_n
    seeds = rng.integers(0, 2**31 - 1, size=k_n)
    specs = [RolloutSpec(group=group, index=i, temperature=ecfg.tau_r) for i in range(n - k_n)]
    for j in range(k_n):
        specs.append(
            RolloutSpec(
                group=group,
                index=n - k_n + j,
                temperature=tau_n,
                noisy=True,
                anchor=int(anchors[j]),
                rho=float(ecfg.effective_rho),
                seed=int(seeds[j]),
            )
        )
    return specs


def _noisy(rows: Sequence[SampleRow]) -> np.ndarray:
    return np.array([r.noisy for r in rows], dtype=bool)


class EdenExplorer(Explorer):
    """EDEN (see the module docstring)."""

    name: ClassVar[str] = "eden"
    section: ClassVar[str | None] = "eden"

    def engine_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "enable_prompt_embeds": True}

    def plan(self, group: str, n: int, step: int, rng: np.random.Generator) -> list[RolloutSpec]:
        return eden_specs(group, n, self.config, step, rng)

    def row_credit(self, rows: Sequence[SampleRow], groups: list[Hashable]) -> RowCredit:
        noisy = _noisy(rows)
        if not noisy.any():  # evaluation's plain rollouts: the estimator alone
            return super().row_credit(rows, groups)
        estimator = "grpo" if self.config.adv.norm == "std" else "grpo_mean"
        res = eden_advantages([r.reward for r in rows], groups, noisy, self.config.eden_config(), estimator)
        return RowCredit(res.advantages, res.loss_mask, res.stats)

    def turn_credit(
        self, rows: Sequence[SampleRow], groups: list[Hashable], credit: TurnCredit, per_turn_estimator: bool
    ) -> TurnCredit:
        noisy = _noisy(rows)
        if not (per_turn_estimator and noisy.any()):  # row_credit did it (or no noisy rows)
            return credit
        res = eden_turn_credit(credit.per_turn, noisy, [r.success for r in rows], self.config.eden_config())
        return TurnCredit(res.per_turn, res.loss_mask, {**credit.stats, **res.stats})

    def metrics(self, rows: Sequence[SampleRow], groups: list[Hashable], keep: np.ndarray) -> dict[str, float]:
        noisy = _noisy(rows)
        out = {"eden_noisy_share": float(noisy.mean()) if len(rows) else 0.0}
        if not noisy.any():  # else the credit reported it (`kept_share`)
            out["eden_noisy_kept_share"] = 0.0
        return out
