"""The correct-action probe (`envkit.trainers.local.probe`): exact teacher-forced probabilities, oracle-path pairs on
the real Toy-v0 and WebShop envs and oracles, and the trainer's ``probe_*`` metrics."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig, load_model  # noqa: E402
from envkit.trainers.local.agent_bc import oracle_demos  # noqa: E402
from envkit.trainers.local.generation import batch_sequences, score  # noqa: E402
from envkit.trainers.local.probe import ProbePair, oracle_path_pairs, probe  # noqa: E402
from envkit.trainers.local.prompt_encoding import encode_prompt, encode_text  # noqa: E402

torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model(TINY)
    model.eval()
    return model, tok


def _p(model, tok, context, action):
    resp = [*encode_text(tok, action), tok.eos_token_id]
    ids, attn, target = batch_sequences([list(context)], [resp], tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp = score(model, ids, attn, target, with_entropy=False).logp[0, len(context) - 1 :]
    return math.exp(float(lp[: len(resp)].sum()))


def test_probe_is_the_teacher_forced_probability_of_the_action(tiny):
    model, tok = tiny
    ctx = tuple(encode_prompt(tok, "position 2 of 5, goal 4", raw=False))
    pairs = [ProbePair(ctx, "right"), ProbePair(ctx, "left", last=True), ProbePair("position 2 of 5", "stay")]
    want = [
        _p(model, tok, ctx, "right"),
        _p(model, tok, ctx, "left"),
        _p(model, tok, encode_prompt(tok, "position 2 of 5", raw=False), "stay"),
    ]
    got = probe(model, tok, pairs, chunk=2)
    assert got["probe_p_correct"] == pytest.approx(sum(want) / 3, rel=1e-4)
    assert got["probe_p_last"] == pytest.approx(want[1], rel=1e-4) and got["probe_pairs"] == 3.0
    with pytest.raises(ValueError, match="at least one"):
        probe(model, tok, [])


def test_oracle_path_pairs_follow_the_oracle_with_the_policy_s_context(tiny):
    _, tok = tiny
    pairs = oracle_path_pairs(tok, "envkit/Toy-v0", range(3), 20)
    demos = oracle_demos("envkit/Toy-v0", range(3), 20)
    assert [p.action for p in pairs] == [s.action for _, steps in demos for s in steps]
    assert sum(p.last for p in pairs) == len(demos)
    # each context is the previous one + the previous action's ids + EOS + the next observation's ids
    first = encode_prompt(tok, demos[0][0], raw=False)
    assert pairs[0].context == tuple(first)
    if len(demos[0][1]) > 1:
        act = [*encode_text(tok, pairs[0].action), tok.eos_token_id]
        assert pairs[1].context[: len(first) + len(act)] == tuple(first) + tuple(act)


@pytest.mark.slow  # ~30 s: the WebShop catalog and its oracle
def test_webshop_oracle_path_pairs_end_with_buy_now(tiny, webshop_data, monkeypatch):
    monkeypatch.setenv("WEBSHOP_DATA", str(webshop_data))
    pytest.importorskip("bm25s")
    _, tok = tiny
    pairs = oracle_path_pairs(tok, "envkit/WebShop-v0", range(2), 15)
    last = [p.action for p in pairs if p.last]
    assert len(last) == 2 and all(a == "click[buy now]" for a in last)
    assert pairs[0].action.startswith("search[")


def test_trainer_logs_the_probe(tmp_path):
    from envkit.trainers.local.multi_turn import AgentConfig
    from envkit.trainers.local.trainer import LocalTrainer, TrainConfig

    cfg = TrainConfig(
        task="envkit/Toy-v0", model=TINY, run_dir=str(tmp_path), steps=1, prompts_per_step=1, group_size=2,
        max_new_tokens=6, agent=AgentConfig(max_turns=4, max_context_tokens=1500), tensorboard=False, plot=False,
        progress=False, probe_tasks=2,
    )  # fmt: skip
    trainer = LocalTrainer(cfg)
    m = trainer.step(1)
    assert m["probe_pairs"] == float(len(trainer.probe_pairs)) > 0
    assert 0.0 < m["probe_p_correct"] < 1.0 and m["probe_p_last"] > 0.0
    with pytest.raises(ValueError, match="probe_tasks"):
        TrainConfig(probe_tasks=-1)
