"""`sft_warmup`'s distractor rows (one extra word after the prompt, outside the loss; EDEN's extra position)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.runtime.models import ModelConfig, load_model
from envkit.trainers.local.warmup import sft_warmup
from envkit.trainers.local.word_tasks import WordSequenceTask, save_word_model


def _model(tmp_path):
    task = WordSequenceTask()
    save_word_model(tmp_path, task.words, hidden_size=16, layers=1)
    model, tok = load_model(ModelConfig(path=str(tmp_path), device="cpu"))
    return task, model, tok


def test_share_zero_is_the_plain_warmup_and_distractors_change_the_rows(tmp_path):
    task, model, tok = _model(tmp_path / "a")
    init = {k: v.clone() for k, v in model.state_dict().items()}
    plain = sft_warmup(model, tok, task, steps=3, batch=8, progress=False)
    model.load_state_dict(init)
    zero = sft_warmup(model, tok, task, steps=3, batch=8, progress=False, distractor_ids=[5], distractor_share=0.0)
    assert zero == plain  # the distractor stream is separate: share 0 leaves the problem stream untouched
    model.load_state_dict(init)
    some = sft_warmup(model, tok, task, steps=3, batch=8, progress=False, distractor_ids=[5], distractor_share=1.0)
    assert some[0] != plain[0]  # every row got the extra word, so the first loss differs


def test_share_without_ids_or_out_of_range_is_refused(tmp_path):
    task, model, tok = _model(tmp_path / "b")
    with pytest.raises(ValueError, match="distractor_share"):
        sft_warmup(model, tok, task, steps=1, progress=False, distractor_share=0.5)
    with pytest.raises(ValueError, match="distractor_share"):
        sft_warmup(model, tok, task, steps=1, progress=False, distractor_ids=[5], distractor_share=1.5)
