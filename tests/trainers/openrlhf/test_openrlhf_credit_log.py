"""``--credit-log``: the experience maker logs one group's credit as it reached the loss, and
scripts/openrlhf_credit_check.py recomputes it with the local trainer's credit, value by value (issue 34).

Here the real `EnvkitExperienceMaker` (real OpenRLHF ``Experience`` objects, KL in the reward) credits a GraphGPO +
SERO group that ends in failure and truncation, with two oracle rows, with ``--adv.terminal-reward`` set and
unset (then OpenRLHF's scalar reward carries a length penalty: both backends still credit 10 x success, the per-run
resolver's rule; before it OpenRLHF credited its scalar reward and the rescues' env return, and this case failed);
the end-to-end SERO arm (tests/trainers/openrlhf/test_openrlhf_e2e.py) runs the same check on a real
``train_ppo_ray`` run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from envkit.core import Root, Step
from envkit.credit.advantage_options import AdvantageOptions
from envkit.oracles.continuation import ContinuationOutcome
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.credit_log import CREDIT_LOG
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn
from envkit.trainers.openrlhf.sero_rows import oracle_record
from tests.trainers.openrlhf.test_openrlhf_experience import _experiences, _makers

REPO = Path(__file__).resolve().parents[3]
# (states before each action + the final one, actions, invalid, success, truncated): 1 succeeds, 3 fail, 1 is cut
GROUP = [
    (["A", "B", "C", "W"], ["a", "b", "win"], [False, False, False], True, False),
    (["A", "D", "E", "B"], ["c", "d", "e"], [False, False, False], False, False),
    (["A", "D", "F", "G"], ["c", "f", "g"], [False, False, False], False, True),
    (["A", "B", "X", "Y"], ["a", "x", "y"], [False, True, False], False, False),
]
CONTINUATIONS = [(2, 3, [("G", "o1", "H"), ("H", "o2", "WIN")], [-2.5, -0.7]), (3, 2, [("X", "o3", "W2")], [-0.1])]
ADV = AdvantageOptions(gamma_g=0.3, beta_g=0.8, beta_e=1.3, invalid_penalty=0.25, reward_scale=7.0, terminal_reward=10)


def _checker():
    spec = importlib.util.spec_from_file_location(
        "openrlhf_credit_check", REPO / "scripts" / "openrlhf_credit_check.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _info(s: str, **more: object) -> dict[str, object]:
    """The info of state `s`: the env's exact key (so the batch groups by it), and `more`."""
    return {"state_key": f"k{s}", **more}


def _played(spec: RolloutSpec, states: list[str], actions: list[str], invalid: list[bool], success: bool,
            **fields: Any) -> RolloutRecord:  # fmt: skip
    """The record the executor writes for a played row: its steps (the env's key in each state's info, reward 1 and
    ``success`` on a success's last step) and their token spans (two action tokens, then feedback)."""
    last = len(actions) - 1
    steps = tuple(
        Step(states[t], a, float(success and t == last), states[t + 1], success and t == last, False,
             _info(states[t + 1], invalid=invalid[t], **({"success": True} if success and t == last else {})))
        for t, a in enumerate(actions)
    )  # fmt: skip
    turns = tuple(Turn(5 + 4 * t, 7 + 4 * t) for t in range(len(actions)))
    return RolloutRecord(spec, states[0], _info(states[0]), steps, turns, **fields)


def _records(cfg: BackendConfig) -> list[dict]:
    out = [
        _played(RolloutSpec("g0", i), states, actions, invalid, success, truncated=truncated)
        for i, (states, actions, invalid, success, truncated) in enumerate(GROUP)
    ]
    for i, t, steps, ll in CONTINUATIONS:
        outcome = ContinuationOutcome(
            Root(0, i, t, steps[0][0]), "native",
            steps=tuple(Step(s, a, float(j == len(steps) - 1), n, j == len(steps) - 1, False,
                             _info(n, invalid=False), None, True) for j, (s, a, n) in enumerate(steps)),
            success=True,
        )  # fmt: skip
        spans = [(5 + 4 * (t + j), 7 + 4 * (t + j)) for j in range(len(steps))]
        out[i] = oracle_record(cfg, out[i], t, outcome, spans, ll)  # anchors: read from the steps
    return [r.to_dict() for r in out]


def _logged(strategy_factory, tmp_path: Path, adv: AdvantageOptions = ADV) -> Path:
    cfg = BackendConfig(n_samples_per_prompt=4, sero=True, advantage="graphgpo", adv=adv, credit_log=True)
    records = _records(cfg)
    lengths = [4 * len(r["turns"]) for r in records]
    # OpenRLHF's scalar reward: 10 x success, or (terminal reward unset) the env's return less a length penalty
    shaped = adv.terminal_reward is None
    recs = [RolloutRecord.from_dict(r) for r in records]
    rewards = [r.episode_return - 0.05 * len(r.turns) if shaped else 10.0 * r.success for r in recs]
    exps = _experiences(rewards, lengths, records=records)
    _, maker = _makers(strategy_factory(4, ("--ckpt.output_dir", str(tmp_path))), cfg)
    maker.compute_advantages_and_returns(exps)
    return tmp_path / CREDIT_LOG


@pytest.mark.parametrize("adv", [ADV, dataclasses.replace(ADV, terminal_reward=None)], ids=["set", "unset"])
def test_the_logged_group_reached_the_loss_with_the_local_trainers_credit(strategy_factory, tmp_path, adv):
    check = _checker()
    log = _logged(strategy_factory, tmp_path, adv)
    summary = check.check_file(log)
    assert summary["problems"] == []
    assert (summary["entries"], summary["rows"], summary["oracle_turns"]) == (1, 4, 3)
    assert summary["tokens"] == 2 * summary["turns"]  # every turn's two action tokens were compared
    entry = json.loads(log.read_text())
    assert any(k != 0.0 for r in entry["rows"] for ks in r["kl_tails"] for k in ks)  # KL in the reward: compared too
    # a tampered value is caught: a policy turn's credit, an oracle turn's weight, one token of the loss
    for path, value in ((("per_turn", 0, 1), 0.5), (("weights", 2, 4), 0.9), (("loss_tokens", 1, 0, 1), 3.0)):
        bad = json.loads(log.read_text())
        field, row, *rest = path
        target = bad["rows"][row][field]
        for k in rest[:-1]:
            target = target[k]
        target[rest[-1]] = value
        assert check.problems(bad), f"tampered {path} went unnoticed"
