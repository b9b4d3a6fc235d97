"""``--explorer xrpo`` on OpenRLHF: phased rollouts with ICL seeding, then novelty sharpening.

- rollouts: `envkit.trainers.openrlhf.xrpo_rounds.XrpoRounds` replaces the step's one dispatch (phase 1 gives
  every prompt n0 rollouts, later phases hand out the rest of ``batch x n`` by XRPO's priority, prompts whose
  rollouts all failed get an ICL prefix of solved problems), so groups differ in size;
- credit: with an episode-level estimator the correct rollouts' advantages are sharpened by their novelty
  (`envkit.trainers.explorers.xrpo.sharpen`); per-turn estimators are left as they are.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from envkit.trainers.explorers.xrpo import sharpen
from envkit.trainers.openrlhf.explorers.base import Explorer, RowCredit

if TYPE_CHECKING:
    from envkit.trainers.openrlhf.turn_paths import SampleRow

__all__ = ["XrpoExplorer"]


class XrpoExplorer(Explorer):
    """XRPO (see the module docstring)."""

    name: ClassVar[str] = "xrpo"
    section: ClassVar[str | None] = "xrpo"
    variable_groups: ClassVar[bool] = True

    def rounds(self) -> Any:
        from envkit.trainers.openrlhf.xrpo_rounds import XrpoRounds  # ray: only where rollouts are planned

        return XrpoRounds(self.config)

    def row_credit(self, rows: Sequence[SampleRow], groups: list[Hashable]) -> RowCredit:
        base = super().row_credit(rows, groups)
        xcfg = self.config.xrpo_config()
        if not xcfg.sharpen:
            return base
        correct = np.array([r.success for r in rows], dtype=bool)
        s = np.array([r.mean_logprob for r in rows], dtype=np.float64)
        adv = sharpen(base.advantages, correct, s, groups, lambda_n=xcfg.lambda_n, kappa=xcfg.kappa)
        return RowCredit(adv, base.keep, base.stats)

    def metrics(self, rows: Sequence[SampleRow], groups: list[Hashable], keep: np.ndarray) -> dict[str, float]:
        n = len(rows)
        sizes = np.bincount(np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)[1])
        icl = [bool(r.record and r.record.spec.prefix) for r in rows]
        return {
            "xrpo_rollouts_min": float(sizes.min()) if len(sizes) else 0.0,
            "xrpo_rollouts_max": float(sizes.max()) if len(sizes) else 0.0,
            "xrpo_icl_share": float(np.mean(icl)) if n else 0.0,
        }
