"""Env fleet: envs in Ray actors on the CPU nodes a user names, many per actor, snapshots held where they live.

`FleetConfig` sizes and places it; `Fleet` is a client's handle on its actors (`EnvHost`); `FleetPool` serves
`envkit.pool` requests (``envkit-oracle rollout --backend fleet``); `FleetEnv` is one env for the trainers
(``envkit.make(env_id, fleet=...)``). Ray is imported only when a fleet starts. See docs/fleet.md.
"""

from envkit.fleet.config import FleetConfig
from envkit.fleet.handles import FleetSnapshot
from envkit.fleet.leases import LeaseTable

__all__ = ["FleetConfig", "FleetSnapshot", "LeaseTable"]
