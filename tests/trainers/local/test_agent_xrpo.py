"""XRPO on agent envs in the local trainer (`envkit.trainers.local.explorers.xrpo`), on the real Toy-v0 env with a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.core import Step  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.explorers.xrpo import XrpoConfig, sharpen  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig, Episode  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402

torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)
DEMO = ("You are at cell 0 of 8. The goal is cell 2. Reach the goal.", "right\nright")


def _trainer(tmp_path, estimator="grpo", sero=False, **xrpo) -> LocalTrainer:
    cfg = TrainConfig(
        task="envkit/Toy-v0", model=TINY, run_dir=str(tmp_path), steps=2, prompts_per_step=3, group_size=4,
        max_new_tokens=6, explorer="xrpo", xrpo=XrpoConfig(n0=2, icl_backend="tfidf", chunk_size=1, **xrpo),
        agent=AgentConfig(max_turns=4, max_context_tokens=2000, estimator=estimator, sero=sero),
        tensorboard=False, plot=False, progress=False, save_every=1,
    )  # fmt: skip
    trainer = LocalTrainer(cfg)
    trainer.explorer.corpus.add("111", *DEMO)
    trainer.model.eval()
    return trainer


def _batch(trainer):
    return trainer.source.batch(1, seed=3)


def test_the_budget_is_kept_and_all_fail_tasks_get_icl_first_prompts(tmp_path):
    trainer = _trainer(tmp_path)
    batch, m = _batch(trainer)
    assert m["success_rate"] == 0.0  # a random model: every task is all-fail after phase 1
    assert m["rollouts"] == len(batch) == 3 * 4 and sum(m["xrpo_rollout_counts"]) == 12
    assert min(m["xrpo_rollout_counts"]) >= 2 and m["xrpo_phases"] >= 2
    assert m["xrpo_icl_share"] == pytest.approx(0.5)  # the later 2 of each task's 4 episodes
    tok = trainer.tok
    plain = [p for p in batch.prompts if DEMO[1] not in tok.decode(p)]
    seeded = [p for p in batch.prompts if DEMO[1] in tok.decode(p)]
    assert len(plain) == len(seeded) == 6
    assert all(len(s) > len(p) for s in seeded for p in plain)
    assert DEMO[0] in tok.decode(seeded[0])


def test_clean_loss_prompt_keeps_the_episodes_and_trains_on_the_plain_prompt(tmp_path):
    trainer = _trainer(tmp_path / "a")
    aug_batch, _ = _batch(trainer)
    clean_batch, m = _batch(_trainer(tmp_path / "c", icl_loss_prompt="clean"))
    assert m["xrpo_icl_share"] == pytest.approx(0.5)
    assert clean_batch.responses == aug_batch.responses  # sampled from the same (augmented) prompts
    plain = {tuple(p) for p in aug_batch.prompts if DEMO[1] not in trainer.tok.decode(p)}
    assert {tuple(p) for p in clean_batch.prompts} == plain  # every row trains on its task's plain prompt
    assert len({tuple(p) for p in aug_batch.prompts}) > len(plain)


def _played(group, index, start, actions, success, **tags):
    """An episode whose record is `actions` from `start`, the last step's info carrying the env's verdict."""
    steps = [Step(start, a, 0.0, start, t == len(actions) - 1, False, {"success": success})
             for t, a in enumerate(actions)]  # fmt: skip
    return Episode.from_steps(group, index, start, {}, steps, **tags)


def test_sharpening_and_corpus_growth_on_episode_rows(tmp_path):
    trainer = _trainer(tmp_path)
    driver = trainer.explorer
    driver._stats = {}

    def ep(group, index, success, logprobs, actions):
        return _played(group, index, f"task {group} start", actions, success, logprobs=list(logprobs), seed=100 + group)

    eps = [
        ep(0, 0, True, [-0.1, -0.2], ["right", "right"]),
        ep(0, 1, True, [-2.0, -3.0], ["left", "right", "right", "right"]),
        ep(0, 2, False, [-1.0], ["stay"]),
        ep(1, 0, False, [-1.0], ["stay"]),
    ]
    adv = [np.full(len(e.actions), a) for e, a in zip(eps, [0.5, 0.5, -1.0, 0.0], strict=True)]
    credit = driver.postprocess(eps, adv)
    out, stats = credit.advantages, credit.metrics
    want = sharpen(np.array([0.5, 0.5, -1.0, 0.0]), np.array([1, 1, 0, 0], bool), [-0.15, -2.5, -1.0, -1.0],
                   [0, 0, 0, 1], lambda_n=2.5, kappa=0.5)  # fmt: skip
    assert not np.allclose(want, [0.5, 0.5, -1.0, 0.0])  # the novel (less likely) success gained
    for o, w, e in zip(out, want, eps, strict=True):
        assert o.shape == (len(e.actions),) and np.allclose(o, w)
    assert stats["xrpo_corpus_added"] == 1 and stats["xrpo_corpus_size"] == 2
    assert driver.corpus.entries["100"].solution == "right\nright"  # the shorter success is kept


def test_gigpo_turn_advantages_are_not_sharpened(tmp_path):
    trainer = _trainer(tmp_path, estimator="gigpo")
    e = _played(0, 0, "s", ["right"], True, logprobs=[-0.5], seed=7)
    out = trainer.explorer.postprocess([e], [np.array([0.25])]).advantages
    assert out[0].tolist() == [0.25]


def test_training_with_sero_and_resuming_keeps_the_corpus(tmp_path):
    trainer = _trainer(tmp_path, estimator="graphgpo", sero=True)
    recs = trainer.train()
    assert [r["step"] for r in recs] == [1, 2]
    assert all("xrpo_icl_share" in r and "sero_tried" in r for r in recs)
    size = len(trainer.explorer.corpus)
    cfg = trainer.cfg
    resumed = LocalTrainer(TrainConfig(**{**cfg.__dict__, "resume": True, "steps": 3}))
    assert len(resumed.explorer.corpus) == size >= 1
