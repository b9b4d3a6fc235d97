"""The env fleet's pure parts (no Ray): leases, the config, the handles (the fleet itself: test_fleet_cluster.py)."""

from __future__ import annotations

import pytest

from envkit.errors import SnapshotError, SnapshotLostError
from envkit.fleet import FleetConfig, FleetSnapshot, LeaseTable
from envkit.pool import EnvFactory, make_pool


def test_lease_table_expires_owners_strictly_past_their_deadline():
    t = LeaseTable(10.0)
    t.renew("a", now=0.0)
    t.renew("b", now=5.0)
    t.renew("a", now=3.0)
    assert t.deadline("a") == 13.0 and t.deadline("b") == 15.0 and t.deadline("c") is None
    assert t.expired(now=13.0) == []  # at the deadline: still held
    assert t.expired(now=13.5) == ["a"] and t.owners() == ["b"]
    t.renew("a", now=14.0)  # an owner heard from again starts a new lease
    assert t.expired(now=100.0) == ["a", "b"] and t.owners() == []
    t.renew("c", now=1.0)
    t.forget("c")
    assert t.owners() == []
    with pytest.raises(ValueError, match="lease_s"):
        LeaseTable(0)


def test_renewing_never_moves_a_lease_back():
    t = LeaseTable(1.0)
    t.renew("a", now=5.0)
    t.renew("a", now=4.0)  # a late, reordered heartbeat
    assert t.deadline("a") == 6.0


def test_fleet_config_checks_its_sizes_and_places_by_resource():
    cfg = FleetConfig(actors=3, sessions_per_actor=8, resource="envkit_webshop", resource_per_actor=0.5)
    assert cfg.capacity == 24
    assert cfg.actor_options() == {
        "num_cpus": 1.0, "max_restarts": 0, "max_concurrency": 1000, "resources": {"envkit_webshop": 0.5}
    }  # fmt: skip
    assert "resources" not in FleetConfig().actor_options()  # no resource: any node
    for bad in ({"actors": 0}, {"sessions_per_actor": 0}, {"threads": 0}, {"lease_s": 0}, {"num_cpus": -1}):
        with pytest.raises(ValueError, match="FleetConfig"):
            FleetConfig(**bad)


def test_fleet_config_from_a_resource_name_or_json_fields():
    assert FleetConfig.coerce("envkit_alfworld") == FleetConfig(resource="envkit_alfworld")
    assert FleetConfig.coerce({"actors": 4, "resource": "r"}) == FleetConfig(actors=4, resource="r")
    cfg = FleetConfig(actors=5)
    assert FleetConfig.coerce(cfg) is cfg
    with pytest.raises(TypeError, match="acters"):
        FleetConfig.coerce({"acters": 4})
    with pytest.raises(TypeError, match="fleet= takes"):
        FleetConfig.coerce(3)  # type: ignore[arg-type]


def test_handle_names_its_holder_and_lost_snapshots_are_snapshot_errors():
    h = FleetSnapshot("fleet-x/0.1", "abc123", "f" * 56, "k7", "native", "me")
    assert h.id == "abc123:k7"
    assert "fleet-x/0.1" in h.where() and "ffffffffffff" in h.where()
    assert issubclass(SnapshotLostError, SnapshotError)  # SERO's restore falls back to replay on it


def test_unknown_pool_backend_lists_the_fleet():
    with pytest.raises(ValueError, match="fleet"):
        make_pool(EnvFactory("envkit/Toy-v0"), 1, backend="nope")
