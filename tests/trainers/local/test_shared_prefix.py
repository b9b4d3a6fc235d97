"""Shared-prefix forward passes: one prompt pass per distinct prompt gives the plain forward's numbers.

Checked against the plain concatenated forward (`envkit.trainers.local.generation.score`) on a random tiny model: per-token
log-probs, the gradient of a loss, and sampling (same tokens and sampling log-probs with and without the shared
prefill, for the token-id path and for EDEN's embedding path).
"""

from __future__ import annotations

import pytest

from envkit.runtime.hf_cache import cache_kwarg

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig, load_model  # noqa: E402
from envkit.trainers.local.generation import batch_sequences, sample, score  # noqa: E402
from envkit.trainers.local.prompt_encoding import encode_prompt  # noqa: E402
from envkit.trainers.local.shared_prefix import distinct, response_logits  # noqa: E402
from envkit.trainers.local.update import LossConfig, TrainBatch, update  # noqa: E402

torch.set_num_threads(1)
SMALL = ModelConfig(path="tiny:arith", device="cpu", hidden_size=32, layers=2, heads=4)


@pytest.fixture()
def arith():
    torch.manual_seed(0)
    model, tok = load_model(SMALL)
    return model, tok


def _rows(tok):
    a = encode_prompt(tok, "12+34=", raw=True)
    b = encode_prompt(tok, "1+2=", raw=True)
    c = encode_prompt(tok, "7+8=9\n12+34=", raw=True)  # an ICL-like longer prompt
    prompts = [a, a, a, b, b, c, c, c]
    responses = [[5, 6, 7], [5], [8, 9, 10, 11], [3, 4], [], [12, 13, 3, 4, 5], [6], [7, 8]]
    flags = [[1, 0, 1], [1], [1, 1, 0, 1], [1, 1], [], [1, 1, 1, 1, 1], [0], [1, 1]]
    return prompts, responses, flags


def test_distinct_keeps_first_seen_order():
    uniq, index = distinct([[1, 2], [3], [1, 2], [3], [4]])
    assert uniq == [(1, 2), (3,), (4,)]
    assert index == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("long_row_tokens", [None, 0], ids=["shared-prompt batch", "row by row, unpadded"])
def test_response_logprobs_and_gradients_equal_the_plain_forward(arith, long_row_tokens):
    """Both ways `response_logits` computes: the shared-prompt batch (short rows) and one unpadded forward per row
    (rows of at least LONG_ROW_TOKENS: multi-turn episodes; forced here with a threshold of 0)."""
    model, tok = arith
    model.train()
    prompts, responses, flags = _rows(tok)
    ids, attn, target = batch_sequences(prompts, responses, tok.pad_token_id, "cpu", loss_masks=flags)
    plain = score(model, ids, attn, target, with_entropy=False).logp
    model.zero_grad()
    (plain.sum() * 0.37).backward()
    g_plain = [p.grad.clone() for p in model.parameters()]

    shared = response_logits(
        model, prompts, responses, tok.pad_token_id, loss_flags=flags, long_row_tokens=long_row_tokens
    )
    assert shared.n_prompts == (3 if long_row_tokens is None else len(prompts))
    lp = shared.logprobs()
    model.zero_grad()
    (lp.sum() * 0.37).backward()
    g_shared = [p.grad.clone() for p in model.parameters()]

    assert shared.mask.tolist()[0] == [1.0, 0.0, 1.0, 0.0, 0.0]
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        want = plain[i, len(p) - 1 : len(p) - 1 + len(r)]
        assert torch.allclose(lp[i, : len(r)], want, atol=1e-5), i
        assert torch.all(lp[i, len(r) :] == 0)
    assert any(g.abs().max() > 1e-3 for g in g_plain)
    for a, b in zip(g_plain, g_shared, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_long_rows_go_alone_without_an_attention_mask(arith):
    """Rows of LONG_ROW_TOKENS or more (multi-turn episodes) are computed one by one with no mask, so attention
    takes PyTorch's fused causal kernel instead of a tokens x tokens score matrix kept for the backward pass
    (scripts/bench_update.py: 1.9x less CPU, 1.7x less peak RSS on the README's WebShop + SERO rows)."""
    from envkit.trainers.local.shared_prefix import LONG_ROW_TOKENS

    model, tok = arith
    p = encode_prompt(tok, "3+4=", raw=True)
    seen: list[tuple[int, bool]] = []
    model.register_forward_hook(
        lambda m, args, kwargs, out: seen.append((kwargs["input_ids"].shape[0], kwargs.get("attention_mask") is None)),
        with_kwargs=True,
    )
    long = [5] * (LONG_ROW_TOKENS - len(p))
    with torch.no_grad():
        response_logits(model, [p, p], [long, [6, 7]], tok.pad_token_id)
        assert seen == [(1, True), (1, True)]
        seen.clear()
        response_logits(model, [p, p], [long[:-1], [6, 7]], tok.pad_token_id)  # one token short: the batch
        assert seen == [(1, False), (2, False)]  # the shared prompt pass, then the masked response pass


def test_one_token_responses_need_only_the_prompt_pass(arith):
    model, tok = arith
    p = encode_prompt(tok, "3+4=", raw=True)
    calls: list[int] = []
    model.register_forward_hook(lambda m, args, kwargs, out: calls.append(1), with_kwargs=True)
    with torch.no_grad():
        out = response_logits(model, [p, p], [[7], [8]], tok.pad_token_id)
    assert len(calls) == 1 and out.logits.shape[:2] == (2, 1)


def test_bad_input_is_refused(arith):
    model, tok = arith
    p = encode_prompt(tok, "3+4=", raw=True)
    with pytest.raises(ValueError, match="as many prompts as responses"):
        response_logits(model, [p], [[1], [2]], tok.pad_token_id)
    with pytest.raises(ValueError, match="non-empty prompts"):
        response_logits(model, [[]], [[1]], tok.pad_token_id)
    with pytest.raises(ValueError, match="one flag per response token"):
        response_logits(model, [p], [[1, 2]], tok.pad_token_id, loss_flags=[[1]])


@pytest.mark.parametrize("embeds", [False, True])
@pytest.mark.parametrize("temperature", [1e-4, 1.0])
def test_sampling_with_a_shared_prefill_gives_the_same_samples(arith, embeds, temperature):
    model, tok = arith
    model.eval()
    prompts, _, _ = _rows(tok)
    emb = model.get_input_embeddings().weight.detach()
    extra = [None, emb[5], None, emb[7], None, None, emb[9], None] if embeds else None
    used_cache: list[bool] = []
    original = model.generate

    def spy(*args, **kwargs):
        used_cache.append(cache_kwarg(model) in kwargs)
        return original(*args, **kwargs)

    model.generate = spy
    kw = dict(max_new_tokens=6, seed=3, extra_rows=extra, return_logprobs=True)
    a = sample(model, tok, prompts, [temperature] * len(prompts), shared_prefix=False, **kw)
    b = sample(model, tok, prompts, [temperature] * len(prompts), shared_prefix=True, **kw)
    assert used_cache == [False, True]
    assert a.tokens == b.tokens and a.truncated == b.truncated
    assert a.logprobs is not None and b.logprobs is not None
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        assert torch.allclose(torch.tensor(x), torch.tensor(y), atol=1e-5)


def test_update_does_not_depend_on_micro_batching_across_groups(arith):
    model, tok = arith
    prompts, responses, flags = _rows(tok)
    keep = [i for i, r in enumerate(responses) if r]
    batch = TrainBatch(
        prompts=[prompts[i] for i in keep],
        responses=[responses[i] for i in keep],
        advantages=[[(-1.0) ** i * 0.5] * len(responses[i]) for i in keep],
        loss_flags=[flags[i] for i in keep],
        weights=[1.0] * len(keep),
    )
    start = {k: v.clone() for k, v in model.state_dict().items()}
    after = []
    for mb, tokens in ((1, 16384), (3, 16384), (64, 16384), (64, 25)):
        model.load_state_dict(start)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        cfg = LossConfig(micro_batch=mb, micro_batch_tokens=tokens, max_grad_norm=0.0)
        update(model, opt, batch, cfg, tok.pad_token_id)
        after.append({k: v.clone() for k, v in model.state_dict().items()})
    assert any(not torch.equal(start[k], after[0][k]) for k in start)
    for other in after[1:]:
        for k in start:
            assert torch.allclose(after[0][k], other[k], atol=1e-5), k


def test_micro_batches_respect_the_row_and_token_caps():
    from envkit.trainers.local.update import _micro_batches

    p, q = [1, 2, 3], [4, 5, 6, 7, 8, 9]  # prompt lengths 3 and 6
    batch = TrainBatch(
        prompts=[q, p, p, q, p], responses=[[1], [1, 2], [1], [1, 2, 3], [1, 2, 3, 4, 5, 6, 7]],
        advantages=[[]] * 5, loss_flags=[[]] * 5, weights=[1.0] * 5,
    )  # fmt: skip
    # sorted by (prompt length, prompt, response length): rows 2 (4 tokens), 1 (5), 4 (10), 0 (7), 3 (9)
    assert _micro_batches(batch, 64, 10_000) == [[2, 1, 4, 0, 3]]
    assert _micro_batches(batch, 2, 10_000) == [[2, 1], [4, 0], [3]]
    # at most 20 padded tokens: [2, 1] is 2 x 5; adding row 4 would make 3 x 10 = 30
    assert _micro_batches(batch, 64, 20) == [[2, 1], [4, 0], [3]]
    assert _micro_batches(batch, 64, 5) == [[2], [1], [4], [0], [3]]  # a row longer than the cap goes alone
