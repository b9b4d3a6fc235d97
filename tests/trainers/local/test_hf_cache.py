"""The KV cache is passed under the name the installed transformers declares: no deprecation warning on any
version the project allows (5.15 names it ``past_key_values``, later releases ``cache``)."""

from __future__ import annotations

import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.hf_cache import cache_kwarg, output_cache  # noqa: E402
from envkit.runtime.models import ModelConfig, load_model  # noqa: E402
from envkit.trainers.local.generation import sample  # noqa: E402
from envkit.trainers.local.shared_prefix import response_logits  # noqa: E402
from envkit.trainers.local.turn_cache import TurnCache  # noqa: E402


def test_shared_prefix_sampling_scoring_and_turn_cache_raise_no_cache_deprecation(caplog):
    model, tok = load_model(ModelConfig(path="tiny:bytes", hidden_size=32, layers=1, heads=2, device="cpu"))
    model.eval()
    name = cache_kwarg(model)
    import inspect

    assert name in inspect.signature(type(model).forward).parameters
    p = tok("You are at cell 0.")["input_ids"]
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("error", FutureWarning)
        out = sample(model, tok, [p, p, p[:-2]], [1.0, 1.0, 1.0], max_new_tokens=4, seed=0, shared_prefix=True)
        with torch.no_grad():
            logits = response_logits(model, [p, p], [out.tokens[0] or [5], [6, 7]], tok.pad_token_id)
            first = model(input_ids=torch.tensor([p]), use_cache=True)
        assert output_cache(first) is not None
        cache = TurnCache(model, tok)
        turn = cache.sample([p, p], [1.0, 1.0], max_new_tokens=3, seed=0)
        cache.sample([p + t + [10, 11] for t in turn.tokens], [1.0, 1.0], max_new_tokens=3, seed=1)
    assert logits.logits.shape[0] == 2
    assert not [r for r in caplog.records if "past_key_values" in r.getMessage()], caplog.text
