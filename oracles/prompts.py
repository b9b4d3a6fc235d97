"""Chat prompts for agent turns, shared by the model policies, the scorers and `envkit-oracle export`.

One turn is rendered as chat messages: a system message that says how to answer, then one user message with the
last few steps of history, the current observation and (when the env lists them) the admissible actions. The
assistant's reply is the action text. Policies generate it, scorers score it, exported SFT rows train on it, so
all three see exactly the same prompt.

Example:
    >>> from envkit.policies import PolicyInput
    >>> msgs = turn_messages(PolicyInput("You are at cell 0.", {"admissible_actions": ["left", "right"]}))
    >>> [m["role"] for m in msgs]
    ['system', 'user']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envkit.core import Step
from envkit.policies import PolicyInput

if TYPE_CHECKING:  # transformers is heavy: only the annotation needs it
    from transformers import PreTrainedTokenizerBase

SYSTEM_PROMPT = (
    "You are an agent acting in a text environment. Read the observation and reply with exactly one action, "
    "as plain text, with nothing else."
)


@dataclass(frozen=True)
class PromptConfig:
    """How turns are rendered.

    Attributes:
        system: The system message.
        history: Number of earlier steps shown (verl-agent shows 2 for WebShop).
        max_observation_chars: Observations longer than this are cut (keeping the end).
        list_actions: Show ``info["admissible_actions"]`` when the env lists them.
    """

    system: str = SYSTEM_PROMPT
    history: int = 2
    max_observation_chars: int = 4000
    list_actions: bool = True

    def __post_init__(self) -> None:
        if self.history < 0:
            raise ValueError(f"PromptConfig.history must be >= 0, got {self.history}")
        if self.max_observation_chars < 16:
            raise ValueError(f"PromptConfig.max_observation_chars must be >= 16, got {self.max_observation_chars}")


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else "..." + text[-(n - 3) :]


def turn_messages(x: PolicyInput, config: PromptConfig | None = None) -> list[dict[str, str]]:
    """The chat messages (system + user) for one turn; the reply (the action) is not included."""
    cfg = config or PromptConfig()
    parts: list[str] = []
    hist: Sequence[Step] = x.history[-cfg.history :] if cfg.history else ()
    if hist:
        lines = [f"- {_cut(s.observation, 300)!s} -> {s.action}" for s in hist]
        parts.append("Previous steps (observation -> action):\n" + "\n".join(lines))
    parts.append("Observation:\n" + _cut(x.observation, cfg.max_observation_chars))
    acts = admissible(x.info)
    if cfg.list_actions and acts:
        parts.append("Admissible actions:\n" + "\n".join(acts))
    parts.append("Your action:")
    return [{"role": "system", "content": cfg.system}, {"role": "user", "content": "\n\n".join(parts)}]


def admissible(info: Mapping[str, Any]) -> list[str]:
    """``info["admissible_actions"]`` as a list of str (empty when the env does not list them)."""
    acts = info.get("admissible_actions") or []
    return [str(a) for a in acts]


def render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> str:
    """The prompt text of `messages` with the generation prompt: the tokenizer's chat template when it has one,
    else a plain ``role: content`` layout."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not isinstance(text, str):  # tokenize=False returns the text; anything else is a tokenizer that ignored it
            raise TypeError(
                f"{type(tokenizer).__name__}.apply_chat_template(tokenize=False) returned {type(text).__name__}, not str"
            )
        return text
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
