"""EDEN on agent envs in the local trainer (`envkit.trainers.local.explorers.eden`), on the real Toy-v0 env with a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import envkit.trainers.local.multi_turn as mt  # noqa: E402
from envkit.core import Step  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.explorers.eden import EdenBankConfig, absorb, eden_advantages, select_noisy  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig, Episode  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402

torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)
EDEN = EdenBankConfig(
    n_noisy=2, n_anchors=2, n_selection_prompts=4, max_scored=6, candidate_percentiles=(0.0, 100.0), top_p=0.5,
    gamma=0.5,
)  # fmt: skip


def _trainer(tmp_path, estimator="grpo") -> LocalTrainer:
    cfg = TrainConfig(
        task="envkit/Toy-v0", model=TINY, run_dir=str(tmp_path), steps=2, prompts_per_step=3, group_size=4,
        max_new_tokens=6, explorer="eden", eden=EDEN, save_every=1, tensorboard=False, plot=False, progress=False,
        agent=AgentConfig(max_turns=4, max_context_tokens=2000, estimator=estimator),
    )  # fmt: skip
    with pytest.warns(UserWarning, match="relaxed"):  # a random model passes no validity bar
        trainer = LocalTrainer(cfg)
    trainer.model.eval()
    return trainer


def test_noisy_episodes_perturb_only_their_first_turn_and_train_on_clean_prompts(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path)
    calls: list = []
    original = mt.sample

    def spy(model, tok, contexts, temps, **kw):
        calls.append((len(contexts), list(temps), kw.get("extra_rows")))
        return original(model, tok, contexts, temps, **kw)

    monkeypatch.setattr(mt, "sample", spy)
    batch, m = trainer.source.batch(1, seed=3)
    first_n, first_temps, first_extra = calls[0]
    assert first_n == 12 and first_extra is not None
    noisy = [x is not None for x in first_extra]
    assert noisy == [False, False, True, True] * 3  # the last n_noisy of each task's group
    for x in first_extra:
        if x is not None:  # relative norm about rho around an anchor of the bank
            assert x.shape == (32,)
    assert all(c[2] is None for c in calls[1:])  # later turns: token context only (and no turn cache)
    assert first_temps[2] != first_temps[0]  # noisy episodes sample at the warmed noisy temperature (step 1)
    assert m["rollouts"] == 12 and m["rows_in_loss"] == 12 - 3  # top-p 0.5 keeps 3 of the 6 noisy episodes
    assert m["eden_noisy_kept_share"] == 0.5
    # Noisy and standard episodes of a task train on the same clean prompt ids: at most one prompt per task.
    assert len({tuple(p) for p in batch.prompts}) <= 3
    assert all("You are at cell" in trainer.tok.decode(p) for p in batch.prompts)


def _episodes(successes, noisy, turns=2):
    eps = []
    for i, (s, n) in enumerate(zip(successes, noisy, strict=True)):
        steps = [Step("s", "a", 0.0, "s", t == turns - 1, False, {"success": bool(s)}) for t in range(turns)]
        eps.append(Episode.from_steps(i // 4, i % 4, "s", {}, steps, noisy=bool(n)))
    return eps


def test_episode_level_advantages_are_edens_exactly(tmp_path):
    driver = _trainer(tmp_path).explorer
    succ = [1, 0, 1, 0, 0, 0, 1, 1]
    noisy = [0, 0, 1, 1] * 2
    eps = _episodes(succ, noisy)
    credit = driver.postprocess(eps, [np.zeros(2) for _ in eps])
    out, stats = credit.advantages, credit.metrics
    want = eden_advantages([float(s) for s in succ], [e.group for e in eps], np.array(noisy, bool), driver.cfg, "grpo")
    for o, w in zip(out, want.advantages, strict=True):
        assert np.allclose(o, [w, w])
    assert list(credit.in_loss) == want.loss_mask.tolist()
    assert "eden_noisy_kept_share" in stats


def test_turn_level_advantages_are_absorbed_like_the_openrlhf_backend(tmp_path):
    driver = _trainer(tmp_path, estimator="gigpo").explorer
    noisy = np.array([0, 0, 1, 1] * 2, bool)
    eps = _episodes([0] * 8, noisy)
    adv = [np.array([0.1 * (i + 1), -0.2 * i]) for i in range(8)]
    credit = driver.postprocess(eps, adv)
    out = credit.advantages
    row_abs = np.array([np.mean(np.abs(a)) for a in adv])
    keep = select_noisy(row_abs, noisy, 0.5)
    scale, keep = absorb(np.ones(8), noisy, keep, 0.5)
    for o, a, s in zip(out, adv, scale, strict=True):
        assert np.allclose(o, a * s)
    assert list(credit.in_loss) == keep.tolist() and sum(keep) == 6


def test_training_and_resume_keep_the_anchor_bank(tmp_path):
    trainer = _trainer(tmp_path)
    recs = trainer.train()
    assert [r["step"] for r in recs] == [1, 2] and all("eden_noisy_kept_share" in r for r in recs)
    bank = list(trainer.explorer.bank.token_ids)
    resumed = LocalTrainer(TrainConfig(**{**trainer.cfg.__dict__, "resume": True, "steps": 3}))  # no re-selection
    assert list(resumed.explorer.bank.token_ids) == bank
