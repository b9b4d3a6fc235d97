"""The envkit-serve fixtures of tests/serve (one definition, loaded from there)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_serve_fixtures", Path(__file__).parents[1] / "serve" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
toy_server = _mod.toy_server
make_server = _mod.make_server
