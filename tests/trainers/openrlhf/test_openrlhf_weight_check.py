"""The per-tensor weight check after a broadcast (`envkit.trainers.openrlhf.weight_check`), on a real tiny Llama.

The engine side is modelled the way vLLM lays a Llama out: ``qkv_proj`` / ``gate_up_proj`` fused by rows (with
the layer's ``output_sizes``, as vLLM's ``QKVParallelLinear`` / ``MergedColumnParallelLinear`` have), a vocabulary
padded to a multiple of 64, ``packed_modules_mapping`` on the model. The real engine is checked end to end by
``test_openrlhf_e2e.py``; here: exact checksum values, the mapping, and that every kind of corruption is caught.
"""

from __future__ import annotations

import pytest
import torch


def test_checksum_exact_values_and_sensitivity():
    from envkit.trainers.openrlhf.weight_check import checksum

    t = torch.tensor([1.0, 2.0, -0.0], dtype=torch.bfloat16)
    bits = t.view(torch.int16).tolist()  # 0x3F80, 0x4000, 0x8000 as int16
    assert bits == [16256, 16384, -32768]
    assert checksum(t) == (16256 + 16384 - 32768, 16256 * 1 + 16384 * 2 - 32768 * 3)
    assert checksum(t) != checksum(t.flip(0))  # a permutation changes the weighted sum
    assert checksum(torch.zeros(3, dtype=torch.bfloat16)) != checksum(torch.tensor([0.0, 0.0, -0.0]).bfloat16())
    nan = t.clone()
    nan[1] = float("nan")
    assert checksum(nan) != checksum(t)
    assert checksum(torch.arange(5, dtype=torch.float32))[0] == sum(torch.arange(5.0).view(torch.int32).tolist())


class _Fused(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, sizes: list[int]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.output_sizes = sizes


def _engine_like(hf: torch.nn.Module) -> torch.nn.Module:
    """A module tree with vLLM's Llama layout holding ``hf``'s weights."""
    sd = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    root = torch.nn.Module()
    root.packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    model = torch.nn.Module()
    root.model = model
    model.embed_tokens = torch.nn.Module()
    model.embed_tokens.weight = torch.nn.Parameter(sd["model.embed_tokens.weight"], requires_grad=False)
    model.layers = torch.nn.ModuleList()
    for i in range(hf.config.num_hidden_layers):
        p = f"model.layers.{i}."
        layer = torch.nn.Module()
        layer.self_attn = torch.nn.Module()
        qkv = [sd[p + f"self_attn.{n}.weight"] for n in ("q_proj", "k_proj", "v_proj")]
        layer.self_attn.qkv_proj = _Fused(torch.cat(qkv), [t.shape[0] for t in qkv])
        layer.self_attn.o_proj = _Fused(sd[p + "self_attn.o_proj.weight"], [])
        layer.mlp = torch.nn.Module()
        gu = [sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]]
        layer.mlp.gate_up_proj = _Fused(torch.cat(gu), [t.shape[0] for t in gu])
        layer.mlp.down_proj = _Fused(sd[p + "mlp.down_proj.weight"], [])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            setattr(layer, norm, torch.nn.Module())
            getattr(layer, norm).weight = torch.nn.Parameter(sd[p + norm + ".weight"], requires_grad=False)
        model.layers.append(layer)
    model.norm = torch.nn.Module()
    model.norm.weight = torch.nn.Parameter(sd["model.norm.weight"], requires_grad=False)
    head = sd["lm_head.weight"]
    padded = torch.cat([head, torch.zeros(64 - head.shape[0] % 64, head.shape[1], dtype=head.dtype)])
    root.lm_head = _Fused(padded, [])
    return root


@pytest.fixture
def llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def _check(hf: torch.nn.Module, engine: torch.nn.Module) -> list[str]:
    from envkit.trainers.openrlhf.weight_check import actor_checksums, compare, engine_checksums

    actor = actor_checksums(hf)
    specs = {name: (dtype, shape) for name, (dtype, shape, _) in actor.items()}
    return compare(actor, engine_checksums(engine, specs, tp_size=1))


def test_every_actor_tensor_is_found_and_equal_in_the_engine_layout(llama):
    engine = _engine_like(llama)
    assert _check(llama, engine) == []
    assert len(dict(llama.named_parameters())) == 21  # all of them compared (embed, 2 x 9, norm, lm_head)


@pytest.mark.parametrize(
    "corrupt",
    [
        "model.layers.1.self_attn.qkv_proj",  # k/v rows of a fused tensor
        "model.layers.0.mlp.gate_up_proj",
        "lm_head",  # the CPU engine's prepacked lm_head: an update that never lands
        "model.norm",
    ],
)
def test_a_tensor_that_did_not_land_is_reported_by_name(llama, corrupt):
    engine = _engine_like(llama)
    w = engine.get_submodule(corrupt).weight
    with torch.no_grad():
        w[-2 if corrupt.endswith(("qkv_proj", "gate_up_proj")) else 0].fill_(
            float("nan")
        )  # garbage where the broadcast should have written
    bad = _check(llama, engine)
    assert len(bad) == 1, bad
    want = {"model.layers.1.self_attn.qkv_proj": "v_proj", "model.layers.0.mlp.gate_up_proj": "up_proj"}
    assert want.get(corrupt, corrupt.split(".")[-1]) in bad[0]


def test_a_missing_tensor_and_tensor_parallel_engines_are_refused(llama):
    from envkit.trainers.openrlhf.weight_check import WeightSyncError, actor_checksums, compare, engine_checksums

    engine = _engine_like(llama)
    del engine.model.norm.weight
    actor = actor_checksums(llama)
    specs = {name: (dtype, shape) for name, (dtype, shape, _) in actor.items()}
    assert compare(actor, engine_checksums(engine, specs, 1)) == ["model.norm.weight (missing: 'model.norm.weight')"]
    with pytest.raises(WeightSyncError, match="tensor_parallel_size 2"):
        engine_checksums(engine, specs, 2)
