"""envkit: snapshot-capable agent environments, oracle continuations and RLVR verifiers.

Importing envkit registers the ``envkit/<Domain>-v0`` gymnasium ids and imports only stdlib, numpy and
gymnasium; domain dependencies load when an env is made.
"""

from envkit.checker import CheckReport, check_snapshot_env
from envkit.core import Continuation, Root, Step, Trajectory
from envkit.errors import (
    EnvkitError,
    MissingExtraError,
    ReplayDivergenceError,
    SnapshotContractError,
    SnapshotError,
    UnknownEnvError,
)
from envkit.registration import ENVS, make, register_envs
from envkit.snapshot import ReplaySnapshot, ReplayState, Snapshot, SnapshotEnv, SnapshotEnvBase
from envkit.spaces import FreeText

register_envs()

__version__ = "0.1.0"

__all__ = [
    "ENVS",
    "CheckReport",
    "Continuation",
    "EnvkitError",
    "FreeText",
    "MissingExtraError",
    "ReplayDivergenceError",
    "ReplaySnapshot",
    "ReplayState",
    "Root",
    "Snapshot",
    "SnapshotContractError",
    "SnapshotEnv",
    "SnapshotEnvBase",
    "SnapshotError",
    "Step",
    "Trajectory",
    "UnknownEnvError",
    "check_snapshot_env",
    "make",
    "register_envs",
]
