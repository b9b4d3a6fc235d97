"""OpenRLHF rollout rows as step rows: `SampleRow`, `row_path` (a row's turns as a `PlayedPath`) and `turn_table`.

The one step-table builder (`envkit.credit.step_table.StepTable.from_paths`) and its conventions
(`envkit.credit.played_path`: one state-key rule, each step pointing to its recorded next state, ``terminal_reward``
on a success's last step) are the local trainer's and ``envkit-oracle rollout``'s too; this module only reads the
rollout records: each turn's observation and anchors (`Turn.anchors`, the executor's), and the recorded state after
the last turn (`Turn.next_state` / `Turn.next_anchors`). Used by plain GiGPO / GraphGPO credit
(`envkit.trainers.openrlhf.turn_advantages`) and SERO's (`envkit.trainers.openrlhf.sero_turns`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envkit.credit.played_path import PlayedPath, paths_state_key
from envkit.credit.state_keys import STATE_KEY, StateKeyKind
from envkit.credit.step_table import StepTable
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, Turn

__all__ = ["SampleRow", "row_path", "turn_anchor", "turn_table", "turns_state_key"]


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


def _path_turns(row: SampleRow, policy_only: bool) -> tuple[Turn, ...]:
    """The turns of the episode a row's table rows stand for: its turns, or (SERO) its policy episode
    (`RolloutRecord.policy_turns`: an oracle row's turns before the root, then its ``policy_suffix``)."""
    return row.record.policy_turns() if policy_only and row.record is not None else row.turns


def row_path(row: SampleRow, group: Hashable, index: int, *, policy_only: bool = False) -> PlayedPath:
    """A row's turns as a `PlayedPath` (the final state: the last turn's recorded ``next_state``, when known)."""
    turns = _path_turns(row, policy_only)
    obs: list[str] = [t.state for t in turns]
    maps: list[Mapping[str, str] | None] = [t.anchors for t in turns]
    if turns and turns[-1].next_state is not None:
        obs.append(turns[-1].next_state)
        maps.append(turns[-1].next_anchors)
    return PlayedPath(
        group, index, tuple(obs), tuple(t.action for t in turns), tuple(float(t.reward) for t in turns),
        tuple(bool(t.invalid) for t in turns), row.success, anchor_maps=tuple(maps), episode_return=row.reward,
    )  # fmt: skip


def _oracle_infos(rows: Sequence[SampleRow]) -> list[dict[str, Any]]:
    """The states SERO's oracle turns lead to, as the state-key rule reads them (``env`` anchor as key)."""
    out: list[dict[str, Any]] = []
    for r in rows:
        for t in r.turns:
            if t.oracle:
                out.append({STATE_KEY: t.next_anchors["env"]} if t.next_anchors and "env" in t.next_anchors else {})
    return out


def turns_state_key(rows: Sequence[SampleRow], cfg: BackendConfig, *, policy_only: bool = False) -> StateKeyKind:
    """The state key of the batch's turn table (`envkit.credit.played_path.paths_state_key`, the rule every backend
    uses): ``--adv.state-key``; unset: ``env`` when every state the credit names carries the env's exact key.
    With ``policy_only`` (SERO) the oracle turns' states count too.

    Raises:
        ValueError: ``--adv.state-key=env`` and a state has no key (says which option to set).
    """
    paths = [row_path(r, 0, i, policy_only=policy_only) for i, r in enumerate(rows) if _path_turns(r, policy_only)]
    return paths_state_key(cfg.adv.state_key, paths, _oracle_infos(rows) if policy_only else ())


def turn_anchor(kind: str, observation: str | None, anchors: Mapping[str, str] | None) -> str | None:
    """A state's node: its observation, or its anchor under `kind` (None when unknown)."""
    if kind == "observation":
        return observation
    return None if anchors is None else anchors.get(kind)


def turn_table(
    rows: Sequence[SampleRow], groups: list[Hashable], cfg: BackendConfig, *, policy_only: bool = False
) -> tuple[StepTable, list[Any]]:
    """The turn table of rows that have turns (`StepTable.from_paths`, states under `turns_state_key`); returns
    it with the owner of each table row: its row index, or with ``policy_only`` (SERO) (row index, index in
    ``row.turns`` or None for a ``policy_suffix`` turn) over each record's policy episode."""
    kind = turns_state_key(rows, cfg, policy_only=policy_only)
    paths = [row_path(r, groups[i], i, policy_only=policy_only) for i, r in enumerate(rows)]
    table = StepTable.from_paths(paths, state_key=kind, terminal_reward=cfg.credit_options.terminal_reward)
    owner: list[Any] = []
    for i, row in enumerate(rows):
        n = len(_path_turns(row, policy_only))
        if policy_only:
            pos = [j for j, t in enumerate(row.turns) if not t.oracle]
            owner += [(i, pos[j] if j < len(pos) else None) for j in range(n)]
        else:
            owner += [i] * n
    return table, owner
