"""`FleetSnapshot`: a handle on a snapshot that stays in the fleet actor whose env took it.

Native snapshots (ALFWorld engine states, SWE overlay layers) never leave the actor that made them; the caller
gets this small picklable handle, which says which actor holds the snapshot (name and incarnation) and on which
Ray node. Restoring it runs there (`envkit.fleet.env.FleetEnv` moves its session to the holding actor); a handle
whose actor is gone raises `envkit.errors.SnapshotLostError`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FleetSnapshot:
    """Where a fleet snapshot lives.

    Attributes:
        actor: The holding actor's name in its fleet (``"<fleet>/<index>.<generation>"``).
        incarnation: Random id of that actor process (a replacement under the same name has another).
        node_id: Ray node id of the actor.
        key: The snapshot's key in that actor.
        kind: ``"native"`` or ``"replay"`` (the env's snapshot kind).
        owner: The client whose lease keeps it alive.
    """

    actor: str
    incarnation: str
    node_id: str
    key: str
    kind: str = "native"
    owner: str = ""

    @property
    def id(self) -> str:
        """A unique id (as `envkit.snapshot.Snapshot.id`)."""
        return f"{self.incarnation}:{self.key}"

    def where(self) -> str:
        """Human-readable location, for error messages."""
        return f"actor {self.actor} (incarnation {self.incarnation}) on node {self.node_id[:12]}"
