"""The local trainer playing its episodes on an env fleet of the simulated cluster (``agent.fleet``): the same seeded
batch as in-process, for SERO (restore + oracle continuation on the actor holding the root) and branching (forks
restored on the actor holding the backbone's snapshot); every snapshot released in the actors. Marked
``cluster``: a tiny model, ~10 s of work plus the cluster (tests/conftest.py)."""

from __future__ import annotations

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
