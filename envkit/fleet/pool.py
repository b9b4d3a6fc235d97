"""`FleetPool`: the `envkit.pool.EnvPool` interface over env-fleet sessions, so `envkit.rollout.rollout`, SERO's
`run_continuations` and ``envkit-oracle rollout --backend fleet`` run on a Ray fleet unchanged.

Worker index i is one session on some fleet actor. Requests to different sessions run concurrently (one actor
serves many). A ``restore`` of a `FleetSnapshot` runs on the actor that holds it (the worker's session moves
there first). An actor that dies answers its requests as crashed `Result`s with the reason (those episodes end,
the others carry on); its workers get sessions on the replacement actor, and its snapshots fail to restore with
`envkit.errors.SnapshotLostError`.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

from envkit.errors import FleetActorLostError
from envkit.fleet.client import Fleet, SessionRef
from envkit.fleet.config import FleetConfig
from envkit.fleet.handles import FleetSnapshot
from envkit.pool_contract import EnvFactory, EnvPool, Request, Result


class FleetPool(EnvPool):
    """`size` sessions of `factory` on a fleet (a `Fleet`, or a `FleetConfig` / dict / resource name to start one
    that `close()` stops)."""

    def __init__(self, factory: EnvFactory, size: int, *, fleet: Fleet | FleetConfig | dict[str, Any] | str = ""):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self._owns = not isinstance(fleet, Fleet)
        self.fleet = fleet if isinstance(fleet, Fleet) else Fleet(FleetConfig.coerce(fleet or FleetConfig()))
        if size > self.fleet.cfg.capacity:
            self.close()
            raise ValueError(
                f"a fleet pool of {size} sessions does not fit a fleet of {self.fleet.cfg.actors} actors x "
                f"{self.fleet.cfg.sessions_per_actor} sessions; raise FleetConfig.actors or sessions_per_actor"
            )
        self.factory = factory
        self.size = size
        self.restarts = 0
        n = self.fleet.cfg.actors
        per = [size // n + (i < size % n) for i in range(n)]  # spread evenly, one round trip per actor
        opened = [self.fleet.open_many(factory, k, slot=i) if k else [] for i, k in enumerate(per)]
        self.refs: list[SessionRef] = [opened[i % n][i // n] for i in range(size)]  # neighbours on different actors

    def call_many(self, requests: Sequence[Request]) -> list[Result]:
        self._check(requests, self.size)
        sent: list[Any] = []
        for idx, method, args, kwargs in requests:
            try:
                if method == "restore" and args and isinstance(args[0], FleetSnapshot):
                    self._move_to(idx, self.fleet.holder(args[0]).index)  # restore where the snapshot lives
                sent.append(self.fleet.submit(self.refs[idx], method, tuple(args), dict(kwargs)))
            except Exception as exc:  # answered below, in request order
                sent.append(exc)
        out: list[Result] = []
        for (idx, method, _a, _k), sub in zip(requests, sent, strict=True):
            try:
                if isinstance(sub, BaseException):
                    raise sub
                out.append(Result(True, self.fleet.result(sub, method)))
            except FleetActorLostError as exc:
                self.restarts += 1
                self.refs[idx] = self.fleet.open(self.factory)  # a fresh env on a live actor
                out.append(Result(False, error=f"worker {idx}: {exc}", crashed=True))
            except Exception:  # an env error ends that episode, not the pool
                out.append(Result(False, error=traceback.format_exc()))
        return out

    def _move_to(self, idx: int, slot: int) -> None:
        if self.refs[idx].slot != slot or self.fleet.slot_of(self.refs[idx].incarnation) is None:
            self.fleet.close_session(self.refs[idx])
            self.refs[idx] = self.fleet.open(self.factory, slot=slot)

    def where(self, idx: int) -> SessionRef:
        """The session of worker `idx` (its actor slot, incarnation, session id)."""
        return self.refs[idx]

    def close(self) -> None:
        if self._owns:
            self.fleet.close()
        else:
            for ref in getattr(self, "refs", []):
                self.fleet.close_session(ref)
        self.refs = []
