"""`RemoteEnv`: an envkit env served by ``envkit-serve`` on another machine, itself a snapshot env.

``envkit.make("envkit/ALFWorld-v0", remote="http://host:8000")`` returns one. It keeps the snapshot contract:
`snapshot()` returns a `RemoteSnapshot`, a small picklable *handle* on a snapshot that stays in the server's
memory (native snapshots such as ALFWorld's engine state or SWE overlay layers never leave the process that
made them); `restore(s)` sends the handle back, so any `RemoteEnv` connected to the same server (another
session, another process) restores it; `discard(s)` frees it on the server. Errors come back as the envkit error
the server raised; a server that is gone raises `EnvServerError` at once.

Example (with ``envkit-serve envkit/Toy-v0 --port 8000`` running)::

    env = envkit.make("envkit/Toy-v0", remote="http://127.0.0.1:8000")   # or "ws://..." for the WebSocket
    obs, info = env.reset(seed=0)
    s = env.snapshot()
    env.step("right")
    env.restore(s)                       # back, on the server
"""

from __future__ import annotations

import dataclasses
import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, SupportsFloat

import gymnasium as gym

from envkit.capability import SnapshotCapability
from envkit.errors import InvalidActionError, SnapshotError
from envkit.remote.transport import EnvServerError, HTTPTransport, WSTransport, info, split_url
from envkit.spaces import FreeText

#: How many discarded handles a `RemoteEnv` remembers for its own error message.
DISCARDED_KEPT = 4096
#: The client's own action check: type and valid text only; the length limit is the server env's.
_ANY_LENGTH = FreeText(1 << 62)

TOKEN_ENV = "ENVKIT_SERVE_TOKEN"


@dataclass(frozen=True)
class RemoteSnapshot:
    """A handle on a snapshot held by an env server (picklable; restore it through that server).

    Attributes:
        server: Id of the server process that holds it (a restarted server has a new id).
        url: Where that server was reached.
        env_id: The env id it was taken from.
        handle: The server's name for it.
        kind: ``"native"`` or ``"replay"``, as the server's env declares.
    """

    server: str
    url: str
    env_id: str
    handle: str
    kind: str

    @property
    def id(self) -> str:
        return self.handle


class RemoteEnv(gym.Env[str, str]):
    """A session on an ``envkit-serve`` server, with gymnasium's API and envkit's snapshot API.

    Args:
        env_id: The id the server serves (checked against the server's).
        url: ``http(s)://host:port`` (HTTP transport) or ``ws(s)://host:port`` (WebSocket transport).
        transport: ``"http"`` or ``"ws"`` (default: from the URL's scheme).
        token: Bearer token (default: ``$ENVKIT_SERVE_TOKEN``).
        timeout: Seconds to wait for any one answer before raising `EnvServerError`.
        connect_timeout: Seconds to wait for a connection.
        **env_kwargs: Must equal the server's env constructor arguments (``envkit-serve --env-kwarg``); a client
            cannot change how the server builds its envs.
    """

    def __init__(
        self,
        env_id: str,
        url: str,
        *,
        transport: str | None = None,
        token: str | None = None,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        **env_kwargs: Any,
    ):
        scheme = split_url(url)[0]
        transport = transport or ("ws" if scheme in ("ws", "wss") else "http")
        if transport not in ("http", "ws"):
            raise ValueError(f"transport must be 'http' or 'ws', got {transport!r}")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        http_url = url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        self.server_info = info(http_url, token=token, timeout=connect_timeout)
        served = self.server_info["env_id"]
        if served != env_id:
            raise ValueError(f"the server at {url} serves {served!r}, not {env_id!r}: connect to a server of {env_id}")
        theirs = self.server_info.get("env_kwargs", {})
        if env_kwargs and dict(env_kwargs) != theirs:
            raise ValueError(
                f"env constructor arguments are set by the server (envkit-serve --env-kwarg); it builds {env_id} with "
                f"{theirs}, not {dict(env_kwargs)}"
            )
        self.env_id = env_id
        self.url = url
        self.transport_name = transport
        cls = WSTransport if transport == "ws" else HTTPTransport
        self._t: HTTPTransport | WSTransport = cls(
            http_url, token=token, timeout=timeout, connect_timeout=connect_timeout
        )
        md = dict(self.server_info.get("metadata", {}))
        # Handles restore through the server from any session and pickle as plain data; they hold server memory
        # until discarded (envkit.lifetime), whatever the served env's own snapshots do.
        served_cap = md.pop("snapshot_capability", None) or {"kind": md.get("snapshot", "native")}
        served_cap["info_ignore"] = tuple(served_cap.get("info_ignore", ()))
        cap = dataclasses.replace(SnapshotCapability(**served_cap), picklable=True, scope="any", holds_resources=True)
        self.metadata = {**md, **cap.metadata(), "remote": url}
        self.action_space = FreeText(int(self.server_info.get("max_action_length", 1 << 16)))
        self.observation_space = FreeText(int(self.server_info.get("max_observation_length", 1 << 22)))
        self.evaluation = bool(self.server_info.get("evaluation", False))
        self._server = str(self.server_info["server"])
        #: The latest discarded handles, for a clear local error (bounded: an older one gets the server's
        #: "unknown snapshot handle", also a SnapshotError).
        self._discarded: OrderedDict[str, None] = OrderedDict()
        self.last_restore_kind = ""
        #: The last connection failure ("" while the server answers); `RemotePool` stops a run on it.
        self.server_error = ""

    # ----- gymnasium ---------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"reset(options=...) must be a dict or None, got {type(options).__name__}")
        super().reset(seed=seed)
        out = self._call("reset", seed=seed, options=dict(options or {}))
        return self._obs_info(out)

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        _check_action(action)
        return self._transition(self._call("step", action=action))

    def close(self) -> None:
        self._t.close()

    # ----- snapshots ---------------------------------------------------------------------------------------
    def snapshot(self) -> RemoteSnapshot:
        return self._handle(self._call("snapshot"))

    def snapshot_step(self, action: str) -> tuple[RemoteSnapshot, tuple[str, float, bool, bool, dict[str, Any]]]:
        """Snapshot, then step, in one round trip (what `envkit.rollout` does before every step)."""
        _check_action(action)
        out = self._call("snapshot_step", action=action)
        return self._handle(out["snapshot"]), self._transition(out)

    def restore(self, snapshot: RemoteSnapshot) -> tuple[str, dict[str, Any]]:
        h = self._check(snapshot)
        out = self._call("restore", handle=h)
        self.last_restore_kind = str(out.get("restored_by", snapshot.kind))
        return self._obs_info(out)

    def discard(self, snapshot: RemoteSnapshot) -> None:
        h = self._check(snapshot)
        self._call("discard", handle=h)
        self._discarded[h] = None
        while len(self._discarded) > DISCARDED_KEPT:
            self._discarded.popitem(last=False)

    def run_oracle(self, max_steps: int, oracle_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Let the env's domain oracle act from the current state *on the server* (it reads privileged state
        there); returns ``{"steps": [...], "success": bool, "reason": str}``. Needs ``envkit-serve --oracle``."""
        out: dict[str, Any] = self._call("oracle", max_steps=int(max_steps), oracle_kwargs=dict(oracle_kwargs or {}))
        return out

    # ----- helpers -----------------------------------------------------------------------------------------
    def _call(self, op: str, **body: Any) -> Any:
        try:
            return self._t.call(op, **body)
        except EnvServerError as exc:
            self.server_error = str(exc)
            raise

    def _check(self, snapshot: Any) -> str:
        if not isinstance(snapshot, RemoteSnapshot):
            raise SnapshotError(
                f"RemoteEnv expected a RemoteSnapshot from env.snapshot(), got {type(snapshot).__name__}"
            )
        if snapshot.server != self._server or snapshot.env_id != self.env_id:
            raise SnapshotError(
                f"this snapshot is held by the env server {snapshot.server} at {snapshot.url} ({snapshot.env_id}); "
                f"restore it through a RemoteEnv connected to that server (this one is {self._server} at {self.url})"
            )
        if snapshot.handle in self._discarded:
            raise SnapshotError("this snapshot was discarded with env.discard(s) and can no longer be restored")
        return snapshot.handle

    def _handle(self, out: Mapping[str, Any]) -> RemoteSnapshot:
        return RemoteSnapshot(self._server, self.url, self.env_id, str(out["handle"]), str(out["kind"]))

    @staticmethod
    def _obs_info(out: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        o = out["observation"]
        return o["text"], dict(o.get("info", {}))

    @staticmethod
    def _transition(out: Mapping[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        o = out["observation"]
        return o["text"], float(out.get("reward") or 0.0), bool(o["terminated"]), bool(o["truncated"]), dict(o["info"])

    def __repr__(self) -> str:
        return f"RemoteEnv({self.env_id!r}, {self.url!r}, transport={self.transport_name!r})"


def _check_action(action: object) -> None:
    """Refuse what no env accepts before a round trip (the server checks again: `envkit.spaces.FreeText`)."""
    why = _ANY_LENGTH.why_not(action)
    if why is not None:
        raise InvalidActionError(why)
