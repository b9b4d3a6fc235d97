"""`envkit_credit.jsonl`: one group's credit per training step, as it reached OpenRLHF's loss (``--credit-log``).

With ``BackendConfig.credit_log`` the experience maker (`envkit.trainers.openrlhf.experience`) writes, after each
step's advantages, one JSON line to ``--ckpt.output_dir``: the backend config, and for one group (`pick_group`: the
first holding a SERO oracle row, else one holding a branch fork with a shared prefix, else the first with turns) every row's record (`RolloutRecord.to_dict`), its
per-turn advantages and loss weights (`TurnAdvantages`), whether it stayed in the loss, and per turn the values of
the per-token advantage tensor the loss receives (``Experience.advantages`` over the turn's action tokens) with the
KL part of each (OpenRLHF's per-token KL reward tail; 0 with ``--algo.kl.use_loss``). A checker recomputes the group
with the local trainer's credit and compares value by value (scripts/openrlhf_credit_check.py; the end-to-end
test runs it on the SERO and branching arms).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.turn_paths import SampleRow

__all__ = ["CREDIT_LOG", "TokenValues", "credit_entry", "pick_group", "turn_token_values", "write_credit_log"]

CREDIT_LOG = "envkit_credit.jsonl"

#: Per turn of a row: (the loss's per-token advantages over the turn's action tokens, the KL part of each)
TokenValues = list[tuple[list[float], list[float]]]


def pick_group(rows: Sequence[SampleRow], groups: Sequence[Hashable]) -> Hashable | None:
    """The group to log: the first holding a SERO oracle row, else the first holding a branch fork that shares a
    prefix with its backbone (``--explorer branch``), else the first with turns (None: no turns)."""
    with_turns = [g for r, g in zip(rows, groups, strict=True) if r.turns]
    oracle = [g for r, g in zip(rows, groups, strict=True) if r.record is not None and r.record.oracle]
    forked = [
        g for r, g in zip(rows, groups, strict=True)
        if r.record is not None and r.turns and int(r.record.extra.get("branch", {}).get("parent", -1)) >= 0
    ]  # fmt: skip
    return (oracle or forked or with_turns or [None])[0]


def turn_token_values(
    row: SampleRow, adv: torch.Tensor, kl: torch.Tensor | None, kl_coef: float, mask: torch.Tensor
) -> TokenValues:
    """Per turn of `row`, the loss's advantages on its action tokens and the KL reward tail of each token
    (``-kl_coef * kl`` summed from the token to the end, over the action mask)."""
    m = mask.to(torch.float32)
    if kl is None or kl_coef <= 0:
        tail = torch.zeros_like(m)
    else:
        r = -float(kl_coef) * kl.to(torch.float32) * m
        tail = torch.flip(torch.cumsum(torch.flip(r, [0]), 0), [0])
    out: TokenValues = []
    for turn in row.turns:
        lo, hi = max(turn.start - 1, 0), min(turn.end - 1, adv.shape[-1])
        idx = [k for k in range(lo, hi) if m[k] > 0]
        out.append(([float(adv[k]) for k in idx], [float(tail[k]) for k in idx]))
    return out


def credit_entry(
    cfg: BackendConfig,
    step: int,
    rows: Sequence[SampleRow],
    groups: Sequence[Hashable],
    group: Hashable,
    per_turn: Sequence[np.ndarray],
    weights: Sequence[np.ndarray],
    keep: np.ndarray,
    tokens: dict[int, TokenValues],
) -> dict[str, Any]:
    """The log line of `group` (see the module docstring); `tokens`: `turn_token_values` per row index."""
    out = []
    for i, (row, g) in enumerate(zip(rows, groups, strict=True)):
        if g != group or row.record is None:
            continue
        out.append(
            {
                "index": row.index, "reward": row.reward, "record": row.record.to_dict(),
                "per_turn": [float(x) for x in per_turn[i]], "weights": [float(x) for x in weights[i]],
                "keep": bool(keep[i]), "loss_tokens": [list(v) for v, _ in tokens.get(i, [])],
                "kl_tails": [list(k) for _, k in tokens.get(i, [])],
            }
        )  # fmt: skip
    return {"step": step, "group": str(group), "config": json.loads(cfg.to_json()), "rows": out}


def write_credit_log(out_dir: str | Path, entry: dict[str, Any]) -> Path:
    """Append `entry` to ``out_dir/envkit_credit.jsonl``."""
    path = Path(out_dir) / CREDIT_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return path
