"""Errors with actionable messages.

Every error says what happened, what was expected and how to fix it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from types import ModuleType


class EnvkitError(Exception):
    """Base class of every error envkit raises on purpose."""


class SnapshotError(EnvkitError):
    """A snapshot cannot be taken, restored or released."""


class ReplayDivergenceError(SnapshotError):
    """Replaying an action prefix did not reproduce the recorded observations."""


class UnknownOptionError(EnvkitError, TypeError):
    """A keyword (constructor argument, reset option) the receiver does not know; the message names the closest."""


class SnapshotContractError(EnvkitError, AssertionError):
    """An environment broke one of the six rules of the snapshot contract."""


class UnknownEnvError(EnvkitError, LookupError):
    """An environment id is not registered."""


class MissingExtraError(EnvkitError, ImportError):
    """A domain's optional dependencies are not installed."""


class InvalidActionError(EnvkitError, ValueError):
    """An action is not of the form the environment accepts (not raised for in-game invalid moves)."""


class ResetNeededError(EnvkitError, RuntimeError):
    """An episode method was called before `reset()` or after the episode ended."""


class RecorderError(EnvkitError, ValueError):
    """An episode was fed to `envkit.recorder.EpisodeRecorder` out of order or with bad values."""


class DataNotFoundError(EnvkitError, FileNotFoundError):
    """Data or weights a component needs are not on disk."""


class SystemDependencyError(EnvkitError, RuntimeError):
    """A program, privilege or system facility a component needs is missing (Chromium, bubblewrap, root)."""


class WorkerCrashedError(EnvkitError, RuntimeError):
    """A pool worker process died while serving a request."""


class SessionLostError(EnvkitError, LookupError, RuntimeError):
    """An env server no longer has this session (never opened, closed, idle expiry, server restart).

    Raised by ``envkit-serve`` (HTTP 404) and, by name, again on the client (`envkit.remote.RemoteEnv`): reset a
    new episode.
    """


class ServerCapacityError(EnvkitError, RuntimeError):
    """An env server already holds its maximum number of sessions (``envkit-serve --max-sessions``, HTTP 503)."""


class SnapshotLostError(SnapshotError):
    """A snapshot lived in an env-fleet actor that is gone (the actor or its node died, or its owner's lease
    expired): it can no longer be restored. Start that branch again from reset or by verified replay."""


class FleetActorLostError(WorkerCrashedError):
    """An env-fleet actor died (process killed, node lost) while serving this env's call; its sessions and
    snapshots are gone and the fleet replaces it. Reset the env to start a new episode on a live actor."""


class FleetCapacityError(EnvkitError, RuntimeError):
    """Every actor of an env fleet holds its maximum number of sessions (`FleetConfig.sessions_per_actor`)."""


def require(module: str, extra: str, *, what: str | None = None) -> ModuleType:
    """Import an optional dependency or raise `MissingExtraError` naming the `pip install` that fixes it.

    Args:
        module: The importable module name, e.g. ``"alfworld"``.
        extra: The envkit extra that provides it, e.g. ``"alfworld"``.
        what: What needs it (used in the message), e.g. ``"envkit/ALFWorld-v0"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        who = what or f"envkit's {extra!r} features"
        raise MissingExtraError(
            f"{who} needs the Python package {module!r}, which is not importable ({exc}). "
            f"Install it with: pip install 'envkit[{extra}]'  (from a checkout: pip install -e '.[{extra}]')"
        ) from exc


def closest(name: str, valid: Iterable[str]) -> str | None:
    """The name in `valid` closest to `name` by edit distance (case-insensitive), or None when nothing is close."""
    lowered = {v.lower(): v for v in valid}
    hit = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[hit[0]] if hit else None


def check_names(given: Iterable[str], valid: Iterable[str], what: str) -> None:
    """Refuse names in `given` that `valid` does not hold, naming the closest valid one.

    Args:
        given: The names passed (keyword arguments, option keys).
        valid: The names accepted.
        what: What takes them, for the message, e.g. ``"reset option of envkit/WebShop-v0"``.

    Raises:
        UnknownOptionError: a name is not valid (a typo is never dropped silently).
    """
    known = sorted(valid)
    for name in given:
        if name in known:
            continue
        hint = closest(name, known)
        raise UnknownOptionError(
            f"unknown {what} {name!r}."
            + (f" Did you mean {hint!r}?" if hint else "")
            + f" Valid: {', '.join(known) if known else '(none)'}"
        )
