"""The experience-maker subclass: envkit's advantages inside OpenRLHF 0.11.2's ``RemoteExperienceMaker``.

OpenRLHF's ``compute_advantages_and_returns`` reshapes the batch's rewards to ``(-1, n_samples_per_prompt)``:
it would mis-group XRPO's variable groups and knows no per-turn (GiGPO/GraphGPO) advantages. `EnvkitExperienceMaker`
overrides it completely:

1. rewards to fp32 and OpenRLHF's own length penalties (unchanged);
2. per-turn advantages from `envkit.trainers.openrlhf.turn_advantages` (groups from envkit's records);
3. spread over the tokens exactly as OpenRLHF does for group_norm: each turn's advantage is clipped to
   ``--reward.clip_range`` and the per-token KL penalty is added as a reward-to-go (`token_advantages`); for one
   turn this IS OpenRLHF's ``compute_reward`` + ``get_cumulative_returns``;
4. fold the loss weights into the advantages (SERO reachability per turn; EDEN's gamma is already in the
   turn advantages): the clipped surrogate is positively homogeneous in A, so this equals weighting the
   per-token loss;
5. drop unselected EDEN noisy rollouts by zeroing their action mask (they leave the token count too);
6. pop envkit's private info key and add the diagnostics as per-sample info tensors (OpenRLHF logs them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from openrlhf.models.utils import masked_mean
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties

from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.credit_log import (
    TokenValues,
    credit_entry,
    pick_group,
    turn_token_values,
    write_credit_log,
)
from envkit.trainers.openrlhf.explorers.registry import make_explorer
from envkit.trainers.openrlhf.rollout_records import INFO_KEY, RolloutRecord
from envkit.trainers.openrlhf.turn_advantages import SampleRow, TurnAdvantages, compute_turn_advantages


def turn_token_ends(record: RolloutRecord | None, action_mask: torch.Tensor, length: int | None = None) -> list[int]:
    """Action-mask index of the last token of each turn that survived truncation.

    OpenRLHF's action mask is the observation-token mask shifted by one (``mask[1:max_len]``), so an action
    spanning observation tokens ``[start, end)`` covers action-mask indices ``[start - 1, end - 1)``. A record
    without turns (or no record) is one turn ending at the last masked token. ``length`` is the sample's own
    action-mask length (its tokens minus one, before the micro-batch's right padding; default: the mask's).
    """
    length = action_mask.shape[-1] if length is None else length
    masked = torch.nonzero(action_mask > 0).flatten()
    if len(masked) == 0:
        return []
    if record is None or not record.turns:
        return [int(masked[-1])]
    ends = []
    for turn in record.turns:
        last = min(turn.end - 1, length) - 1
        if last >= max(turn.start - 1, 0) and last >= 0:
            ends.append(last)
    return ends


def token_advantages(
    turn_adv: Sequence[float],
    turn_ends: Sequence[int],
    action_mask: torch.Tensor,
    kl: torch.Tensor | None,
    kl_coef: float,
    clip_range: tuple[float, float] | None,
) -> torch.Tensor:
    """(A,) per-token advantages (= returns) of one rollout, OpenRLHF's reward-to-go with per-turn rewards.

    Each turn's advantage ``a_j`` (clipped to ``clip_range``) is placed as a reward increment
    ``a_j - a_{j+1}`` on the turn's last token, the KL penalty ``-kl_coef * kl`` on every token, and the
    undiscounted reward-to-go over the action mask gives every token of turn j ``a_j`` plus its KL tail. With one
    turn this is OpenRLHF's ``compute_reward`` followed by ``get_cumulative_returns(gamma=1)``.

    Args:
        turn_adv: (J,) advantages of the turns that survived truncation, in order.
        turn_ends: (J,) action-mask index of each turn's last token (`turn_token_ends`).
        action_mask: (A,) 0/1.
        kl: (A,) per-token KL or None.
        kl_coef: KL coefficient (<= 0 means none).
        clip_range: OpenRLHF's ``--reward.clip_range`` or None.
    """
    mask = action_mask.to(torch.float32)
    reward = torch.zeros_like(mask) if kl is None else -max(kl_coef, 0.0) * kl.to(torch.float32)
    a = torch.tensor(list(turn_adv), dtype=torch.float32)
    if clip_range:
        a = a.clamp(min=clip_range[0], max=clip_range[1])
    nxt = torch.cat([a[1:], torch.zeros(1)]) if len(a) else a
    for end, inc in zip(turn_ends, (a - nxt).tolist()):
        reward[end] = reward[end] + inc
    reward = reward * mask
    returns = torch.flip(torch.cumsum(torch.flip(reward, [0]), 0), [0])
    return returns


def turn_token_weights(record: RolloutRecord | None, weights: np.ndarray, action_mask: torch.Tensor) -> torch.Tensor:
    """(A,) loss weight of every token: its turn's weight (SERO), 1 outside any turn."""
    out = torch.ones(action_mask.shape[-1], dtype=torch.float32)
    if record is None or not record.turns:
        out[:] = float(weights[0]) if len(weights) else 1.0
        return out
    for turn, w in zip(record.turns, weights):
        lo, hi = max(turn.start - 1, 0), min(turn.end - 1, len(out))
        if hi > lo:
            out[lo:hi] = float(w)
    return out


def sample_rows(experiences: Sequence[Experience]) -> tuple[list[SampleRow], list[tuple[int, int]]]:
    """Flatten micro-batches into `SampleRow`s (with their (experience, row) positions)."""
    rows: list[SampleRow] = []
    where: list[tuple[int, int]] = []
    for e_i, exp in enumerate(experiences):
        records = exp.info.get(INFO_KEY) or [None] * len(exp.sequences)
        index = exp.index if exp.index is not None else list(range(len(exp.sequences)))
        if exp.action_log_probs is not None:
            mlp = masked_mean(exp.action_log_probs.float(), exp.action_mask, dim=-1).nan_to_num(0.0)
        else:
            mlp = torch.zeros(len(exp.sequences))
        for b in range(len(exp.sequences)):
            rec = records[b]
            record = RolloutRecord.from_dict(rec) if isinstance(rec, dict) and rec else None
            rows.append(SampleRow(int(index[b]), float(exp.rewards[b]), record, float(mlp[b])))
            where.append((e_i, b))
    return rows, where


class EnvkitExperienceMaker(RemoteExperienceMaker):
    """``RemoteExperienceMaker`` whose advantages come from envkit (see the module docstring).

    Args:
        *args: ``RemoteExperienceMaker``'s positional arguments (model groups, KL controller, strategy, tokenizer).
        config: The backend config (from `BackendConfig.from_env` in the trainer actor).
        **kwargs: Passed on.
    """

    def __init__(self, *args: Any, config: BackendConfig, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config = config
        self.explorer = make_explorer(config)  # chosen once: its credit hooks
        self.step = 0
        self.last_stats: dict[str, float] = {}

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences: list[Experience]) -> list[Experience]:
        args = self.strategy.args
        for exp in experiences:
            exp.rewards = exp.rewards.to(torch.promote_types(exp.rewards.dtype, torch.float32))
        apply_length_penalties(experiences, args)

        rows, where = sample_rows(experiences)
        result: TurnAdvantages = compute_turn_advantages(rows, self.config, self.step, self.explorer)
        self.step += 1
        self.last_stats = dict(result.stats)
        kl_coef = float(self.kl_ctl.value)
        clip = tuple(args.reward.clip_range) if args.reward.clip_range else None
        group_std = _group_reward_std(rows, self.config.n_samples_per_prompt)

        groups = [r.group(self.config.n_samples_per_prompt) for r in rows]
        logged = pick_group(rows, groups) if self.config.credit_log else None
        tokens: dict[int, TokenValues] = {}
        per_exp: dict[int, list[int]] = {}
        for r_i, (e_i, _) in enumerate(where):
            per_exp.setdefault(e_i, []).append(r_i)
        for e_i, exp in enumerate(experiences):
            advs, rets = [], []
            new_mask = exp.action_mask.clone()
            for b, r_i in enumerate(per_exp.get(e_i, [])):
                row = rows[r_i]
                mask_b = exp.action_mask[b]
                kl_b = exp.kl[b] if exp.kl is not None else None
                length = int(exp.attention_mask[b].sum()) - 1 if exp.attention_mask is not None else None
                ends = turn_token_ends(row.record, mask_b, length)
                if row.record is not None and row.record.turns:
                    turn_adv = _surviving(row.record, result.per_turn[r_i], length or mask_b.shape[-1])
                else:
                    turn_adv = [float(result.per_turn[r_i][0])] if ends else []
                ret = token_advantages(turn_adv, ends, mask_b, kl_b, kl_coef, clip)
                weight = turn_token_weights(row.record, result.weights[r_i], mask_b)
                adv = ret * weight
                if not result.keep[r_i]:
                    new_mask[b] = 0
                    adv = torch.zeros_like(adv)
                if logged is not None and groups[r_i] == logged and row.turns:
                    tokens[r_i] = turn_token_values(row, adv, kl_b, kl_coef, mask_b)
                advs.append(adv)
                rets.append(ret)
            exp.advantages = torch.stack(advs).to(exp.action_mask.device)
            exp.returns = torch.stack(rets).to(exp.action_mask.device)
            reward_sum = exp.returns[:, 0] if exp.returns.shape[-1] else torch.zeros(len(advs))
            exp.info["return"] = reward_sum
            exp.info["group_reward_std"] = torch.tensor([group_std[r_i] for r_i in per_exp.get(e_i, [])])
            exp.action_mask = new_mask.to(exp.action_mask.dtype)
            exp.info.pop(INFO_KEY, None)
            for key, value in result.stats.items():
                exp.info[f"envkit/{key}"] = torch.full((len(advs),), float(value))
            exp.kl = None
        out_dir = getattr(getattr(args, "ckpt", None), "output_dir", None)
        if logged is not None and out_dir:
            entry = credit_entry(
                self.config, self.step, rows, groups, logged, result.per_turn, result.weights, result.keep, tokens
            )
            write_credit_log(out_dir, entry)
        return experiences


def _surviving(record: RolloutRecord, per_turn: np.ndarray, length: int) -> list[float]:
    """Advantages of the turns whose last token survived OpenRLHF's truncation to ``max_len``."""
    out = []
    for turn, a in zip(record.turns, per_turn):
        last = min(turn.end - 1, length) - 1
        if last >= max(turn.start - 1, 0) and last >= 0:
            out.append(float(a))
    return out


def _group_reward_std(rows: Sequence[SampleRow], n_samples: int) -> list[float]:
    """Per row, the (unbiased) std of its group's rewards (OpenRLHF logs ``group_reward_std``)."""
    by_group: dict[Any, list[int]] = {}
    for i, row in enumerate(rows):
        by_group.setdefault(row.group(n_samples), []).append(i)
    out = [0.0] * len(rows)
    for members in by_group.values():
        r = np.array([rows[i].reward for i in members])
        std = float(r.std(ddof=1)) if len(r) > 1 else 0.0
        for i in members:
            out[i] = std
    return out


__all__ = ["EnvkitExperienceMaker", "sample_rows", "token_advantages", "turn_token_ends", "turn_token_weights"]
