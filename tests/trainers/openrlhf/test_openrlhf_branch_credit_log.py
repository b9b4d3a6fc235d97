"""``--credit-log`` on a branching run (``--explorer branch``): the experience maker logs a group of backbones and
forks with the advantages the loss got, and scripts/openrlhf_credit_check.py recomputes it with the local trainer's
branch credit (`envkit.trainers.explorers.branch.branch_credit`, both backends' function, over the local driver's
`branch_nodes`), value by value (issue 34).

Here the real `EnvkitExperienceMaker` (real OpenRLHF ``Experience`` objects, KL in the reward) credits a batch of two
branch groups laid out as the rollout actor makes them (a fork's tokens: its backbone's up to the fork turn, then its
own; its action mask: its own turns only). The first group forks at turn 0 only (no shared prefix); the second has
two forks of backbone 0 at turn 1, so the logged group is the second (three of its four rows fail). With
``--adv.terminal-reward`` unset the env's turn rewards and OpenRLHF's scalar reward are shaped (a failure earns
partial reward, a success less than 10): both backends still credit 10 x success (the per-run resolver's rule;
before it OpenRLHF credited its scalar reward and this case failed the check). The end-to-end branching arm
(tests/trainers/openrlhf/test_openrlhf_e2e.py) runs the same check on a real ``train_ppo_ray`` run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from envkit.credit.advantage_options import AdvantageOptions
from envkit.trainers.explorers.branch import BranchConfig
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.credit_log import CREDIT_LOG
from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec
from tests.trainers.openrlhf.test_openrlhf_credit_log import _checker, _played
from tests.trainers.openrlhf.test_openrlhf_experience import _experiences, _makers

# per group, per row in spec order: (states before each action + the final one, actions, success, tree)
ROOT = {"parent": -1, "fork": 0}
GROUPS = {
    "g0": [  # forks at turn 0: more roots, no shared prefix
        (["A", "B", "W"], ["a", "win"], True, ROOT),
        (["A", "D", "E"], ["c", "d"], False, ROOT),
        (["A", "D", "W"], ["c", "win"], True, {**ROOT, "source": 1, "turn": 0}),
        (["A", "E", "F"], ["e", "f"], False, {**ROOT, "source": 0, "turn": 0}),
    ],
    "g1": [  # two forks of backbone 0 at turn 1: a fork's record holds the backbone's prefix turn
        (["A", "B", "C", "W"], ["a", "b", "win"], True, ROOT),
        (["A", "D", "E", "F"], ["c", "d", "e"], False, ROOT),
        (["A", "B", "X", "Y"], ["a", "x", "y"], False, {"parent": 0, "fork": 1, "source": 0, "turn": 1}),
        (["A", "B", "C", "D"], ["a", "b", "d"], False, {"parent": 0, "fork": 1, "source": 0, "turn": 1}),
    ],
}
ADV = AdvantageOptions(gamma_g=0.3, beta_g=0.8, beta_e=1.3, invalid_penalty=0.25, reward_scale=7.0, terminal_reward=10)
BRANCH = BranchConfig(points=1, branches=2, backbones=2, loo_weight=2.0, estimator_weight=0.5)


def _turn_reward(action: str, success: bool, t: int, n: int, shaped: bool) -> float:
    """An env's turn reward: 1 on a success's last turn; shaped: 0.7 there, else 0.1 to 0.3 by action (so a
    group's returns are no affine function of success, which normalisation would hide)."""
    if shaped:
        return 0.7 if success and t == n - 1 else 0.1 * (1 + ord(action[0]) % 3)
    return float(success and t == n - 1)


def _records(shaped: bool = False) -> list[dict]:
    out = []
    for group, rows in GROUPS.items():
        for i, (states, actions, success, tree) in enumerate(rows):
            node = {**tree, "entropy": 0.5, "restored": "native"} if i >= 2 else {**tree, "nll": [0.1] * len(actions)}
            spec = RolloutSpec(group, i, fork=i >= 2)
            rec = _played(spec, states, actions, [False] * len(actions), success, extra={"branch": node})
            rewards = [_turn_reward(a, success, t, len(actions), shaped) for t, a in enumerate(actions)]
            steps = tuple(dataclasses.replace(st, reward=r) for st, r in zip(rec.steps, rewards, strict=True))
            out.append(dataclasses.replace(rec, steps=steps).to_dict())
    return out


def _logged(
    strategy_factory, tmp_path: Path, env_id: str = "envkit/Toy-v0", adv: AdvantageOptions = ADV, shaped: bool = False
) -> Path:
    cfg = BackendConfig(explorer="branch", env_id=env_id, n_samples_per_prompt=4, max_turns=3,
                        advantage="graphgpo", adv=adv, branch=BRANCH, credit_log=True)  # fmt: skip
    records = _records(shaped)
    # OpenRLHF's scalar reward: 10 x success, or (shaped) the env's return less a length penalty
    recs = [RolloutRecord.from_dict(r) for r in records]
    rewards = [r.episode_return - 0.05 * len(r.turns) if shaped else 10.0 * r.success for r in recs]
    exps = _experiences(rewards, [4 * len(r["turns"]) for r in records], records=records)
    for i, rec in enumerate(records):  # a fork trains its own turns only: its prefix is out of its action mask
        exp, b = exps[i // 2], i % 2
        for turn in rec["turns"][: rec["extra"]["branch"].get("turn", 0) if rec["spec"]["fork"] else 0]:
            exp.action_mask[b, turn["start"] - 1 : turn["end"] - 1] = False
    _, maker = _makers(strategy_factory(4, ("--ckpt.output_dir", str(tmp_path))), cfg)
    maker.compute_advantages_and_returns(exps)
    return tmp_path / CREDIT_LOG


def _tampered(log: Path, path: tuple, value) -> dict:
    bad = json.loads(log.read_text())
    target = bad
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return bad


# gamma_g unset: both trainers take the env's (MiniShop 0.2, not GraphGPO's fallback 0.1); the check must too.
# terminal_reward unset with shaped rewards: both trainers credit 10 x success, not OpenRLHF's scalar reward.
@pytest.mark.parametrize(
    ("env_id", "adv", "shaped"),
    [
        ("envkit/Toy-v0", ADV, False),
        ("envkit/MiniShop-v0", dataclasses.replace(ADV, gamma_g=None), False),
        ("envkit/Toy-v0", dataclasses.replace(ADV, terminal_reward=None), True),
    ],
)
def test_the_logged_branch_group_reached_the_loss_with_the_local_trainers_credit(
    strategy_factory, tmp_path, env_id, adv, shaped
):
    check = _checker()
    log = _logged(strategy_factory, tmp_path, env_id, adv, shaped)
    summary = check.check_file(log)
    assert summary["problems"] == []
    entry = json.loads(log.read_text())
    assert entry["group"] == "g1" and [r["record"]["spec"]["index"] for r in entry["rows"]] == [0, 1, 2, 3]
    # every own turn's two action tokens were compared; a fork's prefix turn sent none
    assert [[len(v) for v in r["loss_tokens"]] for r in entry["rows"]] == [[2, 2, 2], [2, 2, 2], [0, 2, 2], [0, 2, 2]]
    assert any(k != 0.0 for r in entry["rows"] for ks in r["kl_tails"] for k in ks)  # KL in the reward: compared too
    # the tree's term is in what the loss got: without it (or with another tree) the local credit differs
    assert check.problems(_tampered(log, ("config", "branch", "loo_weight"), 0.0))
    assert check.problems(_tampered(log, ("rows", 3, "record", "extra", "branch", "parent"), -1))
    # a tampered value is caught: a fork's own turn credit, one token of a fork's turn, a token on a fork's prefix
    for path, value in (
        (("rows", 2, "per_turn", 1), 0.5),
        (("rows", 3, "loss_tokens", 2, 0), 3.0),
        (("rows", 2, "loss_tokens", 0), [0.1, 0.1]),
    ):
        assert check.problems(_tampered(log, path, value)), f"tampered {path} went unnoticed"
