"""Per-turn advantages of one OpenRLHF rollout batch, from envkit's backend-agnostic maths (torch-free).

The experience maker flattens OpenRLHF's micro-batches into `SampleRow`s (one per rollout) and calls
`compute_turn_advantages`, which picks the estimator (``envkit.credit.advantages``), EDEN's absorb
(``envkit.trainers.explorers.eden``), XRPO's sharpening (``envkit.trainers.explorers.xrpo``), branching's
leave-one-out term (``envkit.trainers.openrlhf.branch_turns``) and SERO's weights (carried by
the records' turns), and returns, per row, one advantage and one loss weight per turn plus a keep flag.
`envkit.trainers.openrlhf.experience` then spreads them over the tokens.

Groups are the records' ``spec.group`` (variable sizes: XRPO); a row without a record (OpenRLHF's own samples)
falls back to OpenRLHF's layout, ``index // n_samples_per_prompt``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from envkit.credit.advantages import StepTable, group_advantages, zero_advantage_fraction
from envkit.credit.graph import TERMINAL_NODE
from envkit.credit.state_keys import StateKeyKind
from envkit.credit.step_table import StepRows
from envkit.credit.turn_credit import turn_credit
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, Turn


@dataclass(frozen=True)
class SampleRow:
    """One rollout as the experience maker sees it.

    Attributes:
        index: Position of the rollout in the step's batch (OpenRLHF's ``Experience.index``).
        reward: OpenRLHF's scalar reward after its length penalties.
        record: envkit's record, or None for a sample that did not come through envkit's executor.
        mean_logprob: Mean log-prob of the response tokens under the current policy (XRPO novelty).
    """

    index: int
    reward: float
    record: RolloutRecord | None = None
    mean_logprob: float = 0.0

    def group(self, n_samples: int) -> Hashable:
        return self.record.spec.group if self.record is not None else f"idx{self.index // n_samples}"

    @property
    def noisy(self) -> bool:
        return bool(self.record is not None and self.record.spec.noisy)

    @property
    def success(self) -> bool:
        return bool(self.record.success) if self.record is not None else self.reward > 0

    @property
    def turns(self) -> tuple[Turn, ...]:
        return self.record.turns if self.record is not None else ()


@dataclass(frozen=True, eq=False)
class TurnAdvantages:
    """Result of `compute_turn_advantages`.

    Attributes:
        per_turn: Per row, (J,) advantages of its J turns ((1,) for a row without turns: the whole response).
        weights: Per row, (J,) SERO loss weights (1 for policy turns), applied to the final per-token
            advantages by the experience maker (EDEN's gamma is already in ``per_turn``).
        keep: (N,) bool rows that stay in the loss (EDEN drops unselected noisy rollouts).
        stats: Batch diagnostics (docs/methods.md section 7), floats.
    """

    per_turn: list[np.ndarray]
    weights: list[np.ndarray]
    keep: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


def _episode_return(row: SampleRow, cfg: BackendConfig) -> float:
    if cfg.adv.terminal_reward is not None:
        return float(cfg.adv.terminal_reward) * float(row.success)
    return row.reward


def _all_turns(rows: Sequence[SampleRow]) -> list[Turn]:
    """Every turn the batch credits: the rows' turns and the oracle rows' ``policy_suffix`` (SERO)."""
    return [t for r in rows for t in (*r.turns, *(r.record.policy_suffix if r.record is not None else ()))]


def turns_state_key(rows: Sequence[SampleRow], cfg: BackendConfig) -> StateKeyKind:
    """The state key of the batch's turn table: ``--adv.state-key``; unset: ``env`` when every turn's state
    carries the env's exact key (`Turn.anchors`), else ``observation``.

    Raises:
        ValueError: a turn lacks the anchor the option asks for (says which option to set).
    """
    kind = cfg.adv.state_key
    if kind == "observation":
        return kind
    turns = _all_turns(rows)
    has = [t.anchors is not None and (kind or "env") in t.anchors for t in turns]
    if kind is None:
        return "env" if turns and all(has) else "observation"
    if not all(has):
        raise ValueError(
            f"--adv.state-key={kind} but a turn has no {kind!r} anchor (the env gives no info['state_key'], or the "
            "records come from an older executor); set --adv.state-key=observation"
        )
    return kind


def turn_anchor(kind: str, observation: str | None, anchors: dict[str, str] | None) -> str | None:
    """A state's node: its observation, or its anchor under `kind` (None when unknown: derived later)."""
    if kind == "observation":
        return observation
    return None if anchors is None else anchors.get(kind)


def _step_table(
    rows: Sequence[SampleRow], groups: list[Hashable], cfg: BackendConfig, *, policy_only: bool = False
) -> tuple[StepTable, list[Any]]:
    """The turn table of rows that have turns (states: their anchors under `turns_state_key`); returns it with
    the owner of each table row: its row index, or with ``policy_only`` (SERO) (row index, index in
    ``row.turns`` or None for a ``policy_suffix`` turn) over each record's policy episode
    (`RolloutRecord.policy_turns`)."""
    kind = turns_state_key(rows, cfg)
    steps = StepRows()
    owner: list[Any] = []
    for i, row in enumerate(rows):
        turns = row.record.policy_turns() if policy_only and row.record is not None else row.turns
        pos = [j for j, t in enumerate(row.turns) if not t.oracle] if policy_only else list(range(len(turns)))
        for j, turn in enumerate(turns):
            last = j == len(turns) - 1
            nxt = turn_anchor(kind, turn.next_state, turn.next_anchors)
            if nxt is None:
                after = None if last else turn_anchor(kind, turns[j + 1].state, turns[j + 1].anchors)
                nxt = TERMINAL_NODE if after is None else after
            state = turn_anchor(kind, turn.state, turn.anchors)
            assert state is not None  # turns_state_key checked every turn has its anchor
            steps.add(
                group=groups[i],
                trajectory=i,
                step=j,
                state=state,
                reward=turn.reward,
                invalid=turn.invalid,
                next_state=nxt,
                action=turn.action,
                episode_return=_episode_return(row, cfg),
                success=row.success,
            )
            owner.append((i, pos[j] if j < len(pos) else None) if policy_only else i)
    return steps.table(), owner


def _row_level(rows: Sequence[SampleRow], groups: list[Hashable], cfg: BackendConfig) -> np.ndarray:
    estimator = "grpo" if cfg.adv.norm == "std" else "grpo_mean"
    return group_advantages([r.reward for r in rows], groups, estimator, eps=cfg.adv.eps)  # type: ignore[arg-type]


def compute_turn_advantages(rows: Sequence[SampleRow], cfg: BackendConfig, step: int = 0) -> TurnAdvantages:
    """Advantages per row and turn for one rollout batch.

    Args:
        rows: The batch's rollouts (any order).
        cfg: The backend config (estimator, explorer, options).
        step: Training step (XRPO's exploration bonus uses it).

    Returns:
        `TurnAdvantages`.
    """
    n = len(rows)
    groups = [r.group(cfg.n_samples_per_prompt) for r in rows]
    turn_counts = [max(len(r.turns), 1) for r in rows]
    stats: dict[str, float] = {}
    keep = np.ones(n, dtype=bool)
    noisy = np.array([r.noisy for r in rows], dtype=bool)

    # 1. The estimator: one value per row (grpo) or per turn (gigpo / graphgpo).
    per_turn: list[np.ndarray]
    sero_weights: list[np.ndarray] | None = None
    if cfg.sero and cfg.advantage == "graphgpo" and any(r.turns for r in rows):
        from envkit.trainers.openrlhf.sero_turns import sero_turn_advantages

        per_turn, sero_weights, sero_stats = sero_turn_advantages(rows, groups, cfg)
        stats.update(sero_stats)
        stats[f"state_key_{turns_state_key(rows, cfg)}"] = 1.0
    elif cfg.advantage == "grpo" or not any(r.turns for r in rows):
        if cfg.explorer == "eden" and noisy.any():
            from envkit.trainers.explorers.eden import eden_advantages

            estimator = "grpo" if cfg.adv.norm == "std" else "grpo_mean"
            res = eden_advantages([r.reward for r in rows], groups, noisy, cfg.eden_config(), estimator)
            row_adv, keep = res.advantages, res.loss_mask
            stats.update(res.stats)
        else:
            row_adv = _row_level(rows, groups, cfg)
        row_adv = _xrpo_sharpen(rows, groups, row_adv, cfg)
        per_turn = [np.full(turn_counts[i], row_adv[i]) for i in range(n)]
    else:
        table, owner = _step_table(rows, groups, cfg)
        stats[f"state_key_{turns_state_key(rows, cfg)}"] = 1.0
        adv = turn_credit(table, cfg.advantage, cfg.credit_options).advantages
        per_turn = [np.zeros(turn_counts[i]) for i in range(n)]
        pos = [0] * n
        for t, i in enumerate(owner):
            per_turn[i][pos[i]] = adv[t]
            pos[i] += 1
    per_turn_estimator = cfg.advantage != "grpo" and any(r.turns for r in rows)
    if per_turn_estimator and cfg.explorer == "eden" and noisy.any():  # EDEN's select + absorb (with SERO too)
        from envkit.trainers.explorers.eden import absorb, select_noisy

        ecfg = cfg.eden_config()
        row_abs = np.array([float(np.mean(np.abs(p))) for p in per_turn])
        keep = select_noisy(row_abs, noisy, ecfg.top_p)
        scale, keep = absorb(np.ones(n), noisy, keep, ecfg.gamma)
        per_turn = [p * scale[i] for i, p in enumerate(per_turn)]

    if cfg.explorer == "branch":  # branching rollouts: the tree's leave-one-out term (branch_turns)
        from envkit.trainers.openrlhf.branch_turns import branch_turn_advantages

        returns = [_episode_return(r, cfg) for r in rows]
        per_turn, branch_stats = branch_turn_advantages(rows, groups, per_turn, returns, cfg)
        stats.update(branch_stats)

    # 2. SERO: reachability weights of oracle turns (policy turns weigh 1).
    weights = sero_weights or [np.array([t.weight for t in r.turns]) if r.turns else np.ones(1) for r in rows]
    oracle = np.array([bool(r.record is not None and r.record.oracle) for r in rows])
    # EDEN reports it over the mixed groups before absorb (the paper's measure); otherwise over the final values
    stats.setdefault(
        "zero_adv_fraction", zero_advantage_fraction(np.array([float(np.max(np.abs(p))) for p in per_turn]), groups)
    )
    stats["success_rate"] = float(np.mean([r.success for r in rows])) if n else 0.0
    stats["truncated_episode_share"] = (
        float(np.mean([bool(r.record and r.record.truncated) for r in rows])) if n else 0.0
    )
    if cfg.sero:
        w_oracle = np.array([w for i in range(n) for w, t in zip(weights[i], rows[i].turns) if t.oracle])
        stats["sero_oracle_share"] = float(oracle.mean()) if n else 0.0
        stats["sero_weight_mean"] = float(w_oracle.mean()) if len(w_oracle) else 0.0
    if cfg.explorer == "eden":
        stats["eden_noisy_share"] = float(noisy.mean()) if n else 0.0
        stats["eden_noisy_kept_share"] = float((keep & noisy).sum() / max(int(noisy.sum()), 1))
    if cfg.explorer == "xrpo":
        sizes = np.bincount(np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)[1])
        icl = [bool(r.record and r.record.spec.prefix) for r in rows]
        stats["xrpo_rollouts_min"] = float(sizes.min()) if len(sizes) else 0.0
        stats["xrpo_rollouts_max"] = float(sizes.max()) if len(sizes) else 0.0
        stats["xrpo_icl_share"] = float(np.mean(icl)) if n else 0.0
    return TurnAdvantages(per_turn, weights, keep, stats)


def _xrpo_sharpen(
    rows: Sequence[SampleRow], groups: list[Hashable], row_adv: np.ndarray, cfg: BackendConfig
) -> np.ndarray:
    """XRPO's novelty-guided sharpening of correct rollouts' advantages (no-op for other explorers)."""
    if cfg.explorer != "xrpo":
        return row_adv
    from envkit.trainers.explorers.xrpo import sharpen

    xcfg = cfg.xrpo_config()
    if not xcfg.sharpen:
        return row_adv
    correct = np.array([r.success for r in rows], dtype=bool)
    s = np.array([r.mean_logprob for r in rows], dtype=np.float64)
    return sharpen(row_adv, correct, s, groups, lambda_n=xcfg.lambda_n, kappa=xcfg.kappa)
