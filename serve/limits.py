"""What ``envkit-serve`` holds per request and per connection, and how it enforces it.

`ServeLimits` is the one place the limits and their defaults live. `Guard` (ASGI middleware) checks the bearer
token and counts the bytes of a request body *as they arrive* (a chunked body has no Content-Length to trust),
within a body read deadline; WebSocket messages are counted too (uvicorn's ``ws_max_size`` refuses them while
their frames arrive, `Guard` again for a server without it). `deadline_protocol` is uvicorn's h11 protocol with
a header read deadline (uvicorn has none: a connection that sends half a request line is held forever) and a
cap on open connections. `run` starts uvicorn with all of it (``envkit-serve`` does).
"""

from __future__ import annotations

import asyncio
import hmac
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServeLimits:
    """Per-request and per-connection limits of an ``envkit-serve`` process.

    Attributes:
        max_body: Most bytes of one HTTP request body or one WebSocket message (413 / close code 1009 beyond).
        header_timeout: Seconds a connection may take from its first byte (or from opening) to the end of a
            request's headers (closed after, with 408).
        body_timeout: Seconds a request may take to send its whole body once its headers are in (408 after).
        keep_alive: Seconds an idle keep-alive HTTP connection stays open between requests.
        max_connections: Most open connections (HTTP and WebSocket); a request beyond it gets 503 and a new
            connection beyond twice it is closed at once.
        max_header_bytes: Most bytes of a request line plus headers (h11's incomplete-event limit; 400 beyond).
        max_unauthenticated: With a token, most open connections that have not shown it yet (a new one beyond
            closes the oldest of them): their own share, so they cannot starve token holders.
        shutdown_timeout: Seconds that SIGTERM / SIGINT waits for open requests and then for every session's
            env to close (cleanup of its sandboxes, mounts, cgroups) before the process exits anyway.
    """

    max_body: int = 8 << 20
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 75.0
    max_connections: int = 256
    max_header_bytes: int = 64 << 10
    max_unauthenticated: int = 32
    shutdown_timeout: float = 30.0

    def __post_init__(self) -> None:
        for name in (
            "max_body", "header_timeout", "body_timeout", "keep_alive", "max_connections", "max_header_bytes",
            "shutdown_timeout", "max_unauthenticated",
        ):  # fmt: skip
            if not getattr(self, name) > 0:
                raise ValueError(f"ServeLimits.{name} must be > 0, got {getattr(self, name)!r}")


def _error(status: int, kind: str, msg: str, close: bool = False) -> Any:
    from starlette.responses import JSONResponse

    headers = {"connection": "close"} if close else None
    return JSONResponse({"error": {"type": kind, "message": msg}}, status, headers=headers)


#: Where `Guard` leaves the owner a request authenticated as (``request.scope[OWNER_SCOPE]``).
OWNER_SCOPE = "envkit.owner"


def owner_of(headers: Mapping[str, str], tokens: Mapping[str, str]) -> str | None:
    """The owner whose token the request carries (`tokens`: owner -> token; none: every request is
    ``"default"``), or None. Every token is compared (constant time), so timing does not tell which matched."""
    if not tokens:
        return "default"
    got = headers.get("authorization", "")
    sent = got[7:].encode() if got.startswith("Bearer ") else b""
    found = None
    for owner, token in tokens.items():
        if hmac.compare_digest(sent, token.encode()) and sent:
            found = owner
    return found


class Guard:
    """ASGI middleware: bearer token on every route but ``/health`` (which owner sent it goes into
    ``scope[OWNER_SCOPE]``); body and message sizes counted as received.

    `token` is the one shared token (owner ``"default"``); `owners` maps owner names to their own tokens
    (``--owner-tokens``): both may be given, and any of them authorises.
    """

    def __init__(
        self,
        app: Any,
        token: str | None,
        limits: ServeLimits,
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
        owners: Mapping[str, str] | None = None,
    ):
        self.app, self.limits, self.on_shutdown = app, limits, on_shutdown
        self.tokens = {**({"default": token} if token else {}), **dict(owners or {})}
        self.token = token or next(iter(self.tokens.values()), None)  # truthy: token mode (`run`)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" and self.on_shutdown is not None:
            await self.app(scope, self._shutdown_first(receive), send)
            return
        if scope["type"] not in ("http", "websocket") or scope.get("path") == "/health":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        owner = owner_of(headers, self.tokens)
        scope[OWNER_SCOPE] = owner
        if owner is None:
            if scope["type"] == "websocket":
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 1008, "reason": "bad or missing bearer token"})
                return
            msg = "missing or wrong bearer token: send 'Authorization: Bearer <token>' (envkit-serve --token)"
            await _error(401, "PermissionError", msg)(scope, receive, send)
            return
        if self.token:
            authenticated(scope.get("client"))
        if scope["type"] == "websocket":
            await self.app(scope, self._counted_ws(receive, send), send)
            return
        body = await self._read_body(headers, scope, receive, send)
        if body is None:
            return
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # http.disconnect, when the client goes

        await self.app(scope, replay, send)

    async def _read_body(self, headers: Mapping[str, str], scope: Any, receive: Any, send: Any) -> bytes | None:
        """The whole body, or None after answering 413 / 408 / 400 (or when the client went away)."""
        cap = self.limits.max_body
        declared = headers.get("content-length", "")
        if declared and (not declared.isdigit() or int(declared) > cap):
            msg = f"request body of {declared} bytes exceeds the server's limit of {cap} (envkit-serve --max-body)"
            await _error(413, "ValueError", msg, close=True)(scope, receive, send)
            return None
        body = bytearray()
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                while True:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return None
                    body += msg.get("body", b"")
                    if len(body) > cap:
                        why = f"request body exceeds the server's limit of {cap} bytes (counted as received)"
                        await _error(413, "ValueError", why, close=True)(scope, receive, send)
                        return None
                    if not msg.get("more_body", False):
                        return bytes(body)
        except TimeoutError:
            why = f"the request body did not arrive within {self.limits.body_timeout} s (envkit-serve --body-timeout)"
            await _error(408, "TimeoutError", why, close=True)(scope, receive, send)
            return None

    def _shutdown_first(self, receive: Any) -> Any:
        """`receive` of the lifespan scope, running `on_shutdown` (within ``shutdown_timeout``) before the app
        sees ``lifespan.shutdown``: uvicorn's SIGTERM / SIGINT handling ends there, so cleanup runs."""

        async def wrapped() -> Any:
            msg = await receive()
            if msg.get("type") == "lifespan.shutdown" and self.on_shutdown is not None:
                try:
                    async with asyncio.timeout(self.limits.shutdown_timeout):
                        await self.on_shutdown()
                except TimeoutError:
                    print(
                        f"envkit-serve: cleanup did not finish within {self.limits.shutdown_timeout} s "
                        "(--shutdown-timeout); exiting anyway",
                        flush=True,
                    )
            return msg

        return wrapped

    def _counted_ws(self, receive: Any, send: Any) -> Any:
        cap = self.limits.max_body

        async def counted() -> Any:
            msg = await receive()
            if msg["type"] == "websocket.receive":
                n = len(msg.get("bytes") or b"") + len((msg.get("text") or "").encode("utf-8", "surrogatepass"))
                if n > cap:
                    await send({"type": "websocket.close", "code": 1009, "reason": f"message over {cap} bytes"})
                    return {"type": "websocket.disconnect", "code": 1009}
            return msg

        return counted


#: Connections that have not (yet) shown the bearer token, oldest first, by client address (token mode only).
_UNAUTHENTICATED: OrderedDict[Any, Any] = OrderedDict()


def authenticated(client: Any) -> None:
    """Called by `Guard` when a request on the connection from `client` carried the token: from now on the
    connection no longer counts against the unauthenticated share."""
    if client:
        _UNAUTHENTICATED.pop(tuple(client), None)


def deadline_protocol(limits: ServeLimits, token_mode: bool = False) -> type[Any]:
    """uvicorn's h11 protocol with request deadlines, a header size limit and connection caps (see `ServeLimits`).

    - Header deadline: ``header_timeout`` from a request's first byte to the end of its headers (408).
    - Request deadline: ``header_timeout + body_timeout`` from a request's first byte to the end of its body,
      which nothing resets -- not an early answer (``GET /health``, 401, 405 sent before the body was read),
      not body bytes trickling in: the connection is closed when it passes.
    - Header size: the bytes of a request head are counted however they arrive (h11's own limit holds only
      for heads that arrive in pieces): beyond ``max_header_bytes``, 431 and closed.
    - Connections: beyond ``2 x max_connections`` a new one is closed at once. With a token (`token_mode`),
      connections that have not shown it yet have their own share, ``max_unauthenticated``: a new one beyond
      it closes the oldest such connection, so unauthenticated sockets cannot fill the cap that token holders
      need (uvicorn's ``limit_concurrency`` answers 503 past ``max_connections``).
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _req_timer: asyncio.TimerHandle | None = None
        _head_bytes = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > 2 * limits.max_connections:
                self._reply(503, "Service Unavailable", b"too many connections to this envkit-serve\n")
                return
            if token_mode and self.client:
                _UNAUTHENTICATED[tuple(self.client)] = self
                while len(_UNAUTHENTICATED) > limits.max_unauthenticated:
                    _, oldest = _UNAUTHENTICATED.popitem(last=False)
                    if oldest is not self and not oldest.transport.is_closing():
                        oldest.transport.close()  # the unauthenticated share is full: the oldest goes
            self._arm()

        def _arm(self) -> None:
            if self._timer is None:
                self._timer = self.loop.call_later(limits.header_timeout, self._expired)
            if self._req_timer is None:
                self._req_timer = self.loop.call_later(
                    limits.header_timeout + limits.body_timeout, self._request_expired
                )

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _disarm_request(self) -> None:
            if self._req_timer is not None:
                self._req_timer.cancel()
                self._req_timer = None

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                if self._timer is None:
                    self._head_bytes = 0
                self._arm()  # a new request began: its headers have header_timeout to arrive
                end = data.find(b"\r\n\r\n")
                self._head_bytes += len(data) if end < 0 else end + 4
                if self._head_bytes > limits.max_header_bytes:
                    self._reply(431, "Request Header Fields Too Large", b"request headers over the server's limit\n")
                    return
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()
            if self.conn.their_state in (h11.DONE, h11.MUST_CLOSE, h11.CLOSED, h11.SWITCHED_PROTOCOL):
                self._disarm_request()  # the whole request is in

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._disarm()  # idle between requests: the keep-alive timer runs (re-armed at the next byte)
                self._disarm_request()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._disarm_request()
            if self.client:
                _UNAUTHENTICATED.pop(tuple(self.client), None)
            super().connection_lost(exc)

        def _expired(self) -> None:
            self._timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._reply(408, "Request Timeout", b"request headers did not arrive in time\n")

        def _request_expired(self) -> None:
            self._req_timer = None
            if self.transport.get_protocol() is not self or self.transport.is_closing():
                return  # upgraded to a WebSocket (its own limits hold), or already closing
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                if self.cycle is None or not self.cycle.response_started:
                    self._reply(408, "Request Timeout", b"the request did not arrive in time\n")
                else:
                    self.transport.close()  # answered early, the body still trickling: nothing resets the deadline

        def _reply(self, status: int, reason: str, body: bytes) -> None:
            head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\nconnection: close\r\n"
            self.transport.write(f"{head}content-length: {len(body)}\r\n\r\n".encode() + body)
            self.transport.close()

    return DeadlineH11Protocol


def run(asgi: Any, *, host: str, port: int, limits: ServeLimits, log_level: str = "warning") -> None:
    """Serve `asgi` with uvicorn under `limits` (header and body deadlines, connection and size caps)."""
    import uvicorn

    uvicorn.run(
        asgi, host=host, port=port, log_level=log_level,
        http=deadline_protocol(limits, token_mode=bool(getattr(asgi, "token", None))),
        timeout_keep_alive=max(1, round(limits.keep_alive)), limit_concurrency=limits.max_connections,
        h11_max_incomplete_event_size=limits.max_header_bytes, ws_max_size=limits.max_body,
        timeout_graceful_shutdown=max(1, round(limits.shutdown_timeout)),
    )  # fmt: skip
