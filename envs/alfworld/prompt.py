"""verl-agent-style ALFWorld prompts with the last H steps of history, and the matching action parser.

The env stays prompt-free; this module turns its state into the text verl-agent (GiGPO's code base) gives the
policy, and parses ``<action>...</action>`` out of the reply.

Usage::

    from envkit.envs.alfworld.prompt import AlfworldPrompt, parse_action
    prompt = AlfworldPrompt(history_length=2)
    text = prompt.for_env(env.unwrapped, obs, info)            # or prompt.build(...) from explicit parts
    action, ok = parse_action(reply)                           # ok False -> treat as an invalid action
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envkit.envs.alfworld.env import ALFWorldEnv

__all__ = ["TEMPLATE", "TEMPLATE_NO_HISTORY", "AlfworldPrompt", "parse_action"]

_INSTRUCTIONS = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
    "within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags."
)

TEMPLATE_NO_HISTORY = (
    "You are an expert agent operating in the ALFRED Embodied Environment.\n"
    "Your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n\n" + _INSTRUCTIONS
)

TEMPLATE = (
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}\n"
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} "
    "observations and the corresponding actions you took: {action_history}\n"
    "You are now at step {current_step} and your current observation is: {current_observation}\n"
    "Your admissible actions of the current situation are: [{admissible_actions}].\n\n" + _INSTRUCTIONS
)


@dataclass(frozen=True)
class AlfworldPrompt:
    """Prompt builder.

    Attributes:
        history_length: How many past (observation, action) pairs to show (H); 0 for no history.
        template: Template with history fields (`TEMPLATE`).
        template_no_history: Template of the first step or of ``history_length == 0``.
    """

    history_length: int = 2
    template: str = TEMPLATE
    template_no_history: str = TEMPLATE_NO_HISTORY

    def __post_init__(self) -> None:
        if self.history_length < 0:
            raise ValueError(f"history_length must be >= 0, got {self.history_length}")

    def build(
        self,
        task: str,
        current_observation: str,
        admissible_actions: Sequence[str],
        past: Sequence[tuple[str, str]] = (),
    ) -> str:
        """The prompt.

        Args:
            task: The task description (``info["task"]``).
            current_observation: What the agent sees now.
            admissible_actions: ``info["admissible_actions"]``.
            past: Every earlier ``(observation, action)`` pair of the episode, oldest first.
        """
        actions = ", ".join(f"'{a}'" for a in admissible_actions if a != "help")
        if not past or self.history_length == 0:
            return self.template_no_history.format(current_observation=current_observation, admissible_actions=actions)
        start = max(0, len(past) - self.history_length)
        lines = [
            f"[Observation {i + 1}: '{obs}', Action {i + 1}: '{act}']"
            for i, (obs, act) in enumerate(past)
            if i >= start
        ]
        return self.template.format(
            task_description=task,
            step_count=len(past),
            history_length=len(lines),
            action_history="\n" + "\n".join(lines),
            current_step=len(past) + 1,
            current_observation=current_observation,
            admissible_actions=actions,
        )

    def for_env(self, env: ALFWorldEnv, observation: str, info: Mapping[str, Any]) -> str:
        """The prompt for an `ALFWorldEnv` (``env.unwrapped``) at its current state.

        Past observations are the engine's feedback texts (the intro for the first), as in verl-agent.
        """
        history = env.history
        before = [env.intro, *(feedback for _, feedback in history[:-1])] if history else []
        past = [(obs, act) for obs, (act, _) in zip(before, history)]
        current = str(info.get("feedback", observation)) if history else observation
        return self.build(str(info.get("task", "")), current, list(info.get("admissible_actions", [])), past)


_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def parse_action(text: str) -> tuple[str, bool]:
    """Extract the last ``<action>...</action>`` (lower-cased, stripped) from a reply.

    Returns:
        ``(action, ok)``; `ok` is False when there is no action tag or a ``<think>`` tag is missing (verl-agent
        counts both as invalid). The action is then the reply's last 30 characters, which the env will reject.
    """
    found = _ACTION.findall(text)
    if not found:
        return text[-30:].strip().lower(), False
    action = found[-1].strip().lower()
    ok = "<think>" in text and "</think>" in text
    return action, ok
