"""The env fleet on a 4-node Ray cluster simulated on this machine (`fleet_cluster` in tests/conftest.py): placement
by custom resource, restore on the holding actor, an actor killed (episodes ended with the reason, or retried from
reset) and a node lost in the middle of a rollout, lease expiry. Marked ``cluster`` (CI runs it): ~10 s to start the cluster, a few seconds of Toy env work per test.

The node-loss test removes a node of the module's cluster, so it runs last.
"""

from __future__ import annotations

import time

import pytest

from envkit.errors import EnvkitError, SessionLostError, SnapshotLostError
from envkit.fleet.client import Fleet
from envkit.fleet.config import FleetConfig
from envkit.fleet.env import FleetEnv
from envkit.fleet.pool import FleetPool
from envkit.policies import RandomAdmissiblePolicy
from envkit.pool import EnvFactory, InProcessPool
from envkit.rollout import Task, rollout

pytestmark = pytest.mark.cluster
ray = pytest.importorskip("ray")

TOY = EnvFactory("envkit/Toy-v0", {"max_steps": 10})
TASKS = [Task(f"t{i}", seed=i) for i in range(12)]


def toy_fleet(actors: int = 2, **kw) -> FleetConfig:
    return FleetConfig(**{"actors": actors, "sessions_per_actor": 4, "resource": "envkit_toy", "num_cpus": 0, **kw})


def reference() -> list:
    with InProcessPool(TOY, 4) as pool:
        return rollout(RandomAdmissiblePolicy(0), pool, TASKS, max_steps=10)


class Interrupting:
    """The random policy, calling `hit()` once before its `round`-th batch (a kill in the middle of a run)."""

    name = "random"

    def __init__(self, round_: int, hit):
        self.inner, self.round, self.hit, self.n = RandomAdmissiblePolicy(0), round_, hit, 0

    def act(self, batch):
        self.n += 1
        if self.n == self.round:
            self.hit()
        return self.inner.act(batch)


def lose_node(cluster, node, slots, wait_s: float = 120.0) -> None:
    """Remove `node` without grace and return once every actor that lived there fails a call.

    Ray's actor calls go worker to worker, so an actor process can keep answering for a while after its raylet is
    killed (it notices the raylet's death on its own clock, slower on a loaded machine): a test that removes the node
    and goes on could see every episode finish first. A real lost node takes its processes at once; waiting here
    makes the simulated loss as abrupt before the next batch is played."""
    cluster.remove_node(node, allow_graceful=False)
    deadline = time.monotonic() + wait_s
    for slot in slots:
        while True:
            try:
                ray.get(slot.handle.info.remote(), timeout=5)
            except ray.exceptions.GetTimeoutError:
                pass
            except ray.exceptions.RayError:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the actors of removed node {node.node_id} still answer after {wait_s:.0f} s")
            time.sleep(0.2)


def same_episode(a, b) -> bool:
    return [s.action for s in a.steps] == [s.action for s in b.steps] and a.success == b.success


def test_actors_are_placed_on_the_nodes_with_their_resource(fleet_cluster):
    cluster, nodes = fleet_cluster
    toy_nodes = {n.node_id for n in nodes}
    with Fleet(toy_fleet(3)) as fleet:
        placed = {i["node_id"] for i in fleet.info()}
        assert placed <= toy_nodes and cluster.head_node.node_id not in placed
    with Fleet(FleetConfig(actors=1, resource="envkit_shop", num_cpus=0)) as fleet:
        assert [i["node_id"] for i in fleet.info()] == [nodes[2].node_id]  # the only node advertising it
    with pytest.raises(EnvkitError, match=r"envkit_nope.*ray start"):
        Fleet(FleetConfig(resource="envkit_nope"))


def test_rollout_through_the_fleet_equals_in_process_and_restores_on_the_holding_actor(fleet_cluster):
    ref = reference()
    with Fleet(toy_fleet()) as fleet:
        with FleetPool(TOY, 4, fleet=fleet) as pool:
            assert len({pool.where(i).slot for i in range(4)}) == 2  # sessions spread over both actors
            trajs = rollout(RandomAdmissiblePolicy(0), pool, TASKS, max_steps=10)
            assert [t.task_id for t in trajs] == [t.task_id for t in ref]
            assert all(same_episode(a, b) for a, b in zip(trajs, ref, strict=True))
            assert [[s.observation for s in t.steps] for t in trajs] == [[s.observation for s in t.steps] for t in ref]
            # a pool worker on the other actor restores a snapshot: its session moves to the holding actor
            snap = trajs[0].steps[2].snapshot
            other = next(i for i in range(4) if pool.where(i).incarnation != snap.incarnation)
            res = pool.call(other, "restore", snap)
            assert res.ok and res.value[0] == trajs[0].steps[2].observation
            assert pool.where(other).incarnation == snap.incarnation
        a, b = FleetEnv("envkit/Toy-v0", fleet, max_steps=10), FleetEnv("envkit/Toy-v0", fleet, max_steps=10)
        assert a.session.slot != b.session.slot
        a.reset(seed=3)
        a.step("right")
        s = a.snapshot()
        want = a.step("right")[0]
        obs, _ = b.restore(s)  # runs on a's actor
        assert b.session.incarnation == s.incarnation == a.session.incarnation and b.last_restore_kind == "native"
        assert b.step("right")[0] == want
        b.discard(s)
        with pytest.raises(SnapshotLostError, match="no longer held"):
            b.restore(s)


def test_an_actor_killed_mid_run_costs_only_its_episodes(fleet_cluster):
    ref = reference()
    with Fleet(toy_fleet()) as fleet:
        victim = fleet.slots[0]
        with FleetPool(TOY, 4, fleet=fleet) as pool:
            policy = Interrupting(3, lambda: ray.kill(victim.handle, no_restart=True))
            trajs = rollout(policy, pool, TASKS, max_steps=10)
            assert sorted(t.task_id for t in trajs) == sorted(t.task_id for t in TASKS)  # none lost or duplicated
            failed = [t for t in trajs if t.failed]
            assert 1 <= len(failed) <= 2  # the episodes that were on the killed actor's two sessions
            assert all("lost during" in t.error and victim.name in t.error for t in failed)
            assert all(same_episode(t, r) for t, r in zip(trajs, ref, strict=True) if not t.failed)
            assert pool.restarts == len(failed)
            lost = [s.snapshot for t in failed for s in t.steps]
            with pytest.raises(SnapshotLostError, match="which is gone"):
                FleetEnv("envkit/Toy-v0", fleet, max_steps=10).restore(lost[0])
            res = pool.call(0, "restore", lost[0])
            assert not res.ok and "SnapshotLostError" in res.error
        assert fleet.replaced == 1 and len(fleet.info()) == 2  # capacity replaced


def test_a_caller_that_allows_retries_gets_every_episode_from_reset_after_an_actor_kill(fleet_cluster):
    ref = reference()
    with Fleet(toy_fleet()) as fleet, FleetPool(TOY, 4, fleet=fleet) as pool:
        policy = Interrupting(3, lambda: ray.kill(fleet.slots[1].handle, no_restart=True))
        trajs = rollout(policy, pool, TASKS, max_steps=10, retries=1)
        assert pool.restarts >= 1 and not any(t.failed for t in trajs)
        assert [t.task_id for t in trajs] == [t.task_id for t in ref]
        assert all(same_episode(t, r) for t, r in zip(trajs, ref, strict=True))  # replayed from reset, same seeds


def test_an_owner_that_stops_renewing_loses_its_snapshots_at_lease_expiry(fleet_cluster):
    cfg = toy_fleet(1, lease_s=1.0)
    with Fleet(cfg, heartbeat=False) as gone, Fleet(cfg) as alive:
        e1, e2 = FleetEnv("envkit/Toy-v0", gone), FleetEnv("envkit/Toy-v0", alive)
        e1.reset(seed=0)
        e2.reset(seed=0)
        s1, s2 = e1.snapshot(), e2.snapshot()
        time.sleep(2.5)  # > lease_s + the reaper's period; only `alive` renews meanwhile
        info = gone.info()[0]
        assert info["expired_owners"] == 1 and info["snapshots"] == 0 and info["sessions"] == 0
        with pytest.raises(SessionLostError, match="lease expired"):
            e1.step("right")
        with pytest.raises(SnapshotLostError, match="lease expired"):
            e1.restore(s1)
        assert e2.restore(s2)[0] == e2.reset(seed=0)[0]  # the renewing owner kept its snapshot


def test_a_lost_node_ends_only_its_episodes_and_the_fleet_replaces_its_actors(fleet_cluster):
    cluster, nodes = fleet_cluster
    ref = reference()
    with Fleet(toy_fleet(3)) as fleet:
        victim_node = next(n for n in nodes if n.node_id == fleet.slots[0].node_id)
        victims = [s for s in fleet.slots if s.node_id == victim_node.node_id]
        on_it = {s.incarnation for s in victims}
        with FleetPool(TOY, 6, fleet=fleet) as pool:
            on_victim = sum(pool.where(i).incarnation in on_it for i in range(6))
            policy = Interrupting(3, lambda: lose_node(cluster, victim_node, victims))
            trajs = rollout(policy, pool, TASKS, max_steps=10)
        assert sorted(t.task_id for t in trajs) == sorted(t.task_id for t in TASKS)
        failed = [t for t in trajs if t.failed]
        assert 1 <= len(failed) <= on_victim and all("lost during" in t.error for t in failed)
        assert all(same_episode(t, r) for t, r in zip(trajs, ref, strict=True) if not t.failed)
        with pytest.raises(SnapshotLostError):
            FleetEnv("envkit/Toy-v0", fleet).restore(failed[0].steps[0].snapshot)
        alive = fleet.info()
        assert len(alive) == 3 and victim_node.node_id not in {i["node_id"] for i in alive}
        assert fleet.replaced == len(on_it)
