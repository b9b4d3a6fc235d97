"""TRL 1.16: an envkit env as GRPOTrainer's environment_factory (real trainer, tiny random model, CPU)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

trl = pytest.importorskip(
    "trl", reason="needs the interop venv: bash .ci/install.d/40-interop.sh, then .venv-interop/bin/python -m pytest"
)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from envkit.interop.trl import trl_environment  # noqa: E402

SHOP = "envkit/WebShop-v0"
pytestmark = pytest.mark.slow  # imports trl + transformers (~30 s)


def _tokenizer():
    from envkit.runtime.models import byte_tokenizer

    tok = byte_tokenizer()  # a byte-level tokenizer built offline, with TRL's own Qwen3 tool-calling template
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    return tok


def test_the_env_class_is_what_trl_expects_and_its_tool_steps_the_env():
    from transformers.utils import get_json_schema
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    cls = trl_environment(SHOP)
    env = cls()
    assert [n for n in vars(cls) if not n.startswith("_")] == ["reset", "act", "get_reward"]
    schema = get_json_schema(env.act)  # what TRL renders into the prompt
    assert schema["function"]["name"] == "act" and list(schema["function"]["parameters"]["properties"]) == ["action"]
    first = env.reset(prompt="x", seed=3)
    assert "Admissible actions:" in first
    tok = add_response_schema(_tokenizer())
    assert supports_tool_calling(tok)
    # A completion with a tool call, parsed by TRL's parser, runs the tool as TRL's tool loop does.
    action = first.split("Admissible actions: ")[1].split(";")[0]
    call_json = json.dumps({"name": "act", "arguments": {"action": action}})
    text = f"<tool_call>\n{call_json}\n</tool_call><|im_end|>"
    call = tok.parse_response(text, prefix="")["tool_calls"][0]["function"]
    out = getattr(env, call["name"])(**call["arguments"])
    assert out != first and "Admissible actions:" in out
    assert env.get_reward() == 0.0


@pytest.mark.slow
def test_grpo_trainer_runs_on_an_envkit_env_and_logs_its_rewards(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from envkit.runtime.models import ModelConfig, tiny_model

    tok = _tokenizer()
    model = tiny_model(
        len(tok), ModelConfig(path="tiny:bytes", hidden_size=32, layers=1, heads=2, max_positions=4096), tok
    )
    rows = {"prompt": [[{"role": "user", "content": "Buy what the instruction asks for."}]] * 4, "seed": [0, 1, 2, 3]}
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=8, report_to=[], use_cpu=True, logging_steps=1, save_strategy="no",
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict(rows), processing_class=tok,
        environment_factory=trl_environment(SHOP),
    )  # fmt: skip
    trainer.train()
    logs = [h for h in trainer.state.log_history if "rewards/Envkit_WebShop_v0/mean" in h]
    assert len(logs) == 2  # the env's reward column, logged at every step
    assert all(math.isfinite(h["rewards/Envkit_WebShop_v0/mean"]) and "tools/call_frequency" in h for h in logs)
    assert trainer.state.global_step == 2
