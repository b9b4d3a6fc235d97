"""transformers' KV-cache argument across the versions envkit allows (5.15 ... 5.3x).

transformers 5.15 names it ``past_key_values`` (argument of ``forward`` / ``generate``, field of the outputs);
later releases rename it ``cache`` and warn (FutureWarning) on every call that still passes the old name. These
helpers pick the name the loaded model's ``forward`` declares, so calls are warning-free on both.

    >>> cache_kwarg(object())
    'past_key_values'
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # transformers is heavy: the helpers only read a model's class and an output's fields
    from transformers import PreTrainedModel

OLD, NEW = "past_key_values", "cache"


def cache_kwarg(model: PreTrainedModel) -> str:
    """``"cache"`` when ``model.forward`` takes it (newer transformers), else ``"past_key_values"``."""
    forward = getattr(type(model), "forward", None)
    return _name(forward) if forward is not None else OLD


@lru_cache(maxsize=64)
def _name(forward: Any) -> str:
    try:
        params = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return OLD
    return NEW if NEW in params else OLD


def with_cache(model: PreTrainedModel, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model(...)`` / ``model.generate(...)`` keyword arguments."""
    return {cache_kwarg(model): cache}


def output_cache(out: Any) -> Any:
    """The KV cache of a model or generate output, read by the field name that version declares."""
    fields = getattr(type(out), "__dataclass_fields__", {})
    if NEW in fields:
        return getattr(out, NEW)
    return getattr(out, OLD)
