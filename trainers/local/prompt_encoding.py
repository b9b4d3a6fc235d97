"""Prompt encoding for the local trainer: raw prompts or the tokenizer's chat template, with optional ICL demos.

Prompts are encoded ONCE to token ids; everything downstream (sampling, the loss, multi-turn continuation)
works on those ids and never re-tokenises them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def encode_text(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of `text` without special tokens."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    *,
    raw: bool,
    demos: Sequence[tuple[str, str]] = (),
    system: str | None = None,
) -> list[int]:
    """Token ids of a prompt.

    Args:
        tokenizer: The model's tokenizer.
        text: The prompt.
        raw: Feed the text as-is (BOS first when the tokenizer has one); False: use the chat template when the
            tokenizer has one.
        demos: (prompt, answer) pairs shown before the prompt (XRPO's ICL prefix): in raw mode as
            ``prompt answer <eos>`` runs, in chat mode as earlier user/assistant turns.
        system: Optional system message (chat mode).
    """
    if raw or not getattr(tokenizer, "chat_template", None):
        ids = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
        for prompt, answer in demos:
            ids += encode_text(tokenizer, prompt) + encode_text(tokenizer, answer) + [tokenizer.eos_token_id]
        return ids + encode_text(tokenizer, text)
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    for prompt, answer in demos:
        messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": text})
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return encode_text(tokenizer, str(rendered))  # tokenize=False: the rendered text


def decode(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> str:
    """Response text without special tokens."""
    return str(tokenizer.decode(list(ids), skip_special_tokens=True))
