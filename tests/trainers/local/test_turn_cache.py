"""Multi-turn sampling with the KV cache kept between turns gives what re-prefilling every turn gives."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig, load_model  # noqa: E402
from envkit.trainers.local.generation import sample  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig, play  # noqa: E402
from envkit.trainers.local.turn_cache import TurnCache  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tok = load_model(ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=2, heads=4))
    model.eval()
    return model, tok


@pytest.mark.parametrize("env_id", ["envkit/Toy-v0", "envkit/WebShop-v0"])
@pytest.mark.parametrize("temperature", [1e-4, 1.0])
def test_play_with_and_without_the_turn_cache_is_identical(tiny, env_id, temperature):
    model, tok = tiny
    contexts = {}
    for reuse in (False, True):
        cfg = AgentConfig(max_turns=5, max_context_tokens=4000, reuse_kv_cache=reuse)
        eps = play(model, tok, env_id, [3, 4], 2, cfg, max_new_tokens=12, temperature=temperature, seed=7)
        contexts[reuse] = [(e.context, e.actions, e.done) for e in eps]
    assert contexts[True] == contexts[False]
    assert sum(len(a) for _, a, _ in contexts[True]) >= 4  # several turns really were played


def test_rows_can_finish_and_the_rest_continue(tiny):
    model, tok = tiny
    ctx = [tok(t)["input_ids"] for t in ("first row", "second, longer row", "3")]
    cache = TurnCache(model, tok)
    plain_ctx = [list(c) for c in ctx]
    for turn in range(3):
        kw = dict(max_new_tokens=4, seed=turn, return_logprobs=True)
        got = cache.sample(ctx, [1.0] * len(ctx), **kw)
        want = sample(model, tok, plain_ctx, [1.0] * len(plain_ctx), shared_prefix=False, **kw)
        assert got.tokens == want.tokens and got.truncated == want.truncated
        assert got.logprobs is not None and want.logprobs is not None
        for a, b in zip(got.logprobs, want.logprobs, strict=True):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4)
        assert cache.cache.get_seq_length() == cache.mask.shape[1]  # the mask covers every cached position
        obs = [tok(f" obs{turn}{i}")["input_ids"] for i in range(len(ctx))]
        ctx = [c + t + o for c, t, o in zip(ctx, got.tokens, obs, strict=True)]
        plain_ctx = [list(c) for c in ctx]
        if turn == 0:  # the first row's episode ends; the others go on (in a new order)
            cache.keep([2, 1])
            ctx, plain_ctx = [ctx[2], ctx[1]], [plain_ctx[2], plain_ctx[1]]
    assert len(cache) == 2


def test_misuse_is_refused_with_the_fix(tiny):
    model, tok = tiny
    cache = TurnCache(model, tok)
    ctx = [tok("ab")["input_ids"], tok("cd")["input_ids"]]
    out = cache.sample(ctx, [1.0, 1.0], max_new_tokens=2, seed=0)
    with pytest.raises(ValueError, match="call keep"):
        cache.sample(ctx[:1], [1.0], max_new_tokens=2)
    with pytest.raises(ValueError, match="must extend"):
        cache.sample(ctx, [1.0, 1.0], max_new_tokens=2)  # the sampled responses are missing
    with pytest.raises(IndexError, match="has 2 rows"):
        cache.keep([0, 5])
    nxt = [c + t + tok(" obs")["input_ids"] for c, t in zip(ctx, out.tokens, strict=True)]
    assert len(cache.sample(nxt, [1.0, 1.0], max_new_tokens=2, seed=1).tokens) == 2
