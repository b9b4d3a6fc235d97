"""`FleetConfig`: where an env fleet's actors run and how big they are (one config, nested in every front-end)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FleetConfig:
    """An env fleet: `actors` Ray actors, each holding up to `sessions_per_actor` envs (docs/fleet.md).

    Each actor asks Ray for ``num_cpus`` CPUs and ``{resource: resource_per_actor}``, so it is placed only on the
    nodes that advertise that custom resource (``ray start --address HEAD --resources '{"envkit_webshop": 8}'``).
    """

    actors: int = 2
    """Env actors (processes) of the fleet; Ray places them, and replaces one that dies."""
    sessions_per_actor: int = 16
    """Most envs (concurrent episodes) one actor holds; opening more raises `FleetCapacityError`."""
    resource: str = ""
    """Custom Ray resource an actor needs, one per env domain (``envkit_webshop``); "" places actors on any node."""
    resource_per_actor: float = 1.0
    """Units of `resource` per actor (a node advertising N units holds N / resource_per_actor actors)."""
    num_cpus: float = 1.0
    """CPUs Ray reserves per actor."""
    threads: int = 4
    """Threads per actor that run env calls (envs that wait on I/O, browsers or sandboxes overlap; pure-Python
    envs share the actor's one core)."""
    lease_s: float = 300.0
    """A client renews its lease every lease_s / 3 s; an actor releases the sessions and snapshots of a client
    not heard from for lease_s (a trainer that died)."""
    call_timeout_s: float = 600.0
    """Longest wait for one env call; a call that takes longer fails as a lost actor."""
    address: str | None = None
    """Ray cluster to join when Ray is not initialised yet (None: ``RAY_ADDRESS``, else a local Ray)."""

    def __post_init__(self) -> None:
        if self.actors < 1 or self.sessions_per_actor < 1 or self.threads < 1:
            raise ValueError(
                f"FleetConfig: actors, sessions_per_actor and threads must be >= 1 (got {self.actors}, "
                f"{self.sessions_per_actor}, {self.threads})"
            )
        if self.lease_s <= 0 or self.call_timeout_s <= 0 or self.num_cpus < 0 or self.resource_per_actor <= 0:
            raise ValueError(
                "FleetConfig: lease_s, call_timeout_s and resource_per_actor must be > 0 and num_cpus >= 0"
            )

    @property
    def capacity(self) -> int:
        """Sessions the fleet holds at most."""
        return self.actors * self.sessions_per_actor

    def actor_options(self) -> dict[str, Any]:
        """Ray actor options that place one actor (CPUs and the custom resource)."""
        opts: dict[str, Any] = {"num_cpus": self.num_cpus, "max_restarts": 0, "max_concurrency": 1000}
        if self.resource:
            opts["resources"] = {self.resource: self.resource_per_actor}
        return opts

    @classmethod
    def coerce(cls, value: FleetConfig | dict[str, Any] | str) -> FleetConfig:
        """A `FleetConfig` from itself, a dict of its fields (JSON env kwargs) or a bare resource name."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(resource=value)
        if isinstance(value, dict):
            from envkit.config_io import from_data

            return from_data(cls, value)
        raise TypeError(f"fleet= takes a FleetConfig, a dict of its fields or a resource name, got {value!r}")
