"""A free-text space for LLM actions and observations.

`gymnasium.spaces.Text` accepts only alphanumeric characters by default, which rejects almost every real
LLM action (``click[Buy Now]``, ``go to countertop 1``). `FreeText` accepts any ``str`` up to a length that is
valid Unicode text: a lone surrogate (``"\\ud800"``, which ``json.loads`` produces from an escaped request body)
cannot be encoded as UTF-8, so no URL, file, subprocess or HTTP reply could carry it; `why_not` says why a string
is refused, and `envkit.snapshot.SnapshotEnvBase.step` refuses it before the env sees it.

`gymnasium.make_vec(id, vectorization_mode="async")` works with its default ``shared_memory=True``: `FreeText`
registers gymnasium's shared-memory functions (per env: an 8-byte length, then up to 4 bytes of UTF-8 per
character of ``max_length``).
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from types import ModuleType
from typing import Any, overload

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory as _shm

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


# ----- gymnasium's AsyncVectorEnv shared memory (its default): one fixed-size UTF-8 slot per env ------------------
def _slot(space: FreeText) -> int:
    return 8 + 4 * space.max_length  # int64 length + the longest UTF-8 encoding of max_length characters


@_shm.create_shared_memory.register(FreeText)
def _create_free_text_shared_memory(space: FreeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.uint8).char, n * _slot(space))


class _LiveTexts(Sequence[str]):
    """The batch of texts in shared memory, decoded when read.

    gymnasium reads the shared memory once, when the vector env starts, and relies on the result being a live
    view (true of numpy arrays); it returns ``deepcopy(observations)`` after each step. This sequence decodes the
    current bytes on every access, and its deepcopy is a plain tuple of the current strings.
    """

    def __init__(self, data: np.ndarray) -> None:
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(len(self))[i])
        row = self._data[i]
        size = int(row[:8].view(np.int64)[0])
        return row[8 : 8 + size].tobytes().decode("utf-8", "surrogatepass")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, _LiveTexts)) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@_shm.read_from_shared_memory.register(FreeText)
def _read_free_text_from_shared_memory(space: FreeText, shared_memory: Any, n: int = 1) -> _LiveTexts:
    return _LiveTexts(np.frombuffer(shared_memory.get_obj(), dtype=np.uint8).reshape((n, _slot(space))))


@_shm.write_to_shared_memory.register(FreeText)
def _write_free_text_to_shared_memory(space: FreeText, index: int, values: str, shared_memory: Any) -> None:
    raw = values.encode("utf-8", "surrogatepass")
    slot = _slot(space)
    if len(raw) > slot - 8:
        raise ValueError(f"observation of {len(raw)} UTF-8 bytes does not fit the space's {slot - 8}-byte slot")
    dest = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)[index * slot : (index + 1) * slot]
    dest[:8] = np.frombuffer(np.int64(len(raw)).tobytes(), dtype=np.uint8)
    dest[8 : 8 + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
