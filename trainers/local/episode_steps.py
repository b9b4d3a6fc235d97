"""The GiGPO / GraphGPO step rows of played episodes (`step_table`) and the state key they use.

Shared by the batch source's turn credit (`envkit.trainers.local.agent_source`) and SERO's
(`envkit.trainers.local.sero`), which is why it is a module of its own (no import circle between those two).
"""

from __future__ import annotations

from envkit.credit.advantages import StepTable
from envkit.credit.state_keys import StateKeyKind, path_anchors, resolve_state_key
from envkit.trainers.local.multi_turn import AgentConfig, Episode

__all__ = ["episodes_state_key", "step_table"]


def _success_reward(cfg: AgentConfig) -> float:
    """Reward of a successful episode's last step (``adv.terminal_reward``, set: `AgentConfig` checks it)."""
    return float(cfg.adv.terminal_reward or 0.0)


def episodes_state_key(episodes: list[Episode], cfg: AgentConfig) -> StateKeyKind:
    """The state key the batch's step rows use (``agent.adv.state_key``; None: the env's exact key if offered)."""
    return resolve_state_key(cfg.adv.state_key, (i for e in episodes for i in e.infos))


def step_table(episodes: list[Episode], cfg: AgentConfig, kind: StateKeyKind | None = None) -> StepTable:
    """The GiGPO/GraphGPO step rows of played episodes (reward: adv.terminal_reward on a successful last step);
    each row's state is its anchor under `kind` (None: `episodes_state_key`)."""
    kind = kind or episodes_state_key(episodes, cfg)
    group, traj, step, state, reward, invalid, action = [], [], [], [], [], [], []
    for e in episodes:
        n = len(e.states)
        anchors = e.states if kind == "observation" else path_anchors(kind, e.states, e.actions[: n - 1], e.infos)
        for t, a in enumerate(e.actions):
            group.append(e.group)
            traj.append(e.index)
            step.append(t)
            state.append(anchors[t])
            last = t == len(e.actions) - 1
            reward.append(_success_reward(cfg) * float(e.success) if last else 0.0)
            invalid.append(e.invalid[t])
            action.append(a)
    return StepTable(
        group=group, trajectory=traj, step=step, state=state, reward=reward, invalid=invalid, action=action
    )
