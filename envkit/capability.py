"""What an env's snapshots can do: one frozen value, declared in the env's metadata (snapshot contract, rule 5).

An env declares ``metadata = {"render_modes": [], **SnapshotCapability(...).metadata()}``, which sets two keys:
``metadata["snapshot"]`` (the kind, ``"native"`` or ``"replay"``: gymnasium-style and what most callers read)
and ``metadata["snapshot_capability"]`` (this value, everything else). `snapshot_capability(env)` reads it back;
an env that only declares ``metadata["snapshot"]`` (a third-party env) gets the defaults below.

Example:
    >>> import gymnasium, envkit
    >>> from envkit.capability import snapshot_capability
    >>> cap = snapshot_capability(gymnasium.make("envkit/Toy-v0"))
    >>> cap.kind, cap.picklable, cap.scope, cap.holds_resources
    ('native', True, 'any', False)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from envkit.errors import SnapshotError

SNAPSHOT_KINDS = ("native", "replay")
SCOPES = ("any", "instance")


@dataclass(frozen=True)
class SnapshotCapability:
    """An env's snapshot capability (the value behind ``metadata["snapshot_capability"]``).

    Attributes:
        kind: ``"native"`` (the env captures its own state) or ``"replay"`` (reset + verified action replay).
        picklable: Snapshots survive pickling (restore in another process or a fresh instance).
        scope: ``"any"``: a native snapshot restores natively in any instance of the env; ``"instance"``: only in
            the instance that took it (ALFWorld's engine registry), elsewhere the env falls back to verified
            replay (`SnapshotEnvBase.restore_by_replay`, which needs an episode reset with a seed).
        holds_resources: Snapshots hold something outside the Python object (SWE overlay layers on disk,
            ALFWorld engine states) until ``env.discard(s)``: whoever takes one must discard it in the env that
            made it (`envkit.lifetime`). False: dropping the reference is enough, ``discard`` only bookkeeps.
        check_depth: Actions `check_snapshot_env` plays before its snapshot (single-turn envs: attempts - 1).
        info_ignore: Info keys `check_snapshot_env(compare_info=True)` does not compare (timings and the like).
        note: Free text for users (costs, caveats).
    """

    kind: Literal["native", "replay"] = "native"
    picklable: bool = True
    scope: Literal["any", "instance"] = "any"
    holds_resources: bool = False
    check_depth: int = 3
    info_ignore: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in SNAPSHOT_KINDS:
            raise ValueError(f"SnapshotCapability.kind must be one of {SNAPSHOT_KINDS}, got {self.kind!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"SnapshotCapability.scope must be one of {SCOPES}, got {self.scope!r}")
        if self.check_depth < 0:
            raise ValueError(f"SnapshotCapability.check_depth must be >= 0, got {self.check_depth}")
        object.__setattr__(self, "info_ignore", tuple(self.info_ignore))

    def metadata(self) -> dict[str, Any]:
        """The two metadata keys that declare this capability: ``{"snapshot": kind, "snapshot_capability": self}``."""
        return {"snapshot": self.kind, "snapshot_capability": self}


def capability_from_metadata(meta: Mapping[str, Any]) -> SnapshotCapability:
    """The capability declared in a metadata mapping (see the module docstring).

    Raises:
        SnapshotError: no kind is declared, or ``metadata["snapshot"]`` disagrees with the capability's kind.
    """
    cap = meta.get("snapshot_capability")
    kind = meta.get("snapshot")
    if cap is None:
        if kind not in SNAPSHOT_KINDS:
            raise SnapshotError(
                f"metadata['snapshot'] must be one of {SNAPSHOT_KINDS}, got {kind!r}: declare the capability with "
                "metadata = {**envkit.capability.SnapshotCapability(...).metadata()} or wrap the env with "
                "envkit.ReplaySnapshot(env)"
            )
        return SnapshotCapability(kind=kind)
    if not isinstance(cap, SnapshotCapability):
        raise SnapshotError(
            f"metadata['snapshot_capability'] must be an envkit.capability.SnapshotCapability, got {type(cap).__name__}"
        )
    if kind is not None and kind != cap.kind:
        raise SnapshotError(
            f"metadata['snapshot'] is {kind!r} but metadata['snapshot_capability'].kind is {cap.kind!r}: declare "
            "both with SnapshotCapability(...).metadata()"
        )
    return cap


def snapshot_capability(env: Any) -> SnapshotCapability:
    """The capability of `env` (wrappers forward the inner env's metadata); see `capability_from_metadata`."""
    meta = getattr(env, "metadata", None)
    if not meta:
        meta = getattr(getattr(env, "unwrapped", None), "metadata", None) or {}
    return capability_from_metadata(meta)
