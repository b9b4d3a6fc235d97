"""Parallel env execution: in-process, subprocess workers, and Ray actors.

A pool holds `size` envs built from one picklable `EnvFactory`. `call_many` sends at most one request to each
of several workers and waits for all answers, so env work overlaps across processes while the caller (for
example an LLM policy batching its forward passes) stays in the main process. A worker that dies is restarted
with a fresh env and its request comes back as a crashed `Result`; the other workers carry on.

Example:
    >>> from envkit.pool import EnvFactory, make_pool
    >>> with make_pool(EnvFactory("envkit/Toy-v0"), size=2, backend="inprocess") as pool:
    ...     results = pool.call_many([(0, "reset", (), {"seed": 1}), (1, "reset", (), {"seed": 2})])
    >>> [r.ok for r in results]
    [True, True]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from envkit.errors import EnvkitError, MissingExtraError
from envkit.pool_contract import EnvFactory, EnvPool, Request, Result, dispatch

__all__ = [
    "BACKENDS",
    "WORKER_INDEX_ENV",
    "EnvFactory",
    "EnvPool",
    "InProcessPool",
    "RayPool",
    "Request",
    "Result",
    "SubprocessPool",
    "dispatch",
    "make_pool",
]


class InProcessPool(EnvPool):
    """All envs in this process; requests run one after another (no overhead, no parallelism)."""

    def __init__(self, factory: EnvFactory, size: int):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.factory = factory
        self.size = size
        self.envs = [factory() for _ in range(size)]

    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        self._check(requests, self.size)
        out = []
        for idx, method, args, kwargs in requests:
            try:
                out.append(Result(True, dispatch(self.envs[idx], method, args, kwargs)))
            except Exception:  # an env error ends that episode, not the pool
                out.append(Result(False, error=traceback.format_exc()))
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


#: Set in each subprocess worker to its index: a warning every worker would print alike (a missing data file)
#: is printed by worker 0 only (`envkit.envs.webshop.catalog`), not once per worker.
WORKER_INDEX_ENV = "ENVKIT_WORKER_INDEX"


def _worker_main(conn: Connection, factory: EnvFactory, index: int = 0) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ[WORKER_INDEX_ENV] = str(index)
    try:
        env = factory()
    except Exception:
        conn.send(("fatal", traceback.format_exc()))
        return
    conn.send(("ready", None))
    while True:
        try:
            method, args, kwargs = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if method == "close":
            break
        try:
            conn.send(("ok", dispatch(env, method, args, kwargs)))
        except Exception:
            conn.send(("err", traceback.format_exc()))
    env.close()


def _main_guard_hint(ctx: Any) -> str:
    """Why a spawned worker dies at start when the user's script has no ``__main__`` guard, or ``""``."""
    if ctx.get_start_method() == "fork":
        return ""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    try:
        guarded = path is None or "__main__" in Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        guarded = True
    if guarded:
        return ""
    return (
        f'. Your script {path} has no `if __name__ == "__main__":` guard: each worker process re-imports it '
        f"({ctx.get_start_method()} start method), runs its top level again and dies starting a pool of its own. "
        "Put the code that starts the run under that guard"
    )


class SubprocessPool(EnvPool):
    """One env per worker process (multiprocessing, `spawn` by default); crashed workers are restarted."""

    def __init__(self, factory: EnvFactory, size: int, *, start_method: str = "spawn", start_timeout: float = 120):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.factory = factory
        self.size = size
        self.restarts = 0
        self._ctx: Any = mp.get_context(start_method)
        self._start_timeout = start_timeout
        self._workers: list[tuple[Any, Connection]] = [self._spawn(i) for i in range(size)]
        for i in range(size):
            self._await_ready(i)

    def _spawn(self, index: int) -> tuple[Any, Connection]:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker_main, args=(child, self.factory, index), daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def _await_ready(self, i: int) -> None:
        proc, conn = self._workers[i]
        if not conn.poll(self._start_timeout):
            raise EnvkitError(f"pool worker {i} did not start within {self._start_timeout}s")
        try:
            status, payload = conn.recv()
        except EOFError as exc:
            raise EnvkitError(
                f"pool worker {i} died while building its env (exit code {proc.exitcode}){_main_guard_hint(self._ctx)}"
            ) from exc
        if status == "fatal":
            if "MissingExtraError" in payload:
                raise MissingExtraError(payload.strip().splitlines()[-1])
            raise EnvkitError(f"pool worker {i} could not build its env:\n{payload}")

    def _restart(self, i: int) -> None:
        proc, conn = self._workers[i]
        conn.close()
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)
        self._workers[i] = self._spawn(i)
        self._await_ready(i)
        self.restarts += 1

    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        self._check(requests, self.size)
        sent: list[bool] = []
        for idx, method, args, kwargs in requests:
            try:
                self._workers[idx][1].send((method, tuple(args), dict(kwargs)))
                sent.append(True)
            except (BrokenPipeError, OSError):
                sent.append(False)
        out: list[Result] = []
        for (idx, method, _a, _k), was_sent in zip(requests, sent, strict=True):
            proc, conn = self._workers[idx]
            try:
                if not was_sent:
                    raise EOFError
                status, payload = conn.recv()
            except (EOFError, OSError, ConnectionResetError):
                proc.join(timeout=5)
                code = proc.exitcode
                self._restart(idx)
                out.append(Result(False, error=f"worker {idx} died during {method!r} (exit code {code})", crashed=True))
                continue
            out.append(Result(True, payload) if status == "ok" else Result(False, error=payload))
        return out

    def close(self) -> None:
        for _proc, conn in self._workers:
            try:
                conn.send(("close", (), {}))
            except (BrokenPipeError, OSError):
                pass
        for proc, conn in self._workers:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
            conn.close()
        self._workers = []


class RayPool(EnvPool):
    """One env per Ray actor, for many machines (``pip install 'envkit[ray]'``); dead actors are recreated.

    Uses Ray as already initialised by the caller; else ``ray.init(**ray_init)`` connects to a running cluster
    (``RAY_ADDRESS``) or starts a local one, which `close()` shuts down again.
    """

    def __init__(
        self, factory: EnvFactory, size: int, *, num_cpus: float = 1.0, ray_init: Mapping[str, Any] | None = None
    ):
        from envkit.errors import require

        ray = require("ray", "ray", what="the Ray env pool")
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self._owns_ray = not ray.is_initialized()  # a Ray started here is shut down by close()
        if self._owns_ray:
            ray.init(**{"include_dashboard": False, "log_to_driver": False, **dict(ray_init or {})})
        self._ray = ray
        self.factory = factory
        self.size = size
        self.restarts = 0

        @ray.remote(num_cpus=num_cpus, max_restarts=0)
        class _EnvActor:
            def __init__(self, factory: EnvFactory):
                self.env = factory()

            def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                return dispatch(self.env, method, args, kwargs)

            def close(self) -> None:
                self.env.close()

        self._actor_cls = _EnvActor
        self._actors = [_EnvActor.remote(factory) for _ in range(size)]  # type: ignore[attr-defined]

    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        self._check(requests, self.size)
        ray = self._ray
        futures = [self._actors[idx].call.remote(m, tuple(a), dict(k)) for idx, m, a, k in requests]
        out: list[Result] = []
        for (idx, method, _a, _k), fut in zip(requests, futures, strict=True):
            try:
                out.append(Result(True, ray.get(fut)))
            except ray.exceptions.RayActorError as exc:
                self._actors[idx] = self._actor_cls.remote(self.factory)  # type: ignore[attr-defined]
                self.restarts += 1
                out.append(Result(False, error=f"actor {idx} died during {method!r}: {exc}", crashed=True))
            except ray.exceptions.RayTaskError as exc:
                out.append(Result(False, error=str(exc)))
        return out

    def close(self) -> None:
        for actor in self._actors:
            try:
                self._ray.get(actor.close.remote(), timeout=30)
            except Exception:  # best effort: the actor may be gone already
                pass
            self._ray.kill(actor)
        self._actors = []
        if self._owns_ray:
            self._ray.shutdown()


BACKENDS: dict[str, type[EnvPool]] = {"inprocess": InProcessPool, "subprocess": SubprocessPool, "ray": RayPool}


def make_pool(factory: EnvFactory, size: int = 1, backend: str = "subprocess", **kwargs: Any) -> EnvPool:
    """Build a pool; `backend` is one of ``inprocess``, ``subprocess``, ``ray``, ``fleet``, ``remote``.

    ``fleet``: sessions on a Ray env fleet (`envkit.fleet.pool.FleetPool`; ``fleet=`` a `FleetConfig`, a running
    `Fleet`, a dict of its fields or a resource name).

    A factory with ``remote=URL`` in its kwargs (envs on an ``envkit-serve`` server) always gets the ``remote``
    backend: `envkit.remote.RemotePool`, one session and one thread per worker.
    """
    if backend == "remote" or "remote" in factory.kwargs:
        from envkit.remote.pool import RemotePool

        if "remote" not in factory.kwargs:
            raise ValueError("the remote backend needs the server's URL: EnvFactory(env_id, {'remote': URL})")
        return RemotePool(factory, size)
    if backend == "fleet":
        from envkit.fleet.pool import FleetPool

        return FleetPool(factory, size, **kwargs)
    if backend not in BACKENDS:
        raise ValueError(f"unknown pool backend {backend!r}; choose one of {', '.join(BACKENDS)}, fleet, remote")
    cls: Any = BACKENDS[backend]
    pool: EnvPool = cls(factory, size, **kwargs)
    return pool
