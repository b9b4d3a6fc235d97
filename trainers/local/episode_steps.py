"""The local trainer's episodes as step rows: `episode_path` (an `Episode` as a `PlayedPath`) and `step_table`.

Every convention lives in `envkit.credit.played_path` / `StepTable.from_paths`, the builder the OpenRLHF backend
and ``envkit-oracle rollout`` use too; this module only reads an `Episode`'s one record of steps (its
`EpisodeRecorder`, always made by `play_specs`): the observation and info before each action and after the last
one. Shared by the batch source's turn credit (`envkit.trainers.local.agent_source`) and SERO's
(`envkit.trainers.local.sero`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from envkit.credit.played_path import PlayedPath, paths_state_key
from envkit.credit.state_keys import StateKeyKind
from envkit.credit.step_table import StepTable
from envkit.trainers.local.multi_turn import AgentConfig, Episode

__all__ = ["episode_path", "episodes_state_key", "step_table"]


def episode_path(e: Episode) -> PlayedPath:
    """`e` as a `PlayedPath`, read from its record: the state before each action, then the state after the last
    one (`Episode.observations` / `Episode.infos`; an episode without a record: its start state alone)."""
    return PlayedPath(
        e.group, e.index, e.observations, e.actions, e.rewards, e.invalid, e.success, infos=e.infos or None,
    )  # fmt: skip


def episodes_state_key(
    episodes: list[Episode], cfg: AgentConfig, extra: Iterable[Mapping[str, Any]] = ()
) -> StateKeyKind:
    """The state key the batch's step rows use (``agent.adv.state_key``; None: the env's exact key when every
    state, the final ones and the `extra` infos (SERO's oracle steps) included, has one)."""
    return paths_state_key(cfg.adv.state_key, (episode_path(e) for e in episodes), extra)


def step_table(episodes: list[Episode], cfg: AgentConfig, kind: StateKeyKind | None = None) -> StepTable:
    """The GiGPO/GraphGPO step rows of played episodes (`StepTable.from_paths`; reward: ``adv.terminal_reward``
    on a successful last step); each row's state is its anchor under `kind` (None: `episodes_state_key`)."""
    return StepTable.from_paths(
        [episode_path(e) for e in episodes], state_key=kind or cfg.adv.state_key,
        terminal_reward=float(cfg.adv.terminal_reward or 0.0),
    )  # fmt: skip
