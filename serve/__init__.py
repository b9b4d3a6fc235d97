"""``envkit-serve``: envkit envs over HTTP and WebSocket, OpenEnv-compatible, with snapshot endpoints.

Layer: above ``oracles`` (the optional oracle endpoint runs a domain oracle on the server). Needs the ``serve``
extra (openenv-core, fastapi, uvicorn, websockets). `serve.app.build_app` builds the ASGI app; the client is
`envkit.remote.RemoteEnv`; `serve.openenv_client.EnvkitEnvClient` is an OpenEnv client class for it.
"""
