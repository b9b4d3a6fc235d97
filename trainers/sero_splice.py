"""The token splice of a SERO oracle row, shared by both trainers (`envkit.trainers.local.sero._oracle_row` and
`envkit.trainers.openrlhf.sero_rows._oracle_row`): each oracle action's ids after the policy prefix, and between
two actions the ids of the observation that followed. Each backend passes its own encoders (the local trainer's
chat-template continuation, OpenRLHF's ``feedback_template``); the splice itself is written once.

Example:
    >>> from types import SimpleNamespace as S
    >>> steps = [S(action="ab", next_observation="x"), S(action="c", next_observation="y")]
    >>> splice_oracle_steps([7], steps, lambda a: [ord(c) for c in a] + [0], lambda act, obs: [ord(obs)])
    ([7, 97, 98, 0, 120, 99, 0], [(1, 4), (5, 7)])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["splice_oracle_steps"]


def splice_oracle_steps(
    prefix: Sequence[int],
    steps: Sequence[Any],
    encode_action: Callable[[str], list[int]],
    encode_observation: Callable[[list[int], str], list[int]],
) -> tuple[list[int], list[tuple[int, int]]]:
    """`prefix` followed by every step's ``encode_action(step.action)`` and, before the next action,
    ``encode_observation(action_ids, step.next_observation)`` (none after the last step).

    Returns:
        The ids, and each action's ``(start, end)`` span in them (the tokens the loss and the l_j read).
    """
    tokens = list(prefix)
    spans: list[tuple[int, int]] = []
    for j, step in enumerate(steps):
        act = encode_action(step.action)
        spans.append((len(tokens), len(tokens) + len(act)))
        tokens += act
        if j + 1 < len(steps):
            tokens += encode_observation(act, step.next_observation)
    return tokens, spans
