"""The pool contract every env-pool backend shares: a request, its result, the picklable env recipe
(`EnvFactory`), `dispatch` (one request on one env) and the `EnvPool` interface.

The backends sit above it: the local ones in `envkit.pool` (which re-exports these names), the server one in
`envkit.remote.pool` and the fleet one in `envkit.fleet.pool`; `envkit.pool.make_pool` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from envkit.core import jsonable
from envkit.errors import EnvkitError
from envkit.snapshot import snapshot_env

Request = tuple[int, str, tuple[Any, ...], Mapping[str, Any]]
"""(worker index, method, args, kwargs). Methods: reset, step, snapshot, restore, discard, snapshot_step, metadata,
call (``args = (fn, *rest)``: runs ``fn(env, *rest, **kwargs)`` in the worker; `fn` must be a picklable module-level
function, e.g. SERO's oracle continuation), close."""


@dataclass(frozen=True)
class EnvFactory:
    """A picklable recipe for an env: ``envkit.make(env_id, **kwargs)``."""

    env_id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env[Any, Any]:
        from envkit.registration import make

        return make(self.env_id, **dict(self.kwargs))


@dataclass(frozen=True)
class Result:
    """The answer to one request.

    Attributes:
        ok: The call returned.
        value: Its return value (reset/step/restore have JSON-able infos).
        error: What went wrong (traceback text) when not ok.
        crashed: The worker process died; it has been restarted with a fresh env.
    """

    ok: bool
    value: Any = None
    error: str = ""
    crashed: bool = False


def dispatch(env: gym.Env[Any, Any], method: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Run one request on an env (shared by every backend)."""
    if method == "reset":
        obs, info = env.reset(*args, **kwargs)
        return obs, jsonable(info)
    if method == "step":
        obs, reward, term, trunc, info = env.step(*args, **kwargs)
        return obs, float(reward), bool(term), bool(trunc), jsonable(info)
    if method == "snapshot_step":
        snaps = snapshot_env(env)
        snap = snaps.snapshot()
        try:
            obs, reward, term, trunc, info = env.step(*args, **kwargs)
        except BaseException:
            snaps.discard(snap)  # the caller never gets the handle: free it now
            raise
        return snap, (obs, float(reward), bool(term), bool(trunc), jsonable(info))
    if method == "restore":
        obs, info = snapshot_env(env).restore(*args, **kwargs)
        return obs, jsonable(info)
    if method in ("snapshot", "discard"):
        return getattr(env, method)(*args, **kwargs)
    if method == "metadata":
        return dict(getattr(env, "metadata", {}))
    if method == "call":
        fn, *rest = args
        return fn(env, *rest, **kwargs)
    raise EnvkitError(
        f"unknown pool request {method!r}; use reset, step, snapshot_step, snapshot, restore, discard, metadata, call"
    )


class EnvPool(ABC):
    """Common interface of the backends; use as a context manager or call `close()`."""

    size: int

    @abstractmethod
    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        """Run requests (at most one per worker index) concurrently; answers in request order."""

    @abstractmethod
    def close(self) -> None:
        """Stop the workers and close their envs."""

    def call(self, index: int, method: str, *args: Any, **kwargs: Any) -> Result:
        """One request to one worker."""
        return self.call_many([(index, method, args, kwargs)])[0]

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _check(requests: Sequence[Request], size: int) -> None:
        seen: set[int] = set()
        for idx, *_ in requests:
            if not 0 <= idx < size:
                raise IndexError(f"worker index {idx} out of range for a pool of {size}")
            if idx in seen:
                raise ValueError(f"two requests for worker {idx} in one call_many; send them in separate calls")
            seen.add(idx)
