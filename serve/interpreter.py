"""Run ``envkit-serve`` in the interpreter that has its dependencies.

`scripts/setup.sh` installs the serve dependencies (openenv-core, fastapi, uvicorn) in the interop venv
(``$ENVKIT_INTEROP_VENV``, default ``<checkout>/.venv-interop``, docs/install.md), not in the main venv, because
they need antlr4 4.9 where math-verify needs 4.13. The ``envkit-serve`` on a user's PATH is the main venv's, so
when its interpreter lacks those modules and the interop venv exists, `reexec_if_needed` replaces the process
with the same command under the interop venv's Python (once: ``ENVKIT_SERVE_REEXEC`` guards against a loop).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["SERVE_MODULES", "interop_python", "reexec_if_needed"]

#: What envkit-serve imports from its extra.
SERVE_MODULES = ("openenv.core.env_server", "fastapi", "uvicorn")


def _missing() -> list[str]:
    out = []
    for mod in SERVE_MODULES:
        try:
            if importlib.util.find_spec(mod) is None:
                out.append(mod)
        except ModuleNotFoundError:  # a parent package is missing
            out.append(mod)
    return out


def interop_python() -> Path | None:
    """The interop venv's Python (``$ENVKIT_INTEROP_VENV`` or ``<checkout>/.venv-interop``), if it exists."""
    import envkit

    venv = os.environ.get("ENVKIT_INTEROP_VENV")
    root = Path(venv) if venv else Path(envkit.__file__).resolve().parents[1] / ".venv-interop"
    py = root / "bin" / "python"
    return py if py.is_file() and os.access(py, os.X_OK) else None


def reexec_if_needed(argv: Sequence[str]) -> None:
    """Re-run ``envkit-serve ARGV`` in the interop venv when this interpreter lacks the serve dependencies.

    Returns (and the caller goes on) when nothing is missing, when there is no interop venv, or when this process
    already is the re-executed one; the caller's own check then names the ``pip install`` that fixes it.
    """
    if os.environ.get("ENVKIT_SERVE_REEXEC") or any(a in ("-h", "--help") for a in argv) or not _missing():
        return  # --help needs only tyro, which this interpreter has: answered here, in about a second
    py = interop_python()
    if py is None or Path(sys.prefix).resolve() == py.parents[1].resolve():  # no interop venv, or already in it
        return
    env = {**os.environ, "ENVKIT_SERVE_REEXEC": "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(str(py), [str(py), "-m", "envkit.serve.cli", *argv], env)
