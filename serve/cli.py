"""``envkit-serve ENV_ID``: serve one envkit id over HTTP and WebSocket (OpenEnv protocol + snapshots).

Example::

    envkit-serve envkit/ALFWorld-v0 --port 8000 --max-sessions 64 --oracle
    python -c "import envkit; e = envkit.make('envkit/ALFWorld-v0', remote='http://127.0.0.1:8000'); print(e.reset(seed=0)[0])"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import tyro

from envkit.runtime.command_line import cli, fail, key_values
from envkit.serve.limits import ServeLimits


@dataclass(frozen=True)
class ServeConfig:
    """Serve ENV_ID: many sessions per process, each with its own env; snapshots stay here as handles.

    Attributes:
        env_id: Registered env id, e.g. envkit/WebShop-v0.
        host: Interface to bind (0.0.0.0: every interface).
        port: TCP port.
        max_sessions: Most concurrent sessions (HTTP and WebSocket together).
        idle_timeout: Seconds idle after which a session and its snapshots are dropped (0: never).
        max_snapshots: Most snapshots one session may hold (409 beyond).
        max_snapshots_total: Most snapshots the server holds over all sessions (503 beyond).
        max_snapshot_mb: Most MiB the server's snapshots may hold together, estimated (503 beyond).
        max_snapshot_mb_per_session: Most MiB one session's snapshots may hold (409 beyond; 0: max_snapshot_mb /
            max_sessions, each session's guaranteed share).
        token: Require 'Authorization: Bearer TOKEN' (None: $ENVKIT_SERVE_TOKEN, else no token).
        owner_tokens: A file of 'OWNER TOKEN' lines (one owner per tenant, readable by the server's user only):
            each owner authenticates with its own token and gets its own limits (--max-sessions-per-owner,
            --max-snapshot-mb-per-owner, and its own budget of the SWE layer store). With --token too, that
            token's holder is the owner 'default'.
        max_sessions_per_owner: Most sessions one owner holds (0: max_sessions / number of owners).
        max_snapshot_mb_per_owner: Most MiB one owner's snapshots hold over all its sessions (0: max_snapshot_mb
            / number of owners).
        oracle: Serve the domain oracle (privileged, training only: SERO over remote envs).
        state_keys: Send each state's exact key ``info["state_key"]`` (training only: a digest of hidden state,
            which lets a client test guesses of it; without it remote GiGPO / GraphGPO group by the observation).
        env_kwargs: Env constructor argument KEY=VALUE (repeatable; VALUE parsed as JSON when it can be).
        log_level: uvicorn log level.
        limits: Request and connection limits (`envkit.serve.limits.ServeLimits`: --max-body, --header-timeout,
            --body-timeout, --keep-alive, --max-connections, --max-header-bytes).
    """

    env_id: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="ENV_ID")]
    host: str = "127.0.0.1"
    port: int = 8000
    max_sessions: int = 64
    idle_timeout: float = 600.0
    max_snapshots: int = 10_000
    max_snapshots_total: int = 100_000
    max_snapshot_mb: int = 4096
    max_snapshot_mb_per_session: int = 0
    token: str | None = None
    owner_tokens: str | None = None
    max_sessions_per_owner: int = 0
    max_snapshot_mb_per_owner: int = 0
    oracle: bool = False
    state_keys: bool = False
    env_kwargs: Annotated[dict[str, Any], key_values("--env-kwarg"), tyro.conf.arg(name="env-kwarg")] = field(
        default_factory=dict
    )
    log_level: str = "warning"
    limits: Annotated[ServeLimits, tyro.conf.OmitArgPrefixes] = field(default_factory=ServeLimits)


def read_owner_tokens(path: str) -> dict[str, str]:
    """``{owner: token}`` from a file of ``OWNER TOKEN`` lines (``#`` comments and blank lines skipped).

    Raises:
        ValueError: a malformed line, a repeated owner or token, or a token shorter than 16 characters.
    """
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{n}: expected 'OWNER TOKEN', got {len(parts)} fields")
            owner, token = parts
            if owner in out or token in out.values() or len(token) < 16:
                raise ValueError(
                    f"{path}:{n}: owner {owner!r}: each owner once, each token unique and at least 16 characters"
                )
            out[owner] = token
    if not out:
        raise ValueError(f"{path} names no owner; write one 'OWNER TOKEN' line per tenant")
    return out


def serve(cfg: ServeConfig) -> None:
    """Check the extra, build the app (unknown id / bad kwargs: one ``error:`` line, exit 2), run uvicorn."""
    from envkit.errors import EnvkitError, require

    try:
        for mod in ("openenv.core.env_server", "fastapi", "uvicorn"):
            require(mod, "serve", what="envkit-serve")
    except EnvkitError as exc:
        fail(str(exc))
    from envkit.serve.app import build_app
    from envkit.serve.limits import run

    token = cfg.token if cfg.token is not None else os.environ.get("ENVKIT_SERVE_TOKEN") or None
    try:
        owners = read_owner_tokens(cfg.owner_tokens) if cfg.owner_tokens else None
    except (OSError, ValueError) as exc:
        fail(f"--owner-tokens: {exc}")
    try:
        asgi = build_app(
            cfg.env_id,
            dict(cfg.env_kwargs),
            max_sessions=cfg.max_sessions,
            idle_timeout=cfg.idle_timeout or None,
            max_snapshots=cfg.max_snapshots,
            max_snapshots_total=cfg.max_snapshots_total,
            max_snapshot_mb=cfg.max_snapshot_mb,
            max_snapshot_mb_per_session=cfg.max_snapshot_mb_per_session,
            token=token,
            owner_tokens=owners,
            max_sessions_per_owner=cfg.max_sessions_per_owner,
            max_snapshot_mb_per_owner=cfg.max_snapshot_mb_per_owner,
            oracle=cfg.oracle,
            state_keys=cfg.state_keys,
            limits=cfg.limits,
        )
    except EnvkitError as exc:
        fail(str(exc))
    host, port = cfg.host, cfg.port
    print(
        f"envkit-serve: {cfg.env_id} on http://{host}:{port} (ws://{host}:{port}/ws), up to {cfg.max_sessions} sessions"
    )
    run(asgi, host=host, port=port, limits=cfg.limits, log_level=cfg.log_level)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (options built by tyro from `ServeConfig`); runs itself in the interop venv when
    this interpreter lacks the serve dependencies (`envkit.serve.interpreter`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    from envkit.serve.interpreter import reexec_if_needed

    reexec_if_needed(args)
    serve(cli(ServeConfig, args=args, prog="envkit-serve"))


if __name__ == "__main__":
    main()
