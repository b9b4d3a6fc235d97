"""The local trainer's GiGPO rows take their states from the episodes' recorded infos (--agent.adv.state-key)."""

from __future__ import annotations

import numpy as np
import pytest

from envkit.core import Step
from envkit.credit.advantage_options import AdvantageOptions
from envkit.trainers.local.agent_source import _turn_advantages, episodes_state_key, step_table
from envkit.trainers.local.multi_turn import AgentConfig, Episode


def _episodes(last_key: bool = True) -> list[Episode]:
    # both show "Nothing happens." at turn 1, in two different states (keys B, C); only the first succeeds
    out = []
    for index, (key, success) in enumerate((("B", True), ("C", False))):
        second = {"state_key": key, "admissible_actions": ["y"]} if last_key or index == 0 else {}
        steps = [
            Step("s", "x", 0.0, "Nothing happens.", False, False, second),
            Step("Nothing happens.", "y", 0.0, "end", True, False, {"state_key": f"end{key}", "success": success}),
        ]
        out.append(Episode.from_steps(0, index, "s", {"state_key": "A", "admissible_actions": ["x"]}, steps))
    return out


@pytest.mark.parametrize(
    "key, states, want",
    [
        # GiGPO, gamma 1, omega 1, norm mean, terminal reward 10 on the successful last turn: returns [10, 10, 0, 0]
        ("observation", ["s", "Nothing happens.", "s", "Nothing happens."], [10.0, 10.0, -10.0, -10.0]),
        ("env", ["A", "B", "A", "C"], [10.0, 5.0, -10.0, -5.0]),
        (None, ["A", "B", "A", "C"], [10.0, 5.0, -10.0, -5.0]),
    ],
)
def test_gigpo_rows_use_the_chosen_key(key, states, want):
    adv = AdvantageOptions(gamma=1.0, norm="mean", invalid_penalty=0.0, terminal_reward=10.0, state_key=key)
    cfg = AgentConfig(estimator="gigpo", adv=adv)
    eps = _episodes()
    assert step_table(eps, cfg).state.tolist() == states
    assert episodes_state_key(eps, cfg) == (key or "env")
    np.testing.assert_allclose(np.concatenate(_turn_advantages(eps, cfg)), want)


def test_recipe_rows_and_a_missing_key():
    cfg = AgentConfig(estimator="gigpo", adv=AdvantageOptions(terminal_reward=10.0, state_key="graphgpo-recipe"))
    eps = _episodes()
    rows = step_table(eps, cfg).state.tolist()
    # the recipe cannot tell the two "Nothing happens." states apart either: same text, commands and moves
    assert rows[0] == rows[2] and rows[1] == rows[3] and rows[0] != rows[1]
    eps = _episodes(last_key=False)
    with pytest.raises(ValueError, match=r"adv\.state-key=observation"):
        step_table(eps, AgentConfig(adv=AdvantageOptions(terminal_reward=10.0, state_key="env")))
    assert episodes_state_key(eps, AgentConfig()) == "observation"
