"""The OpenRLHF backend's turn table groups by the anchors read from the recorded steps under --adv.state-key
(exact values)."""

from __future__ import annotations

import numpy as np
import pytest


def _rows(keys=True):
    from envkit.core import Step
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn
    from envkit.trainers.openrlhf.turn_advantages import SampleRow

    def info(key):  # the env's exact key, and admissible actions that tell the states apart for the recipe anchor
        return {"state_key": key, "admissible_actions": [key]} if keys else {}

    def record(i, obs, state_keys, success):
        steps = tuple(
            Step(obs[j], "x", 0.0, obs[j + 1], success and j == 1, False,
                 {**info(state_keys[j + 1]), "invalid": False, **({"success": True} if success and j == 1 else {})})
            for j in range(2)
        )  # fmt: skip
        return RolloutRecord(RolloutSpec("g", i), obs[0], info(state_keys[0]), steps, (Turn(0, 1), Turn(2, 3)))

    # both episodes show "Nothing happens." at step 1, in two different states (B, C); only the first succeeds
    win = record(0, ("s", "NH", "goal"), ("A", "B", "G"), True)
    lose = record(1, ("s", "NH", "end"), ("A", "C", "E"), False)
    return [SampleRow(0, 1.0, win), SampleRow(1, 0.0, lose)]


@pytest.mark.parametrize(
    "key, want",
    [
        # GiGPO (gamma 1, omega 1, norm mean, no penalty, terminal reward 10): returns [10, 10, 0, 0]
        ("observation", [10.0, 10.0, -10.0, -10.0]),
        ("env", [10.0, 5.0, -10.0, -5.0]),
        (None, [10.0, 5.0, -10.0, -5.0]),  # unset: every turn carries an env key
        ("graphgpo-recipe", [10.0, 5.0, -10.0, -5.0]),
    ],
)
def test_gigpo_turn_advantages_follow_the_state_key(key, want):
    from envkit.credit.advantage_options import AdvantageOptions
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.turn_advantages import compute_turn_advantages

    adv = AdvantageOptions(gamma=1.0, norm="mean", invalid_penalty=0.0, terminal_reward=10.0, state_key=key)
    cfg = BackendConfig(env_id="envkit/Toy-v0", advantage="gigpo", n_samples_per_prompt=2, adv=adv)
    rows = _rows()
    # step rewards: the env's, 0 everywhere here; GiGPO's returns come from the turns' rewards
    from dataclasses import replace

    steps = rows[0].record.steps
    rows[0] = replace(rows[0], record=replace(rows[0].record, steps=(steps[0], replace(steps[1], reward=10.0))))
    out = compute_turn_advantages(rows, cfg)
    np.testing.assert_allclose(np.concatenate(out.per_turn), want)
    assert out.stats[f"state_key_{key or 'env'}"] == 1.0


def test_asking_for_a_key_the_records_lack_says_how_to_fix():
    from envkit.credit.advantage_options import AdvantageOptions
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.turn_advantages import compute_turn_advantages

    bare = _rows(keys=False)  # the env gave no state key
    cfg = BackendConfig(
        env_id="envkit/Toy-v0", advantage="gigpo", n_samples_per_prompt=2, adv=AdvantageOptions(state_key="env")
    )
    with pytest.raises(ValueError, match=r"--adv\.state-key=observation"):
        compute_turn_advantages(bare, cfg)
    unset = BackendConfig(env_id="envkit/Toy-v0", advantage="gigpo", n_samples_per_prompt=2)
    assert compute_turn_advantages(bare, unset).stats["state_key_observation"] == 1.0
