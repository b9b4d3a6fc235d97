"""The rollout-actor subclass's EDEN path on a real (tiny, random) transformers model behind a fake engine object.

vLLM cannot run on a CPU, so the actor's ``llm`` is a small object that serves token prompts and prompt
embeddings with ``model.generate`` and routes ``collective_rpc`` to envkit's real worker-extension method. The
CPU analogue of the GPU smoke check: with rho = 0, the noisy rollout from prompt embeddings reproduces the greedy
output of the token prompt + anchor token.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from envkit.trainers.explorers.eden import EdenConfig


class HFEngine:
    """Serves vLLM-style requests (TokensPrompt dicts or {"prompt_embeds"}) with a transformers model, greedily."""

    def __init__(self, model):
        self.model = model
        self.worker = SimpleNamespace(model_runner=SimpleNamespace(model=model))
        self.requests: list = []

    async def collective_rpc(self, method, args=()):
        from envkit.trainers.openrlhf.rollout_actor import EnvkitWorkerWrap

        self.rpcs = getattr(self, "rpcs", 0) + 1
        return [getattr(EnvkitWorkerWrap, method)(self.worker, *args)]

    async def generate(self, prompt, params, request_id):
        self.requests.append(prompt)
        with torch.no_grad():
            if "prompt_embeds" in prompt:
                emb = prompt["prompt_embeds"].unsqueeze(0)
                out = self.model.generate(
                    inputs_embeds=emb,
                    attention_mask=torch.ones(emb.shape[:2], dtype=torch.long),
                    max_new_tokens=params.max_tokens,
                    do_sample=False,
                )
                new = out[0].tolist()
            else:
                ids = torch.tensor([prompt["prompt_token_ids"]])
                out = self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), max_new_tokens=params.max_tokens, do_sample=False
                )
                new = out[0, ids.shape[1] :].tolist()
        yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=new, text="", finish_reason="length", logprobs=None)])


@pytest.fixture
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=1,
    )  # fmt: skip
    m = LlamaForCausalLM(cfg).eval()
    m.generation_config.pad_token_id = 0
    m.generation_config.eos_token_id = None  # always generate max_new_tokens
    return m


def _actor(model, explorer="eden"):
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.rollout_actor import EnvkitRolloutActor

    actor = object.__new__(EnvkitRolloutActor)  # no vLLM engine on a CPU: attach the fake one
    actor.llm = HFEngine(model)
    actor._mm_pad_token_ids = None
    actor._weight_version = 0
    actor._anchor_rows = {}
    actor._prompt_rows = {}
    actor.envkit_config = BackendConfig(explorer=explorer, n_samples_per_prompt=4, eden_anchors=(9, 17))
    return actor


def _params(n):
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=n)


def test_rho0_noisy_rollout_reproduces_token_prompt_plus_anchor(model):
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec

    actor = _actor(model)
    prompt = [5, 12, 33, 7, 21]
    spec = RolloutSpec("g", 0, noisy=True, anchor=17, rho=0.0, seed=4)
    noisy = asyncio.run(actor.generate_noisy(prompt, _params(7), spec)).outputs[0].token_ids
    clean = asyncio.run(actor.generate([*prompt, 17], _params(6))).outputs[0].token_ids
    assert "prompt_embeds" in actor.llm.requests[0] and actor.llm.requests[0]["prompt_embeds"].shape == (6, 32)
    assert noisy == clean  # one slot of max_tokens goes to the extra position
    other = asyncio.run(actor.generate([*prompt, 9], _params(6))).outputs[0].token_ids
    assert other != clean  # the anchor row really steers the continuation


def test_noisy_row_is_edens_perturbation_of_the_live_anchor_row(model):
    from envkit.trainers.explorers.eden import perturb
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec

    actor = _actor(model)
    spec = RolloutSpec("g", 0, noisy=True, anchor=9, rho=0.18, seed=11)
    emb = asyncio.run(actor.noisy_prompt_embeds([3, 4, 5], spec))
    table = model.get_input_embeddings().weight.detach()
    torch.testing.assert_close(emb[:3], table[[3, 4, 5]])
    want = perturb(table[9].numpy(), 1, 0.18, np.random.default_rng(11))[0]
    torch.testing.assert_close(emb[3], torch.as_tensor(want, dtype=emb.dtype))
    rel = float((emb[3] - table[9]).norm() / table[9].norm())
    assert 0.05 < rel < 0.4  # ~ rho


def test_anchor_rows_are_cached_per_weight_version(model):
    actor = _actor(model)
    before = asyncio.run(actor.anchor_row(9)).clone()
    with torch.no_grad():
        model.get_input_embeddings().weight[9] += 1.0  # a weight update arrives
    assert torch.equal(asyncio.run(actor.anchor_row(9)), before)  # same version: cached
    actor._bump()  # what update_weight / update_weight_cuda_ipc do before syncing
    torch.testing.assert_close(asyncio.run(actor.anchor_row(9)), before + 1.0)


def test_a_groups_noisy_rollouts_read_prompt_and_anchor_rows_once(model):
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec

    actor = _actor(model)
    specs = [RolloutSpec("g", i, noisy=True, anchor=9, rho=0.1, seed=i) for i in range(4)]
    embeds = [asyncio.run(actor.noisy_prompt_embeds([3, 4, 5], s)) for s in specs]
    assert actor.llm.rpcs == 2  # prompt rows + anchor row, then cached
    assert all(torch.equal(e[:3], embeds[0][:3]) for e in embeds)
    assert len({tuple(e[3].tolist()) for e in embeds}) == 4  # independent noise per rollout
    actor._bump()
    asyncio.run(actor.noisy_prompt_embeds([3, 4, 5], specs[0]))
    assert actor.llm.rpcs == 4  # a new weight version reads both again


def test_engine_kwargs_turn_on_prompt_embeds_only_for_eden_and_always_use_envkits_extension():
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.rollout_actor import WORKER_EXTENSION, engine_kwargs

    base = {"model": "m", "worker_extension_cls": "openrlhf.trainer.ray.vllm_worker_wrap.WorkerWrap"}
    eden = engine_kwargs(base, BackendConfig(explorer="eden", n_samples_per_prompt=4, eden_anchors=(1,)))
    assert eden["enable_prompt_embeds"] is True and eden["worker_extension_cls"] == WORKER_EXTENSION
    plain = engine_kwargs(base, BackendConfig(n_samples_per_prompt=4))
    assert plain == {**base, "worker_extension_cls": WORKER_EXTENSION}  # always envkit's (weight checksums)
    assert "enable_prompt_embeds" not in plain
    mod, _, cls = WORKER_EXTENSION.rpartition(".")
    import importlib

    from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

    assert issubclass(getattr(importlib.import_module(mod), cls), WorkerWrap)


def test_eden_plan_shares_one_anchor_per_prompt():
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.explorers.eden import eden_specs

    cfg = BackendConfig(
        explorer="eden",
        n_samples_per_prompt=8,
        eden_anchors=(11, 22, 33),
        eden=EdenConfig(n_noisy=2, warmup_steps=10),
    )
    rng = np.random.default_rng(0)
    plans = [eden_specs(f"p{i}", 8, cfg, step=0, rng=rng) for i in range(20)]
    for plan in plans:
        noisy = [s for s in plan if s.noisy]
        assert len(plan) == 8 and len(noisy) == 2 and [s.index for s in plan] == list(range(8))
        assert len({s.anchor for s in noisy}) == 1 and noisy[0].anchor in (11, 22, 33)
        assert len({s.seed for s in noisy}) == 2
        assert noisy[0].temperature == pytest.approx(0.6) and plan[0].temperature == 1.0
    assert len({p[-1].anchor for p in plans}) == 3  # different directions across prompts


def test_packed_weights_round_trip_exactly():
    from envkit.trainers.openrlhf.rollout_actor import pack_weights, unpack_weights

    torch.manual_seed(0)
    weights = [("a.weight", torch.randn(3, 5).to(torch.bfloat16)), ("b.bias", torch.randn(7)), ("c", torch.ones(0))]
    packed = pack_weights(weights)
    assert all(isinstance(raw, bytes) and isinstance(shape, list) for _, _, shape, raw in packed)
    back = unpack_weights(packed)
    assert [n for n, _ in back] == ["a.weight", "b.bias", "c"]
    for (_, want), (_, got) in zip(weights, back):
        assert got.dtype == want.dtype and torch.equal(got, want)
