"""A free-text space for LLM actions and observations.

`gymnasium.spaces.Text` accepts only alphanumeric characters by default, which rejects almost every real
LLM action (``click[Buy Now]``, ``go to countertop 1``). `FreeText` accepts any ``str`` up to a length that is
valid Unicode text: a lone surrogate (``"\\ud800"``, which ``json.loads`` produces from an escaped request body)
cannot be encoded as UTF-8, so no URL, file, subprocess or HTTP reply could carry it; `why_not` says why a string
is refused, and `envkit.snapshot.SnapshotEnvBase.step` refuses it before the env sees it.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


class FreeText(spaces.Space[str]):
    """Any Python string of at most `max_length` characters.

    Args:
        max_length: Longest accepted string (characters).
        seed: Seed for `sample()`.
    """

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        if max_length <= 0:
            raise ValueError(f"FreeText max_length must be positive, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random printable string of 1-32 characters (for fuzzing; real actions come from a policy)."""
        n = int(self.np_random.integers(1, min(32, self.max_length) + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_CHARSET), size=n)
        return "".join(_SAMPLE_CHARSET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return self.why_not(x) is None

    def why_not(self, x: Any) -> str | None:
        """Why `x` is not in the space (None when it is): not a str, too long, or not encodable as UTF-8."""
        if not isinstance(x, str):
            return f"actions are text: expected str, got {type(x).__name__} ({x!r:.80})"
        if len(x) > self.max_length:
            return f"action of {len(x)} characters exceeds the limit of {self.max_length}"
        if not x.isascii():
            try:
                x.encode("utf-8")
            except UnicodeEncodeError as exc:
                return (
                    f"action is not valid Unicode text: {exc.reason} at character {exc.start} "
                    f"({x[max(0, exc.start - 20) : exc.start + 1]!r}); decode model output with errors='replace'"
                )
        return None

    def __repr__(self) -> str:
        return f"FreeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("FreeText", self.max_length))
