"""Hostile action strings against every text env: refused before the env sees them, or played as ordinary text.

A policy (or a client of ``envkit-serve``) can send anything: no str at all, more than the action limit, text
that is not valid Unicode (a lone surrogate, which ``json.loads`` makes from ``"\\ud800"``), NUL bytes, markup,
actions out of context. Each one either raises `InvalidActionError` with the reason and leaves the env's state
exactly as it was (the next honest step gives what a twin env that never saw it gives), or is an ordinary
(invalid) action worth no reward. Found by this test: a lone surrogate in a WebShop search crashed the step after
the state had changed (``UnicodeEncodeError`` in the page URL) and every later step failed the same way.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import envkit  # noqa: F401  (registers the ids)
from envkit.errors import InvalidActionError
from envkit.spaces import FreeText

REFUSED = [None, 7, 1.5, b"click[buy now]", ["look"], "\ud800", "search[\udcff shirt]", "go to \ud83d"]
PLAYED = ["", "\x00", "search[\x00]", "click[\x00buy now]", "click[buy now]", "<script>alert(1)</script>", "\u202e"]


def _env(env_id: str, request: pytest.FixtureRequest) -> gym.Env:
    kwargs = {}
    if env_id == "envkit/ALFWorld-v0":
        pytest.importorskip("alfworld", reason="needs the alfworld extra: pip install -e '.[alfworld]'")
        kwargs["data_dir"] = str(request.getfixturevalue("alfworld_data"))
    if env_id == "envkit/WebShop-v0":
        request.getfixturevalue("webshop_data")
    return gym.make(env_id, **kwargs)


HONEST = {"envkit/Toy-v0": "right", "envkit/WebShop-v0": "search[rain jacket]", "envkit/ALFWorld-v0": "look"}


@pytest.mark.parametrize("env_id", sorted(HONEST))
def test_refused_actions_leave_the_state_untouched(env_id, request):
    env, twin = _env(env_id, request), _env(env_id, request)
    try:
        env.reset(seed=3)
        twin.reset(seed=3)
        limit = env.unwrapped.action_space.max_length
        for bad in [*REFUSED, "x" * (limit + 1)]:
            with pytest.raises(InvalidActionError) as caught:
                env.step(bad)
            assert str(caught.value)  # says why
        assert env.step(HONEST[env_id]) == twin.step(HONEST[env_id])
    finally:
        env.close()
        twin.close()


@pytest.mark.parametrize("env_id", sorted(HONEST))
@pytest.mark.timeout(300)
def test_odd_but_valid_text_is_an_ordinary_action_worth_nothing(env_id, request):
    env = _env(env_id, request)
    try:
        env.reset(seed=3)
        limit = env.unwrapped.action_space.max_length
        for text in [*PLAYED, "search[" + "shirt " * ((limit - 8) // 6) + "]"]:
            obs, reward, terminated, truncated, info = env.step(text)
            assert isinstance(obs, str) and reward == 0.0 and not info.get("won") and not info.get("success")
            if terminated or truncated:
                env.reset(seed=3)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["envkit/Math-v0"])
def test_single_turn_verifiers_refuse_non_text_answers_and_still_grade(env_id):
    pytest.importorskip("math_verify", reason="needs the math extra: pip install -e '.[math]'")
    env = gym.make(env_id)
    try:
        env.reset(seed=0)
        for bad in REFUSED:
            with pytest.raises(InvalidActionError):
                env.step(bad)
        _, reward, terminated, _, _ = env.step("\x00 \\boxed{\ud7ff}")  # valid text, wrong answer
        assert reward == 0.0 and terminated
    finally:
        env.close()


def test_the_space_says_why_a_string_is_refused():
    space = FreeText(10)
    assert space.why_not("look") is None and space.contains("look")
    assert "expected str" in space.why_not(b"x")
    assert "exceeds the limit of 10" in space.why_not("x" * 11)
    why = space.why_not("ab\ud800")
    assert "not valid Unicode" in why and "character 2" in why and not space.contains("ab\ud800")
    assert space.contains("\x00\u202e\U0001f600")  # odd but valid text is in the space
