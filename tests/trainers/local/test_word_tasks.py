"""The word-list continuation task and its word-level model (`envkit.trainers.local.word_tasks`)."""

from __future__ import annotations

import numpy as np
import pytest

from envkit.trainers.local.word_tasks import WordSequenceTask, save_word_model


def test_problems_wrap_days_and_months_but_never_run_off_the_other_lists():
    task = WordSequenceTask()
    by_id = {p.task_id: p for p in task.problems}
    assert by_id["days:5:1:2"].prompt == "saturday sunday then" and by_id["days:5:1:2"].answer == "monday tuesday"
    assert by_id["months:0:-2:3"].answer == "july may"  # january november september -> july may
    assert by_id["numbers:0:1:3"].answer == "four five"
    assert "numbers:17:1:2" not in by_id and "planets:0:-1:2" not in by_id
    assert len(task.problems) == 474 and len(task.train) + len(task.heldout) == 474


def test_sample_draws_train_problems_only_and_check_scores_exact_well_formed_answers():
    task = WordSequenceTask()
    held = {p.task_id for p in task.heldout}
    drawn = task.sample(np.random.default_rng(0), 200)
    assert not held & {p.task_id for p in drawn}
    p = drawn[0]
    assert task.check([p, p, p], [str(p.answer), "red", "banana split"]) == [(1.0, True), (0.0, False), (0.0, False)]


def test_word_model_round_trips_through_load_model(tmp_path):
    pytest.importorskip("transformers")
    from envkit.runtime.models import ModelConfig, load_model

    task = WordSequenceTask()
    folder = save_word_model(tmp_path / "m", task.words, hidden_size=32, layers=1)
    _, tok = load_model(ModelConfig(path=str(folder), device="cpu"))
    ids = tok("tuesday thursday then", add_special_tokens=False)["input_ids"]
    assert len(ids) == 3 and tok.unk_token_id not in ids
    assert tok.decode(ids) == "tuesday thursday then"
