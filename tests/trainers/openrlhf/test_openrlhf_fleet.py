"""``envkit-train openrlhf --fleet.*``: the agent executor plays its episodes in envs of an env fleet on other
(simulated) nodes instead of building them in the rollout actor; a SERO group gives the same rows as in-process,
its roots restored and continued on the actor holding their snapshots, which are released with the group.
The executor test runs the executor in a Ray actor on the head node (the trainer's) and its envs on fleet actors on
the CPU nodes; it is marked ``cluster``: the actor's imports and a few seconds of Toy env work, plus the cluster
(tests/conftest.py)."""

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
         [(s.observation, s.action, s.reward, t.oracle, t.weight) for s, t in zip(rec.steps, rec.turns, strict=True)])
        for r, rec in zip(out, recs, strict=True)
    ]  # fmt: skip


class ExecutorHost:
    """A Ray actor standing where OpenRLHF's rollout actor stands (on a GPU node of a real cluster): it builds the
    agent executor in its own process and plays a SERO group there, its envs leased from a fleet that this process
    starts (Ray is connected inside an actor, as in OpenRLHF's)."""

    def __init__(self, tokenizer_dir: str):
        from transformers import AutoTokenizer

        import envkit.trainers.openrlhf.rollout_actor  # noqa: F401  (OpenRLHF's and vLLM's imports, the bulk)

        self.tok = AutoTokenizer.from_pretrained(tokenizer_dir)

    def play(self, fleet_cfg):
        import ray

        from envkit.fleet.client import close_fleets, get_fleet
        from envkit.fleet.env import FleetEnv

        ex, out = _group(self.tok, fleet_cfg)
        info = get_fleet(fleet_cfg).info()
        envs = [e for free in ex._free.values() for e in free]
        facts = {
            "node": ray.get_runtime_context().get_node_id(),
            "fleet_nodes": sorted({i["node_id"] for i in info}),
            "snapshots_held": sum(i["snapshots"] for i in info),
            "fleet_envs": bool(envs) and all(isinstance(e, FleetEnv) for e in envs),
            "episodes_open": len(ex._episodes),
        }
        close_fleets()  # this client's actors: a killed host would leave them to the lease
        return _rows(out), facts


@pytest.mark.cluster
def test_executor_in_a_ray_actor_plays_on_a_fleet_on_another_node(fleet_cluster, tokenizer, tokenizer_dir):
    """The real path: the executor runs in a Ray actor pinned to the head node (the trainer's), its envs in fleet
    actors on the CPU nodes; the rows equal an in-process run's in this test process. Costs the actor's imports
    (OpenRLHF and vLLM's, ~15 s CPU) on top of the Toy env work."""
    import sys

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from envkit.fleet.config import FleetConfig
    from envkit.trainers.openrlhf.config import BackendConfig

    cluster, nodes = fleet_cluster
    fleet_cfg = FleetConfig(actors=2, sessions_per_actor=8, resource="envkit_toy", num_cpus=0)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    head = cluster.head_node.node_id
    host_cls = ray.remote(ExecutorHost).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)
    )
    host = host_cls.remote(str(tokenizer_dir))  # starts (its imports) while the in-process group plays here
    try:
        _, local = _group(tokenizer, None)
        rows, facts = ray.get(host.play.remote(fleet_cfg), timeout=300)
    finally:
        ray.kill(host)
    assert rows == _rows(local) and sum(r[3] for r in rows) == 2  # two oracle rows, the same maths
    assert facts["node"] == head and facts["fleet_envs"]  # the executor on the trainer's node, its envs leased
    assert facts["fleet_nodes"] and set(facts["fleet_nodes"]) <= {n.node_id for n in nodes}  # ... on CPU nodes
    assert head not in facts["fleet_nodes"]
    assert facts["snapshots_held"] == 0 and facts["episodes_open"] == 0  # released with the group
    # the option travels through the backend's config (the rollout actors read it from their environment)
    assert BackendConfig.from_json(BackendConfig(env_id="x", fleet=fleet_cfg).to_json()).fleet == fleet_cfg


def test_any_fleet_option_puts_the_episodes_on_a_fleet():
    from envkit.fleet.config import FleetConfig
    from envkit.trainers.openrlhf.entry import build_config

    flags = ["--rollout.n_samples_per_prompt", "4"]
    assert build_config(["--env", "envkit/Toy-v0"], flags).backend.fleet is None  # envs in the rollout actors
    got = build_config(["--env", "envkit/Toy-v0", "--fleet.resource", "envkit_toy", "--fleet.actors", "3"], flags)
    assert got.backend.fleet == FleetConfig(actors=3, resource="envkit_toy")
