"""Who an env's native resources are charged to: the *owner* (tenant) of the code that builds and drives it.

Envs that hold resources outside Python (the SWE env's overlay layers on disk) charge them to an owner and keep
per-owner budgets, so that one tenant cannot take what another's honest episodes need. A server that runs envs
for several clients (`envkit.serve`) names the owner of each session's thread with `set_owner`; an env reads
`current_owner` when it is built. Outside a server nothing is set and each env is its own owner.

Example:
    >>> set_owner("alice")
    >>> current_owner()
    'alice'
    >>> set_owner(None); current_owner() is None
    True
"""

from __future__ import annotations

import threading

__all__ = ["current_owner", "set_owner"]

_local = threading.local()


def set_owner(owner: str | None) -> None:
    """Name the owner of everything this thread builds from now on (None: nobody in particular)."""
    _local.owner = owner


def current_owner() -> str | None:
    """The owner this thread's envs are charged to, or None."""
    return getattr(_local, "owner", None)
