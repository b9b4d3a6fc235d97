"""`RemotePool`: a pool of `RemoteEnv` sessions on env servers, driven by threads of this process.

Remote env work is network-bound, so one thread per session overlaps it (no worker processes). It answers the
same requests as every `envkit.pool` backend, so `rollout`, `branch`, SERO and ``envkit-oracle rollout
--workers N`` run unchanged; `make_pool` picks it whenever the env factory has ``remote=URL``. An error of one
env ends that episode, as in the other backends; a *lost server* (`EnvServerError`) instead stops the whole call
with that error, so that a run stops cleanly (its journal holds only finished tasks) and resumes when the server
is back, instead of recording every later episode as failed.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from envkit.pool_contract import EnvFactory, EnvPool, Request, Result, dispatch
from envkit.remote.client import RemoteEnv
from envkit.remote.transport import EnvServerError


def _run(env: Any, method: str, args: Sequence[Any], kwargs: Any) -> Result:
    try:
        if method == "snapshot_step" and isinstance(env, RemoteEnv):
            return Result(True, env.snapshot_step(*args, **kwargs))  # one round trip instead of two
        return Result(True, dispatch(env, method, args, kwargs))
    except EnvServerError:
        raise
    except Exception:  # an env error ends that episode, not the pool
        return Result(False, error=traceback.format_exc())


class RemotePool(EnvPool):
    """`size` sessions of ``factory`` (its kwargs hold ``remote=URL``) on the server, one thread each."""

    def __init__(self, factory: EnvFactory, size: int, **_ignored: Any):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.factory = factory
        self.size = size
        self.restarts = 0
        self.envs: list[Any] = [factory() for _ in range(size)]
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="envkit-remote")

    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        self._check(requests, self.size)
        futures = [self._threads.submit(_run, self.envs[i], m, a, k) for i, m, a, k in requests]
        out: list[Result] = []
        lost: EnvServerError | None = None
        for fut in futures:
            try:
                out.append(fut.result())
            except EnvServerError as exc:
                lost = lost or exc
                out.append(Result(False, error=str(exc), crashed=True))
        # A continuation job keeps its own errors as reasons; a lost server shows on the env instead.
        broken = [self.envs[i].server_error for i, *_ in requests if getattr(self.envs[i], "server_error", "")]
        if lost is not None or broken:
            raise lost or EnvServerError(broken[0])
        return out

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # best effort: the server may be gone
                pass
        self.envs = []
        self._threads.shutdown(wait=False)
