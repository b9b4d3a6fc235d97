"""``envkit-serve ENV_ID``: serve one envkit id over HTTP and WebSocket (OpenEnv protocol + snapshots).

Example::

    envkit-serve envkit/ALFWorld-v0 --port 8000 --max-sessions 64 --oracle
    python -c "import envkit; e = envkit.make('envkit/ALFWorld-v0', remote='http://127.0.0.1:8000'); print(e.reset(seed=0)[0])"
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, help=__doc__)


def _kwargs(items: list[str]) -> dict[str, Any]:
    from oracles.cli import parse_kwargs

    try:
        return parse_kwargs(items, "--env-kwarg")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


@app.command()
def serve(
    env_id: Annotated[str, typer.Argument(help="Registered env id, e.g. envkit/WebShop-v0.")],
    host: Annotated[str, typer.Option(help="Interface to bind (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    max_sessions: Annotated[int, typer.Option(help="Most concurrent sessions (HTTP and WebSocket together).")] = 64,
    idle_timeout: Annotated[
        float, typer.Option(help="Seconds idle after which a session and its snapshots are dropped (0: never).")
    ] = 600.0,
    max_snapshots: Annotated[int, typer.Option(help="Most snapshots one session may hold.")] = 100_000,
    token: Annotated[
        str | None,
        typer.Option(help="Require 'Authorization: Bearer TOKEN' (default: $ENVKIT_SERVE_TOKEN, else none)."),
    ] = None,
    oracle: Annotated[
        bool, typer.Option(help="Serve the domain oracle (privileged, training only: SERO over remote envs).")
    ] = False,
    env_kwarg: Annotated[
        list[str] | None, typer.Option(help="Env constructor argument KEY=VALUE (repeatable).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve ENV_ID: many sessions per process, each with its own env; snapshots stay here as handles."""
    from envkit.errors import EnvkitError, require

    try:
        for mod in ("openenv.core.env_server", "fastapi", "uvicorn"):
            require(mod, "serve", what="envkit-serve")
    except EnvkitError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    import uvicorn

    from serve.app import build_app

    token = token if token is not None else os.environ.get("ENVKIT_SERVE_TOKEN") or None
    try:
        asgi = build_app(
            env_id,
            _kwargs(env_kwarg or []),
            max_sessions=max_sessions,
            idle_timeout=idle_timeout or None,
            max_snapshots=max_snapshots,
            token=token,
            oracle=oracle,
        )
    except EnvkitError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"envkit-serve: {env_id} on http://{host}:{port} (ws://{host}:{port}/ws), up to {max_sessions} sessions")
    # keep-alive well past the clients' think time (an LLM turn), so connections are reused between steps
    uvicorn.run(asgi, host=host, port=port, log_level=log_level, timeout_keep_alive=max(75, int(idle_timeout or 0)),
                ws_max_size=1 << 26)  # fmt: skip


def main() -> None:
    app()


if __name__ == "__main__":
    main()
