"""Client side of ``envkit-serve``: `RemoteEnv` (a snapshot env on a server) and `RemotePool`.

Stdlib only (HTTP through ``http.client``); the WebSocket transport imports ``websockets`` when used
(``pip install 'envkit[serve]'``). The server lives in the ``serve`` package.
"""

from envkit.remote.client import RemoteEnv, RemoteSnapshot
from envkit.remote.transport import EnvServerError, ServerCapacityError, SessionLostError

__all__ = ["EnvServerError", "RemoteEnv", "RemoteSnapshot", "ServerCapacityError", "SessionLostError"]
