"""EDEN's settings (docs/methods.md section 5), read by both trainers: `EdenConfig` (noisy rollouts, their credit,
temperatures) and `EdenBankConfig` (plus the local trainer's anchor-bank selection); `ABLATIONS`.

The maths that reads them: `envkit.trainers.explorers.eden_noise` (anchor bank, perturbation, temperatures) and
`envkit.trainers.explorers.eden_credit` (top-p selection, absorb); `envkit.trainers.explorers.eden` exports all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ABLATIONS", "Ablation", "EdenBankConfig", "EdenConfig"]

Ablation = Literal["anchored", "rho0", "no_anchor", "random_anchor_per_rollout", "fixed_anchor"]
ABLATIONS: tuple[str, ...] = ("anchored", "rho0", "no_anchor", "random_anchor_per_rollout", "fixed_anchor")


@dataclass(frozen=True)
class EdenConfig:
    """EDEN's rollout and credit settings (docs/methods.md section 5), read by both trainers.

    The group size G (standard + noisy rollouts per prompt) is the run's (``TrainConfig.group_size``, OpenRLHF's
    ``n_samples_per_prompt``), not EDEN's: `n_standard(G)` checks ``n_noisy < G``. The update (clip range, KL,
    entropy bonus) is the trainer's (the local `LossConfig`, OpenRLHF's own flags); the paper's update is
    ``--loss.eps-high 0.28 --loss.entropy-coef 0.001``. How an anchor bank is built is `EdenBankConfig`'s (the
    local trainer selects one; OpenRLHF is given one).
    """

    # --- noisy rollouts ---
    n_noisy: int = 4
    """Noisy rollouts per prompt K_n (4 of G = 16: 25% is best, 50% falls back to GRPO level)."""
    rho: float = 0.12
    """Relative noise norm (0.12; 0.18 for some models); angle to the anchor ~ arctan(rho)."""
    ablation: Ablation = "anchored"
    """One of "anchored" (the method), "rho0", "no_anchor", "random_anchor_per_rollout", "fixed_anchor"."""
    fixed_anchor_index: int = 0
    """Bank index used by the "fixed_anchor" ablation."""
    # --- credit of the noisy rollouts ---
    top_p: float = 0.5
    """Share of noisy rollouts kept batch-wide, by |A| rank (0.5, ours)."""
    gamma: float = 0.5
    """Factor on the kept noisy rollouts' advantages, in (0, 1] (0.5, ours)."""
    # --- temperatures ---
    tau_r: float = 1.0
    """Temperature of standard rollouts (1.0)."""
    tau_n_start: float = 0.6
    """Noisy-rollout temperature at step 0 (0.6, ours)."""
    tau_n_end: float = 1.0
    """Noisy-rollout temperature after the warm-up (1.0, ours)."""
    warmup_steps: int = 50
    """Length of the cosine warm-up of tau_n in training steps (50, ours)."""

    def __post_init__(self) -> None:
        self._check(
            (self.n_noisy >= 0, f"n_noisy must be >= 0, got {self.n_noisy}"),
            (self.rho >= 0.0, f"rho must be >= 0, got {self.rho}"),
            (0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1], got {self.top_p}"),
            (0.0 < self.gamma <= 1.0, f"gamma must be in (0, 1], got {self.gamma}"),
            (min(self.tau_r, self.tau_n_start, self.tau_n_end) > 0, "temperatures tau_r, tau_n_* must be > 0"),
            (self.warmup_steps >= 0, f"warmup_steps must be >= 0, got {self.warmup_steps}"),
            (self.ablation in ABLATIONS, f"ablation must be one of {ABLATIONS}, got {self.ablation!r}"),
            (self.fixed_anchor_index >= 0, f"fixed_anchor_index must be >= 0, got {self.fixed_anchor_index}"),
        )

    def _check(self, *checks: tuple[bool, str]) -> None:
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"{type(self).__name__}: {msg}")

    def n_standard(self, group_size: int) -> int:
        """Standard rollouts per prompt K_r = G - K_n of the run's group size G.

        Raises:
            ValueError: G < 2 or K_n >= G (the message says what to set).
        """
        if group_size < 2 or not 0 <= self.n_noisy < group_size:
            raise ValueError(
                f"EdenConfig.n_noisy ({self.n_noisy}) must be < the run's group size ({group_size}) and the group "
                "size >= 2: lower --eden.n-noisy or raise the run's group size (--group-size / n_samples_per_prompt)"
            )
        return group_size - self.n_noisy

    @property
    def effective_rho(self) -> float:
        """rho used for the perturbation (0 under the "rho0" ablation)."""
        return 0.0 if self.ablation == "rho0" else self.rho


@dataclass(frozen=True)
class EdenBankConfig(EdenConfig):
    """`EdenConfig` plus how the anchor bank is selected (`build_anchor_bank`; the local trainer's ``--eden``).

    OpenRLHF is given its bank (``--eden-bank`` / ``--eden-anchors``), so it takes the plain `EdenConfig`.
    """

    # --- anchor-bank selection ---
    n_anchors: int = 8
    """Anchor-bank size K (8)."""
    n_selection_prompts: int = 200
    """Training prompts used to score anchor candidates (200)."""
    candidate_percentiles: tuple[float, float] = (25.0, 75.0)
    """Embedding-norm band of the candidates (25th-75th percentile)."""
    max_cos: float = 0.5
    """Pairwise cosine bound of the chosen anchors (0.5)."""
    max_scored: int | None = 64
    """Candidates scored during selection, drawn at random (64, ours; None: all)."""
    min_validity: float = 0.5
    """Candidates whose noisy outputs are well-formed less often are never chosen (0.5, ours)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check(
            (self.n_anchors >= 1, f"n_anchors must be >= 1, got {self.n_anchors}"),
            (self.fixed_anchor_index < self.n_anchors, "fixed_anchor_index must be in [0, n_anchors)"),
            (0.0 < self.max_cos <= 1.0, f"max_cos must be in (0, 1], got {self.max_cos}"),
        )
