"""What ``envkit-serve`` accepts and answers: request bodies, JSON parsing with a depth bound, error bodies.

Every malformed input is refused with a 4xx status and the reason (never a 500): bodies are pydantic models
that forbid unknown fields and bound their values (a seed is 0 <= seed < 2**64, as numpy takes it); JSON
nested deeper than `MAX_DEPTH` is refused before it reaches an env (CPython's parser would raise
RecursionError at ~1,000 levels, and a deep `options` dict would recurse in the env's code), and so is JSON
with more than `MAX_VALUES` values (bounded on the raw bytes, before parsing). `parse_object` is called off the
event loop (`parse_off_loop`): a request's parsing never stalls the other clients.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envkit import errors as E
from envkit.errors import ServerCapacityError, SessionLostError

#: Deepest nesting of a request's JSON (objects and arrays) that the server accepts.
MAX_DEPTH = 32
#: Most JSON values in one request (an upper bound counted on the raw bytes before parsing: every value but
#: the first of a container follows a comma, every container opens with a bracket). 8 MiB of ``{}`` is 4
#: million objects, ~200 MiB of Python objects and seconds of parsing; real requests have a few dozen.
MAX_VALUES = 10_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetBody(_Body):
    seed: int | None = Field(default=None, ge=0, lt=1 << 64)
    options: dict[str, Any] = Field(default_factory=dict)
    episode_id: str | None = Field(default=None, max_length=200)


class StepBody(_Body):
    action: str
    metadata: dict[str, Any] = Field(default_factory=dict)  # OpenEnv's Action.metadata (ignored)


class HandleBody(_Body):
    handle: str = Field(min_length=1, max_length=200)


class OracleBody(_Body):
    max_steps: int = Field(ge=1, le=10_000)
    oracle_kwargs: dict[str, Any] = Field(default_factory=dict)


class Empty(_Body):
    pass


class OpenEnvStep(BaseModel):
    """OpenEnv's stateless ``POST /step`` body: ``{"action": {"text": ...}, ...}``."""

    model_config = ConfigDict(extra="allow")
    action: dict[str, Any]


BODIES: dict[str, type[_Body]] = {
    "reset": ResetBody, "step": StepBody, "snapshot_step": StepBody, "restore": HandleBody, "discard": HandleBody,
    "oracle": OracleBody, "snapshot": Empty, "state": Empty,
}  # fmt: skip

STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (SessionLostError, 404),
    (ServerCapacityError, 503),
    (PermissionError, 403),
    (E.InvalidActionError, 422),
    (E.SnapshotError, 409),
    (E.ResetNeededError, 409),
    (ValidationError, 422),
    (ValueError, 422),
    (TypeError, 422),
    (E.EnvkitError, 400),
)


def _depth(obj: Any) -> int:
    """Nesting depth of parsed JSON (iterative: it never recurses itself)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            o = list(o.values())
        if isinstance(o, list):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((v, d + 1) for v in o if isinstance(v, (dict, list)))
    return deepest


def parse_object(raw: bytes | str) -> dict[str, Any]:
    """A request's JSON object, or ValueError saying what is wrong with it (empty: ``{}``)."""
    if not raw:
        return {}
    b = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    values = b.count(b",") + b.count(b"{") + b.count(b"[")
    if values > MAX_VALUES:
        raise ValueError(
            f"the request has up to {values} JSON values (commas and brackets counted before parsing), over the "
            f"server's limit of {MAX_VALUES}; send smaller options"
        )
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError(f"the request's JSON is nested too deeply (the limit is {MAX_DEPTH} levels)") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"the request is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the request is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the request body must be a JSON object, got {type(data).__name__}")
    if _depth(data) > MAX_DEPTH:
        raise ValueError(f"the request's JSON is nested deeper than {MAX_DEPTH} levels")
    return data


async def parse_off_loop(raw: bytes | str) -> dict[str, Any]:
    """`parse_object` on a worker thread (the event loop keeps serving the other connections meanwhile)."""
    import asyncio

    return await asyncio.to_thread(parse_object, raw)


def error_body(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(HTTP status, ``{"error": {"type", "message"}}``) of an exception raised while serving a request."""
    status = next((code for cls, code in STATUS if isinstance(exc, cls)), 500)
    name = "ValueError" if isinstance(exc, ValidationError) else type(exc).__name__
    if isinstance(exc, ValidationError):
        msg = "invalid request: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    else:
        msg = str(exc) or name
    return status, {"error": {"type": name, "message": msg}}


def ws_error(body: dict[str, Any], status: int) -> dict[str, Any]:
    err = body["error"]
    code = {404: "SESSION_ERROR", 503: "CAPACITY_REACHED", 422: "VALIDATION_ERROR", 403: "PERMISSION_ERROR"}
    return {"message": err["message"], "code": code.get(status, "EXECUTION_ERROR"), "error_type": err["type"]}
