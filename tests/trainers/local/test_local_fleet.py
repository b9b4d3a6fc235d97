"""The local trainer playing its episodes on an env fleet of the simulated cluster (``agent.fleet``): the same seeded
batch as in-process, for SERO (restore + oracle continuation on the actor holding the root) and branching (forks
restored on the actor holding the backbone's snapshot); every snapshot released in the actors. Marked
``cluster``: a tiny model, ~10 s of work plus the cluster (tests/conftest.py)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.fleet.client import get_fleet  # noqa: E402
from envkit.fleet.config import FleetConfig  # noqa: E402
from envkit.fleet.env import FleetEnv  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.local import multi_turn  # noqa: E402
from envkit.trainers.local.explorers.branch import branch_config  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402

pytestmark = pytest.mark.cluster
torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)
FLEET = FleetConfig(actors=2, sessions_per_actor=16, resource="envkit_toy", num_cpus=0)


def _cfg(tmp_path, fleet, **agent) -> TrainConfig:
    kw = {"max_turns": 8, "max_context_tokens": 1500, "estimator": "graphgpo", "sero": True, "fleet": fleet, **agent}
    return TrainConfig(
        task="envkit/Toy-v0", model=TINY, run_dir=str(tmp_path), steps=1, prompts_per_step=2, group_size=4,
        max_new_tokens=6, agent=AgentConfig(**kw), tensorboard=False, plot=False, progress=False,
    )  # fmt: skip


def _same(batch_a, m_a, batch_b, m_b) -> None:
    timing = {k for k in m_a if k.endswith(("_s", "_sec", "time", "per_s"))}
    assert {k: v for k, v in m_a.items() if k not in timing} == {k: v for k, v in m_b.items() if k not in timing}
    assert batch_a.prompts == batch_b.prompts and batch_a.responses == batch_b.responses
    assert batch_a.advantages == batch_b.advantages and batch_a.weights == batch_b.weights


def _batch(cfg):
    trainer = LocalTrainer(cfg)
    trainer.model.eval()
    return trainer.source.batch(0, seed=3)


def test_sero_batch_on_the_fleet_equals_in_process(fleet_cluster, tmp_path):
    local = _batch(_cfg(tmp_path / "a", None))
    fleet = _batch(_cfg(tmp_path / "b", FLEET))
    assert fleet[1]["sero_tried"] >= 1 and fleet[1]["sero_native"] == fleet[1]["sero_tried"]
    _same(*local, *fleet)
    envs = multi_turn.shared_envs("envkit/Toy-v0", 1, FLEET)
    assert isinstance(envs[0], FleetEnv)
    assert sum(i["snapshots"] for i in get_fleet(FLEET).info()) == 0  # discarded where they live


def test_branch_forks_on_the_fleet_equal_in_process(fleet_cluster, tmp_path):
    def cfg(sub, fleet):
        base = _cfg(tmp_path / sub, fleet, sero=False, estimator="gigpo", max_turns=4, max_context_tokens=4000)
        return branch_config(base, points=2, branches=2)

    local = _batch(cfg("a", None))
    fleet = _batch(cfg("b", FLEET))
    assert fleet[1]["branches"] == 8 and fleet[1]["branch_native_restores"] == 8
    _same(*local, *fleet)
    assert sum(i["snapshots"] for i in get_fleet(FLEET).info()) == 0


def test_a_step_survives_an_actor_killed_mid_step(fleet_cluster, tmp_path, monkeypatch):
    """An actor killed at the second turn: its episodes end lost (dropped, counted in ``episodes_lost``) and the
    step's update runs; with ``agent.retries`` they are played again from reset and none is lost."""
    ray = pytest.importorskip("ray")
    cfg = FLEET  # the module's fleet: its actors are up already when the tests above ran
    replaced = get_fleet(cfg).replaced
    real_step, calls = FleetEnv.step, {"n": 0, "victims": []}

    def step(self, action):  # kills one actor before the 5th env step (turn 2 of the 4 episodes)
        calls["n"] += 1
        if calls["n"] == 5:
            victim = get_fleet(cfg).slots[0]
            calls["victims"].append(victim.name)
            ray.kill(victim.handle, no_restart=True)
        return real_step(self, action)

    monkeypatch.setattr(FleetEnv, "step", step)
    for retries in (0, 1):
        calls["n"] = 0
        run = _cfg(tmp_path / f"r{retries}", cfg, sero=False, estimator="grpo", max_turns=3, retries=retries)
        trainer = LocalTrainer(dataclasses.replace(run, prompts_per_step=1))
        m = trainer.step(0)
        assert "pg_loss" in m and "grad_norm" in m  # the update ran
        if retries == 0:
            assert 1 <= m["episodes_lost"] <= 2 and m["rollouts"] == 4 - m["episodes_lost"]  # the actor's 2 sessions
            assert m["episodes_retried"] == 0
        else:
            assert m["episodes_lost"] == 0 and 1 <= m["episodes_retried"] <= 2 and m["rollouts"] == 4
    assert get_fleet(cfg).replaced == replaced + 2 and len(get_fleet(cfg).info()) == 2  # capacity replaced each time


def test_branching_survives_an_actor_killed_before_its_forks(fleet_cluster, tmp_path, monkeypatch):
    """Branching: an actor killed as the forks start takes the backbone snapshots it held; the forks of those end
    lost (dropped), the others play, and the step's update runs."""
    ray = pytest.importorskip("ray")
    real_restore, killed = FleetEnv.restore, []

    def restore(self, snapshot):
        if not killed:
            victim = get_fleet(FLEET).slots[0]
            killed.append(victim.name)
            ray.kill(victim.handle, no_restart=True)
        return real_restore(self, snapshot)

    monkeypatch.setattr(FleetEnv, "restore", restore)
    base = _cfg(tmp_path, FLEET, sero=False, estimator="gigpo", max_turns=4, max_context_tokens=4000)
    trainer = LocalTrainer(dataclasses.replace(branch_config(base, points=2, branches=2), prompts_per_step=1))
    m = trainer.step(0)
    assert killed and "pg_loss" in m and m["episodes_lost"] >= 1
    assert m["rollouts"] >= 1 and m["branches"] >= m["episodes_lost"]
