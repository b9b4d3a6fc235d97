"""Where envkit keeps what it builds once and reuses: one root for every cache.

``$ENVKIT_CACHE``, else ``$XDG_CACHE_HOME/envkit``, else ``~/.cache/envkit``. Under it: ``alfworld/`` (game
files built from the ALFWorld data) and ``models/`` (GGUF files converted to model folders; ``$ENVKIT_MODEL_CACHE``
overrides that one). `.ci/run` points all of them at a fresh temporary folder (docs/install.md, "Caches").
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$ENVKIT_CACHE``, else ``$XDG_CACHE_HOME/envkit``, else ``~/.cache/envkit``."""
    if os.environ.get("ENVKIT_CACHE"):
        return Path(os.environ["ENVKIT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "envkit"
