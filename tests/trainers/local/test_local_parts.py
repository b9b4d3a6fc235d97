"""Local trainer parts on tiny random models: generation, token-level batches, the update, EDEN/XRPO drivers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig, load_model  # noqa: E402
from envkit.trainers.explorers.eden import EdenBankConfig  # noqa: E402
from envkit.trainers.explorers.xrpo import XrpoConfig  # noqa: E402
from envkit.trainers.local.contracts import Budget, RolloutCredit  # noqa: E402
from envkit.trainers.local.explorers.eden import EdenDriver  # noqa: E402
from envkit.trainers.local.explorers.plain import PlainGroups  # noqa: E402
from envkit.trainers.local.explorers.xrpo import XrpoDriver  # noqa: E402
from envkit.trainers.local.generation import batch_sequences, sample, score  # noqa: E402
from envkit.trainers.local.prompt_encoding import encode_prompt  # noqa: E402
from envkit.trainers.local.single_turn_source import SingleTurnSource  # noqa: E402
from envkit.trainers.local.tasks import ArithmeticTask  # noqa: E402
from envkit.trainers.local.trainer import TrainConfig  # noqa: E402
from envkit.trainers.local.update import LossConfig, TrainBatch, update  # noqa: E402

torch.set_num_threads(1)
SMALL = ModelConfig(path="tiny:arith", device="cpu", hidden_size=32, layers=2, heads=4)


@pytest.fixture()
def arith():
    model, tok = load_model(SMALL)
    model.eval()
    return model, tok


def _prompts(tok, texts):
    return [encode_prompt(tok, t, raw=True) for t in texts]


def test_arith_tokenizer_roundtrip_and_vocab(arith):
    _, tok = arith
    assert len(tok) == 15
    ids = tok("37+45=")["input_ids"]
    assert tok.decode(ids) == "37+45="
    assert encode_prompt(tok, "1+2=", raw=True)[0] == tok.bos_token_id


def test_clean_rows_in_embeds_path_match_ids_path_and_extra_row_changes_output(arith):
    model, tok = arith
    prompts = _prompts(tok, ["12+3=", "4+56="])
    greedy = [1e-4, 1e-4]
    a = sample(model, tok, prompts, greedy, max_new_tokens=5, seed=0)
    b = sample(model, tok, prompts, greedy, max_new_tokens=5, seed=0, extra_rows=[None, None])
    assert a.tokens == b.tokens
    # One appended row (a vocabulary embedding) changes the continuation of that row only.
    emb = model.get_input_embeddings().weight.detach()
    changed = []
    for tid in range(3, 15):
        c = sample(model, tok, prompts, greedy, max_new_tokens=5, seed=0, extra_rows=[emb[tid], None])
        assert c.tokens[1] == a.tokens[1]
        changed.append(c.tokens[0] != a.tokens[0])
    assert any(changed)


def test_recorded_sampling_logprobs_equal_the_training_forward_at_temperature_one(arith):
    model, tok = arith
    prompts = _prompts(tok, ["12+3=", "4+56=", "9+9="])
    s = sample(model, tok, prompts, [1.0, 1.0, 1.0], max_new_tokens=5, seed=3, return_logprobs=True)
    ids, attn, target = batch_sequences(prompts, s.tokens, tok.pad_token_id, "cpu")
    with torch.no_grad():
        sc = score(model, ids, attn, target)
    assert s.logprobs is not None
    for i, (p, t) in enumerate(zip(prompts, s.tokens)):
        want = sc.logp[i, len(p) - 1 : len(p) - 1 + len(t)]
        assert torch.allclose(torch.tensor(s.logprobs[i]), want, atol=1e-4)
    assert torch.all(sc.entropy[target > 0] > 0)


def test_batch_sequences_marks_only_response_tokens():
    ids, attn, target = batch_sequences([[1, 5, 6], [1, 7]], [[8, 2], [9, 9, 2]], 0, "cpu")
    assert ids.tolist() == [[1, 5, 6, 8, 2], [1, 7, 9, 9, 2]]
    # target[t] = 1 when token t+1 is a response token
    assert target.tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]
    _, _, t2 = batch_sequences([[1, 5]], [[8, 3, 2]], 0, "cpu", loss_masks=[[1, 0, 1]])
    assert t2.tolist() == [[0, 1, 0, 1]]


def _row_logp(model, prompt, response):
    ids, attn, target = batch_sequences([prompt], [response], 0, "cpu")
    with torch.no_grad():
        return float(score(model, ids, attn, target, with_entropy=False).logp.sum())


def test_update_moves_probability_towards_positive_advantage(arith):
    model, tok = arith
    model.train()
    p = encode_prompt(tok, "12+3=", raw=True)
    good, bad = tok("15")["input_ids"] + [tok.eos_token_id], tok("99")["input_ids"] + [tok.eos_token_id]
    before = (_row_logp(model, p, good), _row_logp(model, p, bad))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    batch = TrainBatch([p, p], [good, bad], [[1.0] * 3, [-1.0] * 3], [[1] * 3, [1] * 3], [1.0, 1.0])
    for _ in range(3):
        stats = update(model, opt, batch, LossConfig(), tok.pad_token_id)
    after = (_row_logp(model, p, good), _row_logp(model, p, bad))
    assert after[0] > before[0] and after[1] < before[1]
    assert {"pg_loss", "entropy", "clip_fraction", "grad_norm"} <= set(stats)


def test_zero_weight_rows_and_micro_batching(arith):
    model, tok = arith
    model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    p = encode_prompt(tok, "1+2=", raw=True)
    rows = [tok(x)["input_ids"] + [tok.eos_token_id] for x in ("3", "4", "55", "6")]
    batch = TrainBatch(
        [p] * 4,
        rows,
        [[a] * len(r) for a, r in zip((1.0, -1.0, 0.5, -0.5), rows)],
        [[1] * len(r) for r in rows],
        [1.0, 1.0, 1.0, 1.0],
    )
    grads = []
    for mb in (4, 1):
        model.load_state_dict(state)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        update(model, opt, batch, LossConfig(micro_batch=mb, max_grad_norm=0.0), tok.pad_token_id)
        grads.append(torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    # A row with weight 0 contributes no gradient: equal to dropping it.
    model.load_state_dict(state)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    zero = dataclasses.replace(batch, weights=[1.0, 1.0, 1.0, 0.0])
    update(model, opt, zero, LossConfig(max_grad_norm=0.0, agg="seq_mean"), tok.pad_token_id)
    g_zero = torch.cat([q.grad.flatten() for q in model.parameters() if q.grad is not None])
    assert not torch.allclose(g_zero, grads[0])


def _cfg(**kw):
    return TrainConfig(task="arith", model=SMALL, prompts_per_step=3, group_size=4, max_new_tokens=4, **kw)


def test_eden_rollouts_keep_clean_prompts_and_mark_noisy_rows(arith):
    model, tok = arith
    task = ArithmeticTask(digits=1)
    eden = EdenBankConfig(
        n_noisy=1,
        n_anchors=2,
        candidate_percentiles=(0.0, 100.0),
        n_selection_prompts=4,
        max_scored=None,
        min_validity=0.0,
        max_cos=1.0,
    )
    tcfg = _cfg(explorer="eden", eden=eden)
    driver = EdenDriver(eden, model, tok, task, tcfg, None)
    assert len(driver.bank) == 2
    # Anchors are rows of the model's own input-embedding table.
    table = model.get_input_embeddings().weight.detach().numpy()
    assert np.allclose(driver.bank.vectors, table[driver.bank.token_ids])
    problems = task.sample(np.random.default_rng(0), 3)
    prompts = [encode_prompt(tok, p.prompt, raw=True) for p in problems]
    out = driver.collect(1, problems, prompts, Budget(3, 4), seed=5)
    assert len(out) == 3 * 4
    assert [r.noisy for r in out] == [False, False, False, True] * 3
    # The loss sees the CLEAN prompt ids: no extra position anywhere.
    assert all(r.prompt_ids == prompts[r.group] for r in out)
    out = [dataclasses.replace(r, reward=float(r.group == 0 and r.noisy)) for r in out]
    credit = driver.postprocess(1, problems, out, tuple(np.linspace(-1, 1, len(out)).tolist()))
    stats = credit.metrics
    assert {"eden_noisy_kept_share", "eden_noisy_success_rate"} <= set(stats)
    assert stats["eden_noisy_success_rate"] == pytest.approx(1 / 3)
    assert credit.in_loss is not None and len(credit.advantages) == len(out)
    dropped = [r for i, r in enumerate(out) if not credit.keeps(i)]
    assert dropped
    assert all(r.noisy for r in dropped)
    # The credit is a value of its own: the rollouts are frozen and keep their sampled fields.
    with pytest.raises(dataclasses.FrozenInstanceError):
        out[0].reward = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="in_loss flags for 12 rollouts"):
        RolloutCredit(credit.advantages, in_loss=(True,))


def test_xrpo_keeps_the_budget_and_seeds_all_fail_prompts_with_icl(arith):
    model, tok = arith
    task = ArithmeticTask(digits=1)
    xrpo = XrpoConfig(n0=2, icl_backend="tfidf", chunk_size=1)
    tcfg = _cfg(explorer="xrpo", xrpo=xrpo)
    driver = XrpoDriver(xrpo, model, tok, task, tcfg, None)
    driver.corpus.add("1+1", "1+1=", "2")
    driver.corpus.add("2+3", "2+3=", "5")
    problems = task.sample(np.random.default_rng(1), 3)
    prompts = [encode_prompt(tok, p.prompt, raw=True) for p in problems]
    out = driver.collect(2, problems, prompts, Budget(3, 4), seed=9)
    assert len(out) == 3 * 4  # same budget as GRPO
    # A random model fails everything: after phase 1 every prompt is all-fail and later rows carry ICL demos.
    assert sum(r.reward for r in out) == 0
    icl_rows = [r for r in out if r.icl]
    assert len(icl_rows) == 3 * 4 - 3 * 2
    for r in icl_rows:
        assert len(r.prompt_ids) > len(prompts[r.group])
        assert r.prompt_ids[-len(prompts[r.group]) + 1 :] == prompts[r.group][1:]
        assert tok.eos_token_id in r.prompt_ids
    stats = driver.postprocess(2, problems, out, tuple([0.0] * len(out))).metrics
    assert stats["xrpo_icl_share"] == pytest.approx(0.5)
    assert stats["xrpo_rollouts_mean"] == 4 and stats["xrpo_phases"] >= 2
    assert sum(stats["xrpo_rollout_counts"]) == 12 and min(stats["xrpo_rollout_counts"]) >= 2
    state = driver.state_dict()
    again = XrpoDriver(xrpo, model, tok, task, tcfg, state)
    assert len(again.corpus) == 2


def test_xrpo_clean_loss_prompt_keeps_the_samples_and_trains_on_the_plain_prompt(arith):
    model, tok = arith
    task = ArithmeticTask(digits=1)
    problems = task.sample(np.random.default_rng(1), 3)
    prompts = [encode_prompt(tok, p.prompt, raw=True) for p in problems]
    runs = {}
    for mode in ("augmented", "clean"):
        xrpo = XrpoConfig(n0=2, icl_backend="tfidf", chunk_size=1, icl_loss_prompt=mode)
        driver = XrpoDriver(xrpo, model, tok, task, _cfg(explorer="xrpo", xrpo=xrpo), None)
        driver.corpus.add("1+1", "1+1=", "2")
        driver.corpus.add("2+3", "2+3=", "5")
        runs[mode] = driver.collect(2, problems, prompts, Budget(3, 4), seed=9)
    aug, clean = runs["augmented"], runs["clean"]
    assert [r.response_ids for r in aug] == [r.response_ids for r in clean]  # sampled from the same prompts
    assert [r.icl for r in aug] == [r.icl for r in clean] and sum(r.icl for r in clean) == 6
    for a, c in zip(aug, clean, strict=True):
        assert c.prompt_ids == prompts[c.group]
        assert (len(a.prompt_ids) > len(c.prompt_ids)) == a.icl
    with pytest.raises(ValueError, match="icl_loss_prompt must be 'augmented' or 'clean'"):
        XrpoConfig(icl_loss_prompt="plain")  # type: ignore[arg-type]


def test_eden_training_batch_scores_every_row_under_its_clean_prompt(tmp_path):
    from envkit.trainers.local.trainer import LocalTrainer

    eden = EdenBankConfig(
        n_noisy=2,
        n_anchors=2,
        candidate_percentiles=(0.0, 100.0),
        n_selection_prompts=4,
        max_scored=None,
        min_validity=0.0,
        max_cos=1.0,
    )
    cfg = dataclasses.replace(
        _cfg(explorer="eden", eden=eden),
        task="arith:1",
        run_dir=str(tmp_path),
        tensorboard=False,
        plot=False,
        progress=False,
    )
    trainer = LocalTrainer(cfg)
    batch, metrics = trainer.source.batch(1, seed=11)
    problems = trainer.task.sample(np.random.default_rng([cfg.seed, 1]), cfg.prompts_per_step)
    clean = {tuple(encode_prompt(trainer.tok, p.prompt, raw=True)) for p in problems}
    assert {tuple(p) for p in batch.prompts} <= clean
    # Kept rows: all standard ones plus the top-p share of noisy ones (2 per prompt, top_p 0.5).
    assert len(batch) == 3 * 2 + 3
    assert metrics["eden_noisy_kept_share"] == pytest.approx(0.5)


def test_checkpoints_keep_only_the_newest_n(tmp_path):
    from envkit.trainers.local.checkpoint import latest_checkpoint, load_state, save_checkpoint

    assert TrainConfig().keep_checkpoints == 1
    model, tok = load_model(ModelConfig(path="tiny:arith", hidden_size=16, layers=1, heads=2, device="cpu"))
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, tok, {"optimizer": {}}, keep=1)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000003"]
    assert latest_checkpoint(tmp_path).name == "step_000003" and load_state(latest_checkpoint(tmp_path))["step"] == 3
    save_checkpoint(tmp_path, 4, model, tok, {}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000003", "step_000004"]
    with pytest.raises(ValueError, match="keep must be >= 1"):
        save_checkpoint(tmp_path, 5, model, tok, {}, keep=0)


def test_update_policy_and_oracle_gradient_norms(arith):
    """`TrainBatch.oracle` splits the policy-loss gradient into the policy rows' and the oracle rows' parts."""
    model, tok = arith
    model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    p = encode_prompt(tok, "12+3=", raw=True)
    good, bad = tok("15")["input_ids"] + [tok.eos_token_id], tok("99")["input_ids"] + [tok.eos_token_id]
    base = TrainBatch([p, p], [good, bad], [[1.0] * len(good), [-1.0] * len(bad)], [[1] * 3, [1] * 3], [1.0, 1.0])
    plain = update(model, torch.optim.SGD(model.parameters(), lr=0.0), base, LossConfig(), tok.pad_token_id)
    assert "grad_norm_policy" not in plain  # no oracle flags: nothing extra computed
    # No oracle rows: the oracle part is exactly 0 and the policy part is the whole gradient.
    model.load_state_dict(state)
    none = dataclasses.replace(base, oracle=[False, False])
    s = update(model, torch.optim.SGD(model.parameters(), lr=0.0), none, LossConfig(), tok.pad_token_id)
    assert s["grad_norm_oracle"] == 0.0 and s["oracle_token_share"] == 0.0
    assert s["grad_norm_policy"] == pytest.approx(s["grad_norm"], rel=1e-5)
    assert s["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-6)
    # The same row twice, once as a policy row and once as an oracle row: each part is half the gradient.
    model.load_state_dict(state)
    twin = TrainBatch([p, p], [good, good], [[1.0] * len(good)] * 2, [[1] * 3, [1] * 3], [1.0, 1.0], [False, True])
    s = update(model, torch.optim.SGD(model.parameters(), lr=0.0), twin, LossConfig(micro_batch=1), tok.pad_token_id)
    assert s["grad_norm_policy"] == pytest.approx(s["grad_norm"] / 2, rel=1e-5)
    assert s["grad_norm_oracle"] == pytest.approx(s["grad_norm"] / 2, rel=1e-5)
    assert s["oracle_token_share"] == 0.5
    # Only the oracle row carries advantage: the whole gradient is the oracle part's, the policy part is 0.
    model.load_state_dict(state)
    only = dataclasses.replace(base, advantages=[[0.0] * 3, [-1.0] * 3], oracle=[False, True])
    s = update(model, torch.optim.SGD(model.parameters(), lr=0.0), only, LossConfig(), tok.pad_token_id)
    assert s["grad_norm_policy"] == pytest.approx(0.0, abs=1e-6)  # the whole gradient minus the oracle part
    assert s["grad_norm_oracle"] == pytest.approx(s["grad_norm"], rel=1e-5) and s["grad_norm"] > 0
    # With an entropy term the policy part is its own backward pass: the twins still split the policy loss evenly.
    model.load_state_dict(state)
    s = update(model, torch.optim.SGD(model.parameters(), lr=0.0), twin, LossConfig(entropy_coef=0.5), tok.pad_token_id)
    assert s["grad_norm_policy"] == pytest.approx(s["grad_norm_oracle"], rel=1e-5) and s["grad_norm_oracle"] > 0
    with pytest.raises(ValueError, match="one per row"):
        update(model, torch.optim.SGD(model.parameters(), lr=0.0), dataclasses.replace(base, oracle=[True]),
               LossConfig(), tok.pad_token_id)  # fmt: skip


def test_single_turn_batch_rows_follow_the_explorers_credit_and_a_short_credit_is_refused(arith):
    """`SingleTurnSource.advantages` builds its rows from the `RolloutCredit` the explorer returns (its advantages,
    its in_loss), and refuses a credit that does not give one advantage per rollout."""
    model, tok = arith
    task = ArithmeticTask(digits=1)

    class HalfKept(PlainGroups):  # an explorer of this test: keeps every other rollout at advantage 0.5 * index
        def postprocess(self, step, problems, rollouts, advantages):
            n = len(rollouts) if self.run.seed == 0 else len(rollouts) - 1
            return RolloutCredit(tuple(0.5 * i for i in range(n)), {"x": 1.0}, tuple(i % 2 == 0 for i in range(n)))

    run = _cfg()
    source = SingleTurnSource(run, tok, task, HalfKept(run, model, tok, task))
    samples = source.collect(1, seed=3)
    batch, metrics = source.advantages(1, samples)
    assert metrics["x"] == 1.0 and metrics["rows_in_loss"] == len(batch) == 6
    kept = samples.rollouts[::2]
    assert batch.responses == [r.response_ids for r in kept]
    assert batch.advantages == [[0.5 * i] * len(r.response_ids) for i, r in zip(range(0, 12, 2), kept)]
    assert batch.weights == [1.0] * 6
    run = dataclasses.replace(run, seed=1)
    short = SingleTurnSource(run, tok, task, HalfKept(run, model, tok, task))
    with pytest.raises(RuntimeError, match="credited 11 rollouts of 12; an explorer returns one advantage"):
        short.advantages(1, short.collect(1, seed=3))
