"""EDEN's update path in the local trainer: row alignment of advantages, and ratio = 1 for noisy rows.

These are the invariants checked when diagnosing EDEN's decline on the arithmetic task (docs/training.md):
kept rows carry their own (gamma-scaled for noisy rows) advantage, dropped rows never reach the loss, and the
old log-probs of noisy rows are the CLEAN-prompt log-probs, so the first epoch's importance ratio is exactly 1.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import envkit.trainers.local.update as update_mod  # noqa: E402
from envkit.credit.advantages import group_advantages  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.explorers.eden import EdenBankConfig  # noqa: E402
from envkit.trainers.local.contracts import Budget, RolloutCredit  # noqa: E402
from envkit.trainers.local.prompt_encoding import encode_prompt  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402
from envkit.trainers.local.update import LossConfig  # noqa: E402

torch.set_num_threads(1)
SMALL = ModelConfig(path="tiny:arith", device="cpu", hidden_size=32, layers=2, heads=4)
EDEN = EdenBankConfig(
    n_noisy=2, n_anchors=2, candidate_percentiles=(0.0, 100.0), n_selection_prompts=4, max_scored=None,
    min_validity=0.0, max_cos=1.0, gamma=0.5, top_p=0.5,
)  # fmt: skip


def _trainer(tmp_path, **kw) -> LocalTrainer:
    cfg = TrainConfig(
        task="arith:1", model=SMALL, prompts_per_step=4, group_size=4, max_new_tokens=4, explorer="eden", eden=EDEN,
        run_dir=str(tmp_path), tensorboard=False, plot=False, progress=False, **kw,
    )  # fmt: skip
    return LocalTrainer(cfg)


def _collect(trainer: LocalTrainer, step: int, seed: int) -> tuple[list, list, list, RolloutCredit]:
    """The step's prompts, its EDEN rollouts, their raw GRPO advantages and EDEN's credit of them (the same
    rollouts the trainer's step collects: every step's randomness derives from (seed, step))."""
    cfg = trainer.cfg
    problems = trainer.task.sample(np.random.default_rng([cfg.seed, step]), cfg.prompts_per_step)
    prompts = [encode_prompt(trainer.tok, p.prompt, raw=True) for p in problems]
    rolls = trainer.explorer.collect(step, problems, prompts, Budget.of(cfg), seed=seed)
    raw = group_advantages(np.array([r.reward for r in rolls]), np.array([r.group for r in rolls]), "grpo")
    credit = trainer.explorer.postprocess(step, problems, rolls, tuple(raw.tolist()))
    return prompts, rolls, raw.tolist(), credit


def _kept_rows(trainer: LocalTrainer, step: int, seed: int) -> list:
    _, rolls, _, credit = _collect(trainer, step, seed)
    return [r for i, r in enumerate(rolls) if credit.keeps(i)]


@pytest.mark.slow  # ~3.5 s: a 40-step warm-up so that some groups have successes
def test_kept_rows_carry_their_own_advantage_and_dropped_rows_leave_the_batch(tmp_path):
    trainer = _trainer(tmp_path, sft_steps=40, sft_batch=16)  # a short warm-up, so some groups have successes
    step, seed = 1, 11
    batch, metrics = trainer.source.batch(step, seed)
    # Re-collect the same rollouts to see every row.
    prompts, rolls, raw, credit = _collect(trainer, step, seed)
    kept = [(j, r, a) for j, (r, a) in enumerate(zip(rolls, raw, strict=True)) if credit.keeps(j)]
    assert len(batch) == len(kept) == metrics["rows_in_loss"] == 4 * 2 + 4  # all standard + half the noisy
    for i, (j, r, a) in enumerate(kept):
        assert batch.prompts[i] == prompts[r.group]  # the CLEAN prompt, no extra position
        assert batch.responses[i] == r.response_ids
        expected = EDEN.gamma * a if r.noisy else a
        assert credit.advantages[j] == pytest.approx(expected)
        assert batch.advantages[i] == pytest.approx([expected] * len(r.response_ids))
        assert batch.weights[i] == 1.0  # gamma is in the advantage, not applied twice
    assert sum(r.noisy for _, r, _ in kept) == 4
    assert any(a != 0 for _, r, a in kept if r.noisy) and any(a != 0 for _, r, a in kept if not r.noisy)


def test_first_epoch_ratio_is_one_for_clean_and_noisy_rows(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, loss=LossConfig(ppo_epochs=2))
    batch, _ = trainer.source.batch(1, 11)
    assert any(r.noisy for r in _kept_rows(trainer, 1, 11))
    # An untrained model rarely succeeds (all-zero advantages would not move it): give the rows +-1 so the
    # second epoch differs; the first epoch's ratio does not depend on the advantages.
    batch.advantages = [[float((-1) ** i)] * len(a) for i, a in enumerate(batch.advantages)]
    ratios: list = []
    original = update_mod.policy_loss

    def spy(logp, old_logp, adv, mask, **kw):
        ratios.append(torch.exp(logp - old_logp).detach()[mask > 0])
        return original(logp, old_logp, adv, mask, **kw)

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    trainer.model.train()
    update_mod.update(trainer.model, trainer.optimizer, batch, trainer.cfg.loss, trainer.tok.pad_token_id)
    n_mb = -(-len(batch) // trainer.cfg.loss.micro_batch)
    first = torch.cat(ratios[:n_mb])
    assert first.numel() == sum(len(r) for r in batch.responses)
    assert torch.allclose(first, torch.ones_like(first), atol=1e-5)
    # The second epoch moved (the optimizer stepped), so the ratio test is not vacuous.
    second = torch.cat(ratios[n_mb:])
    assert not torch.allclose(second, torch.ones_like(second), atol=1e-7)
