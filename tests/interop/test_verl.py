"""verl 0.9.1: the ``envkit`` AgentLoopBase subclass, run through verl's own classes on CPU.

Run for real: verl's agent-loop registry and its hydra instantiation (as AgentLoopWorker does it), AgentLoopBase's
Continuous Token builder and merges, AgentLoopOutput and its ``as_dict`` tensors, with a real tiny Qwen2 model and an
envkit env. Stubbed: only the LLM server (`LocalGeneration` generates with the same model in this process, where
verl would call its vLLM/SGLang server). Not run: AgentLoopWorker/AgentLoopManager (Ray actors around GPU servers)
and a verl training step.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip(
    "verl.experimental.agent_loop",
    reason="needs the interop venv: bash .ci/install.d/40-interop.sh, then .venv-interop/bin/python -m pytest",
)
pytestmark = pytest.mark.slow  # imports verl, ray, hydra, transformers

import gymnasium  # noqa: E402
import hydra  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import envkit.interop.verl  # noqa: E402,F401  (registers "envkit")
from envkit.runtime.models import ModelConfig, byte_tokenizer, tiny_model  # noqa: E402


class LocalGeneration:
    """Stands in for verl's LLM server client: sample with a local model, return token ids and log-probs."""

    def __init__(self, model, tok, max_new_tokens=12):
        self.model, self.tok, self.max_new_tokens = model, tok, max_new_tokens

    async def generate(self, request_id, prompt_ids, sampling_params, **_):
        torch.manual_seed(len(prompt_ids))
        out = self.model.generate(
            torch.tensor([prompt_ids]), max_new_tokens=self.max_new_tokens, do_sample=True,
            output_scores=True, return_dict_in_generate=True, pad_token_id=self.tok.pad_token_id,
        )  # fmt: skip
        new = out.sequences[0, len(prompt_ids) :].tolist()
        lps = [torch.log_softmax(s[0], -1)[t].item() for s, t in zip(out.scores, new)]
        return TokenOutput(token_ids=new, log_probs=lps, stop_reason="completed")


def test_envkit_agent_loop_plays_webshop_through_verls_classes():
    tok = byte_tokenizer()
    model = tiny_model(
        len(tok), ModelConfig(path="tiny:bytes", hidden_size=32, layers=1, heads=2, max_positions=8192), tok
    )
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 2048, "multi_turn": {}}},
        "data": {},
        "envkit": {"env_id": "envkit/WebShop-v0", "max_turns": 3},
    })  # fmt: skip

    async def main():
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry["envkit"], trainer_config=DictConfigWrap(config=config),
            server_manager=LocalGeneration(model, tok), tokenizer=tok, processor=None, hf_model_type=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data), tools=ToolListWrap([]),
        )  # fmt: skip
        assert type(loop).__name__ == "EnvkitAgentLoop"
        return await loop.run({"temperature": 1.0}, raw_prompt=[{"role": "system", "content": "Shop."}],
                              extra_info={"seed": 4})  # fmt: skip

    out = asyncio.run(main())
    assert out.num_turns == 7 and len(out.extra_fields["turn_scores"]) == 3
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    ones = sum(out.response_mask)
    assert 0 < ones < len(out.response_mask)  # model tokens (1) and env observation tokens (0)
    # the env observations sit in the response, masked out
    text = tok.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "Admissible actions:" in text
    # the same actions in a local env give the same rewards
    env = gymnasium.make("envkit/WebShop-v0")
    env.reset(seed=4)
    assert [env.step(a)[1] for a in out.extra_fields["envkit_actions"]] == out.extra_fields["turn_scores"]
    assert out.reward_score == sum(out.extra_fields["turn_scores"])
    d = out.as_dict()  # what verl's worker turns into its batch
    assert d["responses"].dtype == torch.int64 and d["rm_scores"][-1].item() == out.reward_score
    assert d["rollout_log_probs"].shape == d["responses"].shape
