"""envkit-serve as a hostile client meets it: a real server process (uvicorn, real sockets) per test, and raw
HTTP / WebSocket helpers that send what a well-behaved client never would.

These tests need the ``serve`` extra: they run in the interop venv (``tests/test_interop_venv.py`` runs them
there, next to ``tests/serve``); a plain run without the extra skips them with the reason (`Server.start`).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_spec = importlib.util.spec_from_file_location("_serve_fixtures", Path(__file__).parents[2] / "serve" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_serve = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_serve)
Server = _serve.Server


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(ENV_ID, *cli_args)`` starts an envkit-serve process (stopped after the test)."""
    started: list[Any] = []

    def start(env_id: str, *args: str) -> Any:
        s = Server(env_id, *args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


class Http:
    """One keep-alive connection to a server; ``call`` returns (status, JSON body)."""

    def __init__(self, srv: Any, timeout: float = 30):
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)

    def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None, **headers: str
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        hdrs = {"Content-Type": "application/json", **{k.replace("_", "-"): v for k, v in headers.items()}}
        self.conn.request(method, path, body=data, headers=hdrs)
        r = self.conn.getresponse()
        out = r.read()
        try:
            return r.status, json.loads(out) if out else None
        except json.JSONDecodeError:
            return r.status, out.decode("latin-1")

    def session(self) -> tuple[str, str]:
        status, out = self.call("POST", "/envkit/sessions", {})
        assert status == 200, out
        return out["session_id"], out.get("session_key", "")

    def close(self) -> None:
        self.conn.close()


def info(srv: Any) -> dict[str, Any]:
    c = Http(srv)
    try:
        status, out = c.call("GET", "/envkit/info")
        assert status == 200, out
        return dict(out)
    finally:
        c.close()


def settled_info(srv: Any, ready: Any, timeout: float = 10) -> dict[str, Any]:
    """`info` once ``ready(info)`` holds (a closed session keeps its slot until its env has stopped, which
    the server finishes after the client saw the close), or the last one after `timeout` s."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        out = info(srv)
        if ready(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


def raw_socket(srv: Any, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout)


def still_serves(srv: Any) -> None:
    """A fresh client plays a step on the server (what every test checks last)."""
    c = Http(srv)
    sid, key = c.session()
    status, out = c.call("POST", f"/envkit/sessions/{sid}/reset", {"seed": 0}, Envkit_Session_Key=key)
    assert status == 200, out
    status, out = c.call("POST", f"/envkit/sessions/{sid}/step", {"action": "right"}, Envkit_Session_Key=key)
    assert status == 200 and out["observation"]["text"].startswith("You are at cell"), out
    assert c.call("DELETE", f"/envkit/sessions/{sid}", Envkit_Session_Key=key)[0] == 200
    c.close()


@pytest.fixture
def wire() -> types.SimpleNamespace:
    """The raw-client helpers of this module: ``Http``, ``info``, ``settled_info``, ``raw_socket``, ``still_serves``."""
    return types.SimpleNamespace(
        Http=Http, info=info, settled_info=settled_info, raw_socket=raw_socket, still_serves=still_serves
    )
