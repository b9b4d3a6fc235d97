"""The ``envkit-serve`` application: OpenEnv's server for one envkit id, with sessions and snapshots.

`build_app` starts from openenv-core's ``create_app(env_factory, EnvkitAction, EnvkitObservation, ...)`` and
keeps what builds no env (``/health``, ``/schema``, the API docs); it replaces ``/ws`` with one that speaks the
same OpenEnv messages (``reset``, ``step``, ``state``, ``close``) plus envkit's (``snapshot``,
``snapshot_step``, ``restore``, ``discard``, ``oracle``), and OpenEnv's stateless ``/reset`` ``/step``
``/state`` ``/metadata`` with versions whose env (``/reset`` only) is a session of the table for the one
request. OpenEnv's ``/mcp`` (HTTP and WebSocket) is removed: envkit envs expose no MCP tools, and its sessions
lived outside the table. Stateful HTTP sessions live under ``/envkit/sessions``. Every env belongs to one
`SessionTable` (limit, idle expiry, held snapshots, snapshot budget); `envkit.serve.limits` bounds requests
and connections; `envkit.serve.paths` keeps server paths out of the answers. docs/interop.md describes the
wire protocol, docs/security.md what the server defends against.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_app
from starlette.routing import BaseRoute, Route

from envkit import errors as E
from envkit.capability import snapshot_capability
from envkit.core import jsonable
from envkit.serve.budget import SnapshotBudget
from envkit.serve.limits import OWNER_SCOPE, Guard, ServeLimits
from envkit.serve.models import EnvkitAction, EnvkitEnvironment, EnvkitObservation
from envkit.serve.paths import PathScrubber
from envkit.serve.sessions import Session, SessionLostError, SessionTable
from envkit.serve.wire import BODIES, OpenEnvStep, ResetBody, error_body, parse_off_loop, ws_error

PROTOCOL = 2  # 2: HTTP sessions need their key (Envkit-Session-Key); /mcp removed
KEY_HEADER = "envkit-session-key"
#: openenv-core's routes kept as they are (they build no env).
KEPT = frozenset({"/health", "/schema", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


def _obs(o: EnvkitObservation, **extra: Any) -> dict[str, Any]:
    return {"observation": o.model_dump(exclude={"reward", "done", "metadata"}), "reward": o.reward, "done": o.done,
            **extra}  # fmt: skip


class Server:
    """What the routes share: the env id, the session table, the settings."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], table: SessionTable, *, oracle: bool):
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.table = table
        self.oracle = oracle
        self.id = uuid.uuid4().hex
        self.scrub = PathScrubber()
        probe = table.factory()  # fail at start, not at the first session, when the env cannot be built
        try:
            u = probe.env.unwrapped
            self.metadata = jsonable(dict(getattr(probe.env, "metadata", None) or u.metadata))
            # the capability travels as its fields; the client rebuilds it (envkit.remote.client)
            self.metadata["snapshot_capability"] = dataclasses.asdict(snapshot_capability(probe.env))
            self.spaces = {
                "max_action_length": int(getattr(u.action_space, "max_length", 1 << 16)),
                "max_observation_length": int(getattr(u.observation_space, "max_length", 1 << 22)),
            }
            self.evaluation = bool(getattr(u, "evaluation", False))
            self.openenv_metadata = probe.get_metadata().model_dump()
        finally:
            probe.close()
        self._reaper: asyncio.Task[None] | None = None

    def info(self) -> dict[str, Any]:
        """The server's settings and counts, scrubbed like every answer (env kwargs may name server paths)."""
        t, b = self.table, self.table.budget
        kinds = [s.kind for s in (*t.sessions.values(), *t.closing.values())]
        out: dict[str, Any] = self.scrub({
            "protocol": PROTOCOL, "server": self.id, "env_id": self.env_id, "env_kwargs": self.env_kwargs,
            "metadata": self.metadata, "evaluation": self.evaluation, "oracle": self.oracle, **self.spaces,
            "sessions": t.held(), "sessions_closing": len(t.closing), "max_sessions": t.max_sessions, "idle_timeout_s": t.idle_timeout,
            "sessions_by_kind": {k: kinds.count(k) for k in ("http", "ws", "oneshot")},
            "snapshots": len(t.snapshots), "snapshot_bytes": b.bytes, "max_snapshots": b.per_session,
            "max_snapshots_total": b.total, "max_snapshot_bytes": b.max_bytes, "max_snapshot_bytes_per_session": b.per_session_bytes, "expired_sessions": t.expired,
            "owners": len(t.owners), "max_sessions_per_owner": t.max_sessions_per_owner, "max_snapshot_bytes_per_owner": b.per_owner_bytes,
        })  # fmt: skip
        return out

    def error(self, exc: BaseException) -> tuple[int, dict[str, Any]]:
        status, body = error_body(exc)
        body["error"]["message"] = self.scrub.text(body["error"]["message"])
        return status, body

    async def open(self, kind: str, owner: str | None = "default") -> Session:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self.table.reap())
        return await self.table.open(kind, owner or "default")

    async def handle(self, s: Session, op: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """Run one op of session `s` (shared by HTTP and the WebSocket); the answer carries no server path."""
        if op not in BODIES:
            raise ValueError(f"unknown operation {op!r}; use one of {', '.join(BODIES)}")
        body: Any = BODIES[op].model_validate(dict(data))
        out: dict[str, Any] = self.scrub(await self._run(s, op, body))
        return out

    async def _run(self, s: Session, op: str, body: Any) -> dict[str, Any]:
        env, t = s.env, self.table
        if op == "reset":
            return _obs(await t.run(s, functools.partial(env.reset, body.seed, body.episode_id, body.options)))
        if op == "step":
            return _obs(await t.run(s, env.step, body.action))
        if op == "snapshot":
            handle, _ = await t.snapshot(s)
            return {"handle": handle, "kind": self.metadata.get("snapshot", "native")}
        if op == "snapshot_step":
            handle, o = await t.snapshot(s, body.action)
            return _obs(o, snapshot={"handle": handle, "kind": self.metadata.get("snapshot", "native")})
        if op == "restore":
            _, snap = t.lookup(body.handle)

            def restore() -> tuple[EnvkitObservation, str]:
                return env.restore(snap), env.last_restore_kind

            o, kind = await t.run(s, restore)
            return _obs(o, restored_by=kind)
        if op == "discard":
            await t.discard(s, body.handle)
            return {"discarded": body.handle}
        if op == "oracle":
            if not self.oracle:
                raise E.EnvkitError(
                    "this server does not run oracles (they read privileged state, training only); start it with "
                    "envkit-serve --oracle"
                )
            out: dict[str, Any] = await t.run(s, env.run_oracle, body.max_steps, body.oracle_kwargs)
            return out
        return env.state.model_dump()  # "state"


def build_app(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = 64,
    idle_timeout: float | None = 600.0,
    max_snapshots: int = 10_000,
    max_snapshots_total: int = 100_000,
    max_snapshot_mb: int = 4096,
    max_snapshot_mb_per_session: int = 0,
    token: str | None = None,
    oracle: bool = False,
    limits: ServeLimits | None = None,
    state_keys: bool = False,
    owner_tokens: Mapping[str, str] | None = None,
    max_sessions_per_owner: int = 0,
    max_snapshot_mb_per_owner: int = 0,
) -> Any:
    """The ASGI app serving `env_id` (see the module docstring); run it with `envkit.serve.limits.run`
    (``envkit-serve`` does), which adds the header deadline and connection cap that no ASGI app can.
    ``state_keys``: send ``info["state_key"]`` (training only; dropped by default).
    ``max_snapshot_mb_per_session``: each session's share of the snapshot bytes (0: ``max_snapshot_mb /
    max_sessions``, so that no session can take what another's episode needs).
    ``owner_tokens``: owner name -> that owner's bearer token (besides or instead of `token`, whose holder is the
    owner ``"default"``); each owner holds at most ``max_sessions_per_owner`` sessions and
    ``max_snapshot_mb_per_owner`` of snapshots (0: the server's total divided by the number of owners)."""
    limits = limits or ServeLimits()
    factory = functools.partial(EnvkitEnvironment, env_id, dict(env_kwargs or {}), state_keys=state_keys)
    owners = tuple(sorted({*(["default"] if token or not owner_tokens else []), *(owner_tokens or {})}))
    share = (max_snapshot_mb_per_session << 20) or max(1 << 20, (max_snapshot_mb << 20) // max_sessions)
    per_owner = (max_snapshot_mb_per_owner << 20) or max(1 << 20, (max_snapshot_mb << 20) // len(owners))
    budget = SnapshotBudget(max_snapshots, max_snapshots_total, max_snapshot_mb << 20, share, per_owner)
    table = SessionTable(
        factory,
        max_sessions=max_sessions,
        idle_timeout=idle_timeout,
        budget=budget,
        max_sessions_per_owner=max_sessions_per_owner or max(1, max_sessions // len(owners)),
        owners=owners,
    )
    server = Server(env_id, env_kwargs or {}, table, oracle=oracle)
    app: FastAPI = create_app(
        factory, EnvkitAction, EnvkitObservation, env_name=env_id, max_concurrent_envs=max_sessions
    )
    app.router.routes[:] = [r for r in app.router.routes if _kept(r)]
    app.state.envkit = server

    def answer(exc: BaseException) -> JSONResponse:
        status, body = server.error(exc)
        return JSONResponse(body, status)

    @app.exception_handler(Exception)
    async def _errors(_request: Request, exc: Exception) -> JSONResponse:
        return answer(exc)

    @app.get("/envkit/info")
    async def envkit_info() -> dict[str, Any]:
        return server.info()

    @app.post("/envkit/sessions")
    async def open_session(request: Request) -> JSONResponse:
        try:
            s = await server.open("http", request.scope.get(OWNER_SCOPE))
        except Exception as exc:
            return answer(exc)
        return JSONResponse({"session_id": s.id, "session_key": s.key})

    @app.delete("/envkit/sessions/{sid}")
    async def close_session(sid: str, request: Request) -> JSONResponse:
        try:
            table.get(sid, request.headers.get(KEY_HEADER))
        except Exception as exc:
            return answer(exc)
        await table.close(sid)
        return JSONResponse({"closed": sid})

    @app.post("/envkit/sessions/{sid}/{op}")
    async def session_op(sid: str, op: str, request: Request) -> JSONResponse:
        try:
            s = table.get(sid, request.headers.get(KEY_HEADER))
            if s.owner != (request.scope.get(OWNER_SCOPE) or "default"):
                raise PermissionError("this session belongs to another owner: use the token it was opened with")
            out = await server.handle(s, op, await parse_off_loop(await request.body()))
        except Exception as exc:
            return answer(exc)
        return JSONResponse(out)

    # OpenEnv's stateless HTTP: a fresh env per request, so only /reset builds one (a session of the table).
    @app.post("/reset")
    async def stateless_reset(request: Request) -> JSONResponse:
        try:
            body = ResetBody.model_validate(await parse_off_loop(await request.body()))
            s = await server.open("oneshot", request.scope.get(OWNER_SCOPE))
        except Exception as exc:
            return answer(exc)
        try:
            return JSONResponse(await server.handle(s, "reset", body.model_dump()))
        except Exception as exc:
            return answer(exc)
        finally:
            await table.close(s.id)

    @app.post("/step")
    async def stateless_step(request: Request) -> JSONResponse:
        try:
            OpenEnvStep.model_validate(await parse_off_loop(await request.body()))
            raise E.ResetNeededError(
                "OpenEnv's stateless POST /step runs on a fresh env, which needs a reset first: play episodes over "
                "/ws or /envkit/sessions (docs/interop.md)"
            )
        except Exception as exc:
            return answer(exc)

    @app.get("/state")
    async def stateless_state() -> dict[str, Any]:
        return {"episode_id": None, "step_count": 0, "env_id": env_id}  # a fresh env's state: no env needed

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        return server.openenv_metadata

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            s = await server.open("ws", websocket.scope.get(OWNER_SCOPE))
        except Exception as exc:
            status, body = server.error(exc)
            await websocket.send_text(json.dumps({"type": "error", "data": ws_error(body, status)}))
            await websocket.close(code=1013 if status == 503 else 1011)
            return
        try:
            await _ws_session(websocket, server, s)
        finally:
            await table.close(s.id)
            try:
                await websocket.close()
            except (RuntimeError, WebSocketDisconnect):  # the client closed first
                pass

    async def shutdown() -> None:  # SIGTERM / SIGINT: uvicorn's graceful shutdown ends in lifespan.shutdown
        await table.close_all()
        print(f"envkit-serve: shut down; every session's env closed ({table.expired} had expired)", flush=True)

    return Guard(app, token, limits, on_shutdown=shutdown, owners=owner_tokens)


def _kept(route: BaseRoute) -> bool:
    return isinstance(route, Route) and route.path in KEPT


async def _ws_session(websocket: WebSocket, server: Server, s: Session) -> None:
    """Serve the WebSocket session `s` until the client closes, goes quiet past the idle timeout, or it expires."""
    idle = server.table.idle_timeout
    while True:
        try:
            msg = await asyncio.wait_for(websocket.receive(), idle)
        except TimeoutError:
            await websocket.close(code=1001, reason=f"session idle for {idle} s")
            return
        if msg["type"] == "websocket.disconnect":
            return
        try:
            text = msg.get("text")
            if text is None:
                text = (msg.get("bytes") or b"").decode("utf-8")
            data0 = await parse_off_loop(text)
            kind = data0.get("type", "")
            if kind == "close":
                return
            data = data0.get("data") or {}
            if not isinstance(data, dict):
                raise ValueError("a message must be a JSON object {'type': ..., 'data': {...}}")
            if kind == "step" and "text" in data and "action" not in data:  # OpenEnv: data is the action
                data = {"action": data["text"], **{k: v for k, v in data.items() if k != "text"}}
            out = await server.handle(server.table.get(s.id, kind="ws"), str(kind), data)  # expired: refused
            reply = {"type": "state" if kind == "state" else "observation" if "observation" in out else kind,
                     "data": out}  # fmt: skip
        except Exception as exc:
            if isinstance(exc, UnicodeDecodeError):
                exc = ValueError(f"a binary message must be UTF-8 JSON ({exc.reason})")
            status, body = server.error(exc)
            reply = {"type": "error", "data": ws_error(body, status)}
            if isinstance(exc, SessionLostError):
                await websocket.send_text(json.dumps(reply))
                await websocket.close(code=1001, reason="session expired")
                return
        await websocket.send_text(json.dumps(reply))
