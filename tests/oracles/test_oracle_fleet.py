"""``envkit-oracle rollout --backend fleet``: the same seeded SERO run on Toy-v0 gives the same records in-process and
on an env fleet of the simulated cluster (roots restored natively on the actors holding their snapshots, every
snapshot released there). Marked ``cluster``: ~3 s of env work plus the cluster (tests/conftest.py)."""

from __future__ import annotations

import pytest

from envkit.credit.sero import SeroOptions
from envkit.fleet.config import FleetConfig
from envkit.io import read_records
from envkit.oracles.pipeline import RunConfig, run

pytestmark = pytest.mark.cluster

TOY = {"env_id": "envkit/Toy-v0", "env_kwargs": {"max_steps": 10}, "max_steps": 10}
FLEET = FleetConfig(actors=2, sessions_per_actor=4, resource="envkit_toy", num_cpus=0)
VOLATILE = {"restore_s", "oracle_s", "wall_s", "time_s"}


def _cfg(tmp_path, name, **kw):
    return RunConfig(
        **{**TOY, "tasks": 4, "group": 4, "workers": 4, "sero": SeroOptions(roots_per_group=2, min_budget=7),
           "progress": False, "out": str(tmp_path / name), **kw}
    )  # fmt: skip


def _stable(recs):
    return [{k: v for k, v in r.items() if k not in VOLATILE and not k.endswith("_s")} for r in recs]


def test_fleet_backend_gives_the_in_process_records(fleet_cluster, tmp_path):
    local = run(_cfg(tmp_path, "local.jsonl", backend="inprocess"))
    fleet = run(_cfg(tmp_path, "fleet.jsonl", backend="fleet", fleet=FLEET))
    assert fleet["totals"]["roots_tried"] > 0
    assert fleet["totals"]["restored_native"] == fleet["totals"]["roots_tried"]  # on the actor holding the snapshot
    assert _stable([fleet["totals"]]) == _stable([local["totals"]])  # all but timings
    assert _stable(read_records(tmp_path / "fleet.jsonl")) == _stable(read_records(tmp_path / "local.jsonl"))
    assert fleet["session"]["snapshots_released"] > 0 and fleet["session"]["backend"] == "fleet"
    assert "fleet" not in fleet["settings"]  # where envs run is no setting of the records: a run may move


def test_fleet_options_are_on_the_command_line(capsys):
    from envkit.oracles.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["rollout", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "--fleet.resource" in out and "--fleet.sessions-per-actor" in out and "fleet" in out


class _KillsAnActor:
    """The run's random policy; before its 3rd batch it kills one of the run's fleet actors (found by its Ray name)."""

    def __init__(self):
        from envkit.oracles.model_policies import make_policy

        self.inner, self.name, self.n, self.killed = make_policy("random", seed=0), "random", 0, []

    def act(self, batch):
        import ray

        self.n += 1
        if self.n == 3:
            named = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("fleet-")]
            victim = sorted(named, key=lambda a: a["name"])[0]
            ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=True)
            self.killed.append(victim["name"])
        return self.inner.act(batch)


def test_retries_replay_episodes_of_a_killed_actor_from_reset_and_keep_the_records(fleet_cluster, tmp_path):
    """``--retries 1``: an actor killed mid-chunk costs nothing: its episodes restart from reset on the replacement
    and the records equal the in-process run's, every task once (none lost or duplicated). Without retries the same
    kill fails those episodes (tests/envkit/test_fleet_cluster.py)."""
    small = {"tasks": 2, "sero": SeroOptions(roots_per_group=1, min_budget=7)}
    local = run(_cfg(tmp_path, "local.jsonl", backend="inprocess", **small))
    policy = _KillsAnActor()
    fleet = run(_cfg(tmp_path, "fleet.jsonl", backend="fleet", fleet=FLEET, retries=1, **small), policy=policy)
    assert len(policy.killed) == 1 and 1 <= fleet["session"]["worker_restarts"] <= 2  # its two sessions' episodes
    assert fleet["totals"]["failed_to_run"] == 0 and fleet["session"]["tasks_run"] == 2
    assert _stable(read_records(tmp_path / "fleet.jsonl")) == _stable(read_records(tmp_path / "local.jsonl"))
    assert _stable([fleet["totals"]]) == _stable([local["totals"]])


def test_retries_is_an_option_of_the_command_line(capsys):
    from envkit.oracles.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["rollout", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "--retries" in out and "from reset" in out
    with pytest.raises(SystemExit):
        main(["rollout", "--retries", "-1", "--out", "x.jsonl"])
    assert "--retries must be >= 0" in capsys.readouterr().err
