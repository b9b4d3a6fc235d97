"""OpenRLHF rollout rows as step rows: `SampleRow`, `row_path` (a row's turns as a `PlayedPath`) and `turn_table`.

The one step-table builder (`envkit.credit.step_table.StepTable.from_paths`) and its conventions
(`envkit.credit.played_path`: one state-key rule, each step pointing to its recorded next state, ``terminal_reward``
on a success's last step) are the local trainer's and ``envkit-oracle rollout``'s too; this module only reads the
rollout records' steps (`RolloutRecord.steps`, the executor's recorder): each state's observation and info (anchors
are derived from them by the path, as for a local episode), the recorded state after the last step included. Used
by plain GiGPO / GraphGPO credit
(`envkit.trainers.openrlhf.turn_advantages`) and SERO's (`envkit.trainers.openrlhf.sero_turns`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envkit.core import Step
from envkit.credit.played_path import PlayedPath, paths_state_key
from envkit.credit.state_keys import StateKeyKind
from envkit.credit.step_table import StepTable
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, Turn

__all__ = ["SampleRow", "row_nodes", "row_path", "turn_table", "turns_state_key"]


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
        """Per step of `steps`, its token span, loss weight and oracle flag."""
        return self.record.turns if self.record is not None else ()

    @property
    def steps(self) -> tuple[Step, ...]:
        """The row's env steps (`RolloutRecord.steps`; none without a record)."""
        return self.record.steps if self.record is not None else ()


def _path_steps(row: SampleRow, policy_only: bool) -> tuple[Step, ...]:
    """The steps of the episode a row's table rows stand for: its steps, or (SERO) its policy episode
    (`RolloutRecord.policy_steps`: an oracle row's steps before the root, then its ``policy_suffix``)."""
    return row.record.policy_steps() if policy_only and row.record is not None else row.steps


def row_path(row: SampleRow, group: Hashable, index: int, *, policy_only: bool = False) -> PlayedPath:
    """A row's steps as a `PlayedPath`: each state's observation and info (the record's first state, then each
    step's), the state after the last step included."""
    steps = _path_steps(row, policy_only)
    first = (row.record.observation, row.record.info) if row.record is not None else ("", {})
    obs = (*(s.observation for s in steps), steps[-1].next_observation) if steps else (first[0],)
    return PlayedPath(
        group, index, obs, tuple(s.action for s in steps), tuple(float(s.reward) for s in steps),
        tuple(bool(s.info.get("invalid", False)) for s in steps), row.success,
        infos=(first[1], *(s.info for s in steps)), episode_return=row.reward,
    )  # fmt: skip


def row_nodes(row: SampleRow, kind: StateKeyKind) -> list[str]:
    """The node of every state of the row's steps under `kind` (T + 1: the first state, then each step's next),
    read from the steps as the table reads them (`PlayedPath.nodes`)."""
    return row_path(row, 0, row.index).nodes(kind)


def _oracle_infos(rows: Sequence[SampleRow]) -> list[Mapping[str, Any]]:
    """The infos of the states SERO's oracle steps lead to (the state-key rule reads their ``state_key``)."""
    return [s.info for r in rows for s, t in zip(r.steps, r.turns) if t.oracle]


def turns_state_key(rows: Sequence[SampleRow], cfg: BackendConfig, *, policy_only: bool = False) -> StateKeyKind:
    """The state key of the batch's turn table (`envkit.credit.played_path.paths_state_key`, the rule every backend
    uses): ``--adv.state-key``; unset: ``env`` when every state the credit names carries the env's exact key.
    With ``policy_only`` (SERO) the oracle turns' states count too.

    Raises:
        ValueError: ``--adv.state-key=env`` and a state has no key (says which option to set).
    """
    paths = [row_path(r, 0, i, policy_only=policy_only) for i, r in enumerate(rows) if _path_steps(r, policy_only)]
    return paths_state_key(cfg.adv.state_key, paths, _oracle_infos(rows) if policy_only else ())


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
        n = len(_path_steps(row, policy_only))
        if policy_only:
            pos = [j for j, t in enumerate(row.turns) if not t.oracle]
            owner += [(i, pos[j] if j < len(pos) else None) for j in range(n)]
        else:
            owner += [i] * n
    return table, owner
