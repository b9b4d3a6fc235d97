"""``envkit-train openrlhf --fleet.*``: the agent executor plays its episodes in envs of an env fleet on other
(simulated) nodes instead of building them in the rollout actor; a SERO group gives the same rows as in-process,
its roots restored and continued on the actor holding their snapshots, which are released with the group.
The executor test is marked ``cluster``: a few seconds of Toy env work plus the cluster (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

LABEL = json.dumps({"seed": 0, "options": {"goal": 2, "length": 4}})


class StayActor:
    """Policy that never moves ('stay'), and a deterministic prompt-logprobs scorer (as test_openrlhf_sero)."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    async def generate(self, tokens, params, multi_modal_data=None):
        ids = self.tok("stay" + self.tok.eos_token, add_special_tokens=False)["input_ids"]
        lps = [{t: SimpleNamespace(logprob=-0.2)} for t in ids]
        return SimpleNamespace(
            outputs=[SimpleNamespace(token_ids=ids, text=self.tok.decode(ids), finish_reason="stop", logprobs=lps)]
        )

    async def prompt_logprobs(self, tokens):
        return [-0.05 * (i % 7) for i in range(len(tokens) - 1)]


def _group(tokenizer, fleet):
    from vllm import SamplingParams

    import envkit  # noqa: F401
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_actor import run_planned
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec
    from envkit.trainers.sero_options import TrainerSeroOptions

    cfg = BackendConfig(
        env_id="envkit/Toy-v0", n_samples_per_prompt=4, max_turns=4, sero=True, advantage="graphgpo",
        sero_opts=TrainerSeroOptions(roots_per_group=2, max_oracle_share=0.5), fleet=fleet,
    )  # fmt: skip
    ex = GymAgentExecutor(cfg)
    specs = [RolloutSpec("g0", i).to_dict() for i in range(4)]
    params = SamplingParams(temperature=1.0, max_tokens=None, logprobs=1)
    out = asyncio.run(run_planned(ex, StayActor(tokenizer), "{obs}\n", LABEL, params, 512, tokenizer, specs))
    return ex, out


def _rows(out):
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord

    recs = [RolloutRecord.from_dict(r["envkit"]) for r in out]
    return [
        (r["observation_tokens"], r["action_ranges"], r["scores"], rec.oracle,
         [(t.state, t.action, t.reward, t.oracle, t.weight) for t in rec.turns])
        for r, rec in zip(out, recs, strict=True)
    ]  # fmt: skip


@pytest.mark.cluster
def test_executor_plays_on_fleet_nodes_with_the_in_process_rows(fleet_cluster, tokenizer):
    from envkit.fleet.client import get_fleet
    from envkit.fleet.config import FleetConfig
    from envkit.fleet.env import FleetEnv
    from envkit.trainers.openrlhf.config import BackendConfig

    cluster, nodes = fleet_cluster
    fleet_cfg = FleetConfig(actors=2, sessions_per_actor=8, resource="envkit_toy", num_cpus=0)
    _, local = _group(tokenizer, None)
    ex, remote = _group(tokenizer, fleet_cfg)
    assert _rows(remote) == _rows(local) and sum(r[3] for r in _rows(remote)) == 2  # two oracle rows, same maths
    envs = [e for free in ex._free.values() for e in free]
    assert envs and all(isinstance(e, FleetEnv) for e in envs)
    fleet = get_fleet(fleet_cfg)
    placed = {i["node_id"] for i in fleet.info()}
    assert placed <= {n.node_id for n in nodes} and cluster.head_node.node_id not in placed  # not the trainer's node
    assert sum(i["snapshots"] for i in fleet.info()) == 0 and not ex._episodes  # released with the group
    # the option travels through the backend's config (the rollout actors read it from their environment)
    assert BackendConfig.from_json(BackendConfig(env_id="x", fleet=fleet_cfg).to_json()).fleet == fleet_cfg


def test_any_fleet_option_puts_the_episodes_on_a_fleet():
    from envkit.fleet.config import FleetConfig
    from envkit.trainers.openrlhf.entry import build_config

    flags = ["--rollout.n_samples_per_prompt", "4"]
    assert build_config(["--env", "envkit/Toy-v0"], flags).backend.fleet is None  # envs in the rollout actors
    got = build_config(["--env", "envkit/Toy-v0", "--fleet.resource", "envkit_toy", "--fleet.actors", "3"], flags)
    assert got.backend.fleet == FleetConfig(actors=3, resource="envkit_toy")
