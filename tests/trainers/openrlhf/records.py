"""Test helper: OpenRLHF rollout records (`RolloutRecord`: steps + per-step `Turn` spans) written turn by turn.

`T` takes a turn as the tests think of it (state, action, reward, invalid flag, token span, next state, the env's
state key, oracle flag, l_j); `record` turns a sequence of them into the record the agent executor writes: one
`envkit.core.Step` per turn (its info carries ``invalid``, ``state_key`` of the state it leads to, and
``success`` on the policy episode's last step when `success`) and one `Turn` with the span. Anchors are then read
from the steps, as for a played record. Not a test module (no ``test_`` prefix).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envkit.core import Step
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn


@dataclass(frozen=True)
class T:
    """One turn (the old all-in-one turn's field order): `next_state` None means the next turn's state (the last
    turn: ``state + "'"``); `key` / `next_key` the env's state key of the state before / after (None: none)."""

    state: str
    action: str
    reward: float = 0.0
    invalid: bool = False
    start: int = 0
    end: int = 1
    weight: float = 1.0
    next_state: str | None = None
    key: str | None = None
    next_key: str | None = None
    oracle: bool = False
    loglik: float | None = None


def _steps(turns: Sequence[T], after: Sequence[T] = (), win: int = -1) -> list[Step]:
    """Steps of `turns` (`after`: the turns that follow them, for the default next state and key); the step at
    index `win` gets ``info["success"] = True``."""
    seq = list(turns) + list(after)
    out = []
    for j, t in enumerate(turns):
        nxt_t = seq[j + 1] if j + 1 < len(seq) else None
        nxt = t.next_state if t.next_state is not None else (nxt_t.state if nxt_t is not None else t.state + "'")
        key = t.next_key if t.next_key is not None else (nxt_t.key if nxt_t is not None else None)
        info: dict[str, Any] = {"invalid": bool(t.invalid)}
        if key is not None:
            info["state_key"] = key
        if j == win:
            info["success"] = True
        out.append(Step(t.state, t.action, float(t.reward), nxt, j == win, False, info, is_oracle=t.oracle))
    return out


def record(
    spec: RolloutSpec,
    turns: Sequence[T] = (),
    success: bool = False,
    *,
    policy_suffix: Sequence[T] = (),
    info: Mapping[str, Any] | None = None,
    **fields: Any,
) -> RolloutRecord:
    """The record of `turns` (then `policy_suffix`, an oracle row's); `success`: the policy episode's last step
    (the suffix's last, else the last non-oracle turn) carries ``info["success"]``; `fields`: the record's other
    fields (``oracle``, ``extra``, ``truncated``, ...)."""
    turns, suffix = list(turns), list(policy_suffix)
    policy = [j for j, t in enumerate(turns) if not t.oracle]
    win_row = policy[-1] if success and not suffix and policy else -1
    win_suffix = len(suffix) - 1 if success and suffix else -1
    oracle_at = next((j for j, t in enumerate(turns) if t.oracle), len(turns))
    steps = _steps(turns[:oracle_at], suffix if oracle_at == len(turns) else turns[oracle_at:], win_row)
    steps += _steps(turns[oracle_at:], (), -1)
    first = turns[0] if turns else (suffix[0] if suffix else T("", ""))
    start_info = dict(info or {})
    if first.key is not None:
        start_info.setdefault("state_key", first.key)
    return RolloutRecord(
        spec, first.state, start_info, tuple(steps),
        tuple(Turn(t.start, t.end, t.weight, t.oracle, t.loglik) for t in turns),
        policy_suffix=tuple(_steps(suffix, (), win_suffix)), **fields,
    )  # fmt: skip
