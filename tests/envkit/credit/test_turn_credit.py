"""`envkit.credit.turn_credit.turn_credit`: exact values on the hand-computed table of test_advantages, every
option reaching its estimator, and the callers (both trainers, SERO) crediting through it."""

from __future__ import annotations

import numpy as np
import pytest

from envkit.credit.advantage_options import AdvantageOptions
from envkit.credit.advantages import GigpoResult, GraphgpoResult, StepTable
from envkit.credit.defaults import GAMMA_G
from envkit.credit.sero_advantages import sero_advantages
from envkit.credit.turn_credit import TURN_ESTIMATORS, turn_credit


def test_gigpo_exact_values_through_the_options(hand_table: StepTable):
    res = turn_credit(hand_table, "gigpo", AdvantageOptions(gamma=0.5, norm="mean", invalid_penalty=0.5))
    assert isinstance(res, GigpoResult)
    np.testing.assert_allclose(res.advantages, [9.6, 6.1, -5.4, -6.4, -3.9, 0.0], atol=1e-12)
    two = turn_credit(hand_table, "gigpo", AdvantageOptions(gamma=0.5, omega=2.0, norm="mean", invalid_penalty=0.5))
    np.testing.assert_allclose(two.advantages, res.episode + 2 * res.step, atol=1e-12)
    paper = turn_credit(
        hand_table, "gigpo", AdvantageOptions(gamma=0.5, norm="mean", invalid_penalty=0.5, episode_stats="trajectories")
    )
    np.testing.assert_allclose(paper.episode, [5, 5, -5, -5.5, -5, 0], atol=1e-12)
    std = turn_credit(hand_table, "gigpo", AdvantageOptions(gamma=0.5, invalid_penalty=0.5, eps=0.0))
    scores = np.array([10, 10, 0, -0.5, 0])
    np.testing.assert_allclose(std.episode[:5], (scores - 3.9) / scores.std(ddof=1), rtol=1e-12)


def test_graphgpo_exact_values_and_the_gamma_g_default(hand_table: StepTable):
    res = turn_credit(hand_table, "graphgpo", AdvantageOptions(gamma_g=0.5, norm="mean", invalid_penalty=0.5))
    assert isinstance(res, GraphgpoResult)
    np.testing.assert_allclose(res.step_reward, [5, 10, 2.5, 0.75, 1.25, 5])
    np.testing.assert_allclose(res.advantages, [8.35, 6.1, -4.15, -6.4, -3.9, 0.0], atol=1e-12)
    w = turn_credit(
        hand_table, "graphgpo", AdvantageOptions(gamma_g=0.5, norm="mean", invalid_penalty=0.5, beta_g=2.0, beta_e=0.5)
    )
    np.testing.assert_allclose(w.advantages, 2 * res.graph_adv + 0.5 * res.episode, atol=1e-12)
    scaled = turn_credit(hand_table, "graphgpo", AdvantageOptions(gamma_g=0.5, reward_scale=1.0, norm="mean"))
    np.testing.assert_allclose(scaled.step_reward[:2], [0.5, 1.0])
    unset = turn_credit(hand_table, "graphgpo", AdvantageOptions())
    fixed = turn_credit(hand_table, "graphgpo", AdvantageOptions(gamma_g=GAMMA_G))
    np.testing.assert_array_equal(unset.advantages, fixed.advantages)


def test_episode_level_estimators_are_refused_with_the_function_to_use(hand_table: StepTable):
    assert TURN_ESTIMATORS == ("gigpo", "graphgpo")
    for name in ("grpo", "rloo", "GiGPO", ""):
        with pytest.raises(ValueError, match="group_advantages"):
            turn_credit(hand_table, name, AdvantageOptions())


def test_sero_without_rescues_is_plain_turn_credit(hand_table: StepTable):
    adv = AdvantageOptions(gamma_g=0.5, norm="mean", invalid_penalty=0.5)
    res = sero_advantages(hand_table, [], adv)
    np.testing.assert_array_equal(res.policy.advantages, turn_credit(hand_table, "graphgpo", adv).advantages)


def test_no_caller_spells_the_estimator_kwargs_by_hand():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for rel in ("trainers/local/agent_source.py", "trainers/openrlhf/turn_advantages.py",
                "envkit/credit/sero_advantages.py"):  # fmt: skip
        text = (root / rel).read_text()
        assert "turn_credit(" in text, rel
        assert "gigpo_advantages(" not in text and "graphgpo_advantages(" not in text, rel
