"""The transformers scorer and policy on a CUDA GPU (marker `gpu`: never in CI; run on a GPU machine)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.credit.sero import SeroOptions  # noqa: E402
from envkit.oracles.model_policies import TransformersPolicy  # noqa: E402
from envkit.oracles.scorers import TransformersScorer  # noqa: E402
from envkit.policies import PolicyInput  # noqa: E402
from envkit.runtime.models import ModelConfig, load_model  # noqa: E402

ADM = {"admissible_actions": ["left", "right", "stay", "teleport"]}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_scorer_and_policy_on_cuda_match_cpu(tmp_path):
    cfg = dict(path="tiny:bytes", hidden_size=64, layers=2, heads=2)
    cpu_model, tok = load_model(ModelConfig(**cfg, device="cpu"))
    gpu_model, _ = load_model(ModelConfig(**cfg, device="cuda"))
    xs = [PolicyInput(f"You are at cell {i}.", ADM, key=i) for i in range(4)]
    acts = ["right", "left", "teleport", "stay"]
    cpu = TransformersScorer(cpu_model, tok).loglik(xs, acts)
    gpu = TransformersScorer(gpu_model, tok).loglik(xs, acts)
    assert gpu == pytest.approx(cpu, abs=1e-3)
    pol = TransformersPolicy(gpu_model, tok, mode="choose", temperature=0.0)
    assert pol.act(xs) == TransformersPolicy(cpu_model, tok, mode="choose", temperature=0.0).act(xs)

    from envkit.oracles.pipeline import RunConfig, run

    out = tmp_path / "gpu.jsonl"
    s = run(
        RunConfig(env_id="envkit/Toy-v0", env_kwargs={"max_steps": 10}, max_steps=10, sero=SeroOptions(min_budget=7), tasks=2, group=4,
                  workers=1, backend="inprocess", out=str(out), progress=False, device="cuda"),
        policy=pol,
        scorer=TransformersScorer(gpu_model, tok),
    )["totals"]  # fmt: skip
    assert s["continued_to_success"] == s["roots_tried"]
