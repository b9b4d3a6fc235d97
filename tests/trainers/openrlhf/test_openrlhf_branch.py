"""Branching rollouts on the OpenRLHF backend, the parts that need no engine: the fixed row count and its
refusals (config and command line), the plan of fork slots, and the leave-one-out term through
`compute_turn_advantages` with exact values (the real-engine runs are in test_openrlhf_branch_vllm.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _cfg(**kw):
    from envkit.trainers.openrlhf.config import BackendConfig

    base = {"explorer": "branch", "env_id": "envkit/Toy-v0", "n_samples_per_prompt": 4, "max_turns": 3}
    return BackendConfig(**{**base, **kw})


@pytest.mark.parametrize(
    ("n", "sized"), [(2, (1, 1, 1)), (4, (2, 1, 2)), (5, (3, 1, 2)), (8, (4, 2, 2)), (7, (4, 3, 1))]
)
def test_sized_branch_fills_exactly_n_rows(n, sized):
    from envkit.trainers.openrlhf.explorers.branch import branch_specs

    cfg = _cfg(n_samples_per_prompt=n).branch_config()
    assert (cfg.backbones, cfg.points, cfg.branches) == sized
    assert cfg.backbones + cfg.points * cfg.branches == n
    specs = branch_specs("g", n, _cfg(n_samples_per_prompt=n))
    assert [s.index for s in specs] == list(range(n))
    assert [s.fork for s in specs] == [False] * sized[0] + [True] * (n - sized[0])


def test_impossible_settings_are_refused_with_what_to_set():
    from envkit.trainers.explorers.branch import BranchConfig
    from envkit.trainers.sero_options import TrainerSeroOptions as SeroOptions

    with pytest.raises(ValueError, match=r"backbones 4 \+ --branch.points 4 x --branch.branches 2 = 12 rows.*"
                       r"n_samples_per_prompt 8.*--branch.backbones 4 --branch.points 2 --branch.branches 2"):  # fmt: skip
        _cfg(n_samples_per_prompt=8, branch=BranchConfig(points=4, branches=2))
    with pytest.raises(ValueError, match="needs --max-turns"):
        _cfg(max_turns=0)
    with pytest.raises(ValueError, match="drop --sero"):
        _cfg(sero=True, advantage="graphgpo", max_turns=8, sero_opts=SeroOptions(min_budget=1))
    with pytest.raises(ValueError, match=r"drop --branch\.reserve"):
        _cfg(branch=BranchConfig(points=1, branches=2, backbones=2, reserve="backbone"))
    ok = _cfg(n_samples_per_prompt=8, branch=BranchConfig(points=1, branches=4, backbones=4))
    assert ok.branch_config().points == 1
    from envkit.trainers.openrlhf.config import BackendConfig

    assert BackendConfig.from_json(ok.to_json()) == ok


def test_command_line_translates_and_refuses_branch_options(capsys):
    from envkit.trainers.openrlhf.argv import split_argv
    from envkit.trainers.openrlhf.entry import build_config

    theirs = ["--rollout.n_samples_per_prompt", "8"]
    ours, rest = split_argv(["--explorer", "branch", "--max-turns", "4", "--branch.points", "1",
                             "--branch.branches", "4", "--branch.backbones", "4", *theirs])  # fmt: skip
    assert rest == theirs
    cfg = build_config(ours, rest).backend
    assert cfg.explorer == "branch" and cfg.branch is not None and cfg.branch.branches == 4
    sized = build_config(["--explorer", "branch", "--max-turns", "4"], theirs).backend
    assert sized.branch is None and sized.branch_config() == sized.sized_branch()
    with pytest.raises(SystemExit):
        build_config(["--explorer", "branch", "--max-turns", "4", "--branch.points", "3"], theirs)
    assert "backbones + points x branches" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_config(["--max-turns", "4", "--branch.points", "3"], theirs)
    assert "--explorer is not 'branch'" in capsys.readouterr().err


def test_fork_slots_plan():
    from envkit.trainers.openrlhf.branch_rows import plan_forks

    assert plan_forks([(0, 2), (1, 0)], 4, 2) == [(0, 2), (0, 2), (1, 0), (1, 0)]
    assert plan_forks([(1, 3)], 4, 2) == [(1, 3)] * 4  # fewer decisions than points: the slots cycle
    with pytest.raises(RuntimeError, match="max_len"):
        plan_forks([], 2, 1)


def _row(index, spec_index, turns, success, tree, fork=False, group="g0"):
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec
    from envkit.trainers.openrlhf.turn_advantages import SampleRow
    from tests.trainers.openrlhf.records import T, record

    ts = tuple(T(f"s{k}", "a", 0.0, False, 10 * k, 10 * k + 2) for k in range(turns))
    extra = {"branch": tree} if tree is not None else {}
    rec = record(RolloutSpec(group, spec_index, fork=fork), ts, success, extra=extra)
    return SampleRow(index, float(success), rec)


def _batch():
    """Backbone 0 (3 turns, success), backbone 1 (2 turns), a fork of 0 at turn 1 (3 turns, failure) and a fork
    of 1 at turn 0 (a root, 2 turns, success); given shuffled."""
    f1 = {"parent": 0, "fork": 1, "source": 0, "turn": 1, "entropy": 0.7, "restored": "native"}
    f0 = {"parent": -1, "fork": 0, "source": 1, "turn": 0, "entropy": 0.4, "restored": "replay"}
    return [
        _row(0, 2, 3, False, f1, fork=True),
        _row(1, 0, 3, True, {"parent": -1, "fork": 0}),
        _row(2, 3, 2, True, f0, fork=True),
        _row(3, 1, 2, False, {"parent": -1, "fork": 0}),
    ]


def test_leave_one_out_term_exact_values_through_turn_advantages():
    """Returns (terminal reward 1 x success) by spec index: 1, 0, 0, 1. Root decision (backbone 0 = mean(1, 0),
    backbone 1 = 0, the turn-0 fork = 1): LOO 0, -0.75, 0.75; backbone 0's branch point at turn 1 (itself 1, its
    fork 0): +1 / -1. GRPO with norm "mean" (OpenRLHF's reward, = success here): success - 0.5. A fork's prefix turn
    gets only the estimator's value. With ``terminal_reward`` unset the tree's returns are 10 x success, as the
    local trainer's (the resolver's default), not OpenRLHF's reward."""
    from envkit.trainers.explorers.branch import BranchConfig
    from envkit.trainers.openrlhf.config import AdvantageOptions
    from envkit.trainers.openrlhf.turn_advantages import compute_turn_advantages

    unset = compute_turn_advantages(_batch(), _cfg(adv=AdvantageOptions(norm="mean")))
    assert [p.tolist() for p in unset.per_turn] == [[-0.5, -10.5, -10.5], [0.5, 10.5, 10.5], [8.0, 8.0], [-8.0, -8.0]]
    cfg = _cfg(adv=AdvantageOptions(norm="mean", terminal_reward=1.0))
    res = compute_turn_advantages(_batch(), cfg)
    got = [p.tolist() for p in res.per_turn]
    assert got == [[-0.5, -1.5, -1.5], [0.5, 1.5, 1.5], [1.25, 1.25], [-1.25, -1.25]]
    assert res.stats["branch_points"] == 2 and res.stats["branch_forks"] == 2
    assert res.stats["branch_env_steps"] == 3 + 2 + 2 + 2  # backbones in full, forks from their fork turn
    assert res.stats["branch_budget_steps"] == 4 * 3 and res.stats["branch_budget_overrun"] == 0
    assert res.stats["branch_native_restores"] == 1 and res.stats["branch_replay_restores"] == 1
    assert res.stats["branch_entropy_at_points"] == pytest.approx(0.55)
    weighted = _cfg(adv=AdvantageOptions(norm="mean", terminal_reward=1.0), branch=BranchConfig(points=1, branches=2, backbones=2,
                    budget_steps=8, loo_weight=2.0, estimator_weight=0.5))  # fmt: skip
    res = compute_turn_advantages(_batch(), weighted)
    assert [p.tolist() for p in res.per_turn] == [[-0.25, -2.25, -2.25], [0.25, 2.25, 2.25], [1.75, 1.75],
                                                 [-1.75, -1.75]]  # fmt: skip
    assert res.stats["branch_budget_overrun"] == 1  # 9 steps against a budget of 8: reported, not prevented
    std = compute_turn_advantages(_batch(), _cfg(adv=AdvantageOptions(terminal_reward=1.0)))  # norm "std": both
    # terms over the unbiased std of 1, 0, 0, 1
    s = float(np.std([1.0, 0.0, 0.0, 1.0], ddof=1)) + 1e-6
    assert std.per_turn[1].tolist() == pytest.approx([0.5 / s, 1.5 / s, 1.5 / s])
    assert std.per_turn[3].tolist() == pytest.approx([-1.25 / s, -1.25 / s])


def test_groups_without_a_tree_keep_the_estimator_and_a_bad_tree_is_refused():
    from envkit.trainers.openrlhf.config import AdvantageOptions
    from envkit.trainers.openrlhf.turn_advantages import compute_turn_advantages

    cfg = _cfg(adv=AdvantageOptions(norm="mean"))
    plain = [_row(i, i, 2, i == 0, None, group="eval") for i in range(2)]
    res = compute_turn_advantages(plain, cfg)
    assert [p.tolist() for p in res.per_turn] == [[0.5, 0.5], [-0.5, -0.5]] and "branch_points" not in res.stats
    bad = _batch()
    bad[0] = _row(0, 2, 3, False, {"parent": 7, "fork": 1, "source": 7, "turn": 1, "entropy": 0.0,
                                   "restored": "native"}, fork=True)  # fmt: skip
    with pytest.raises(ValueError, match="forks from 7, which is not in its group"):
        compute_turn_advantages(bad, cfg)
    json.dumps(res.stats)


def test_fork_slot_plays_nothing_and_fork_start_checks_the_restore():
    """A fork slot's `execute` makes no env; `fork_start` on a real Toy episode restored in a fresh env keeps the
    backbone's row (steps, turns, tokens) before the fork turn, and refuses a restore that is not exact."""
    import asyncio
    from types import SimpleNamespace

    import gymnasium as gym

    import envkit  # noqa: F401  (registers envkit/Toy-v0)
    from envkit.recorder import EpisodeRecorder
    from envkit.trainers.openrlhf.branch_rows import fork_start
    from envkit.trainers.openrlhf.gym_executor import GymAgentExecutor, RolloutTask
    from envkit.trainers.openrlhf.rollout_records import RolloutRecord, RolloutSpec, Turn
    from envkit.trainers.openrlhf.sero_rows import SeroEpisode

    ex = GymAgentExecutor(_cfg())
    slot = asyncio.run(ex.execute("{obs}", "0", None, 64, None, SimpleNamespace(spec=RolloutSpec("g", 3, fork=True))))
    assert RolloutRecord.from_dict(slot["envkit"]).reason == "fork_slot" and not ex._free  # no env was made
    task = RolloutTask("envkit/Toy-v0", 0, {"goal": 3, "length": 6})
    env = gym.make(task.env_id)
    obs, info = env.reset(seed=0, options=task.options)
    ep = SeroEpisode(task, EpisodeRecorder(obs, info, snapshots=True), env)
    for action in ["right", "stay", "right"]:
        snap = env.snapshot()
        ep.recorder.step(snap, action, *env.step(action))
    turns = tuple(Turn(10 + 4 * k, 12 + 4 * k) for k in range(3))
    rec = RolloutRecord(RolloutSpec("g", 0), ep.initial_observation, ep.initial_info, ep.steps, turns)
    rec = RolloutRecord.from_dict(rec.to_dict())  # as it crossed Ray: no snapshots
    response = {"observation_tokens": list(range(30)), "rollout_log_probs": [-0.1] * 30}
    fresh = gym.make(task.env_id)
    start = fork_start(ep, rec, response, 2, *fresh.unwrapped.restore(ep.steps[2].snapshot))
    assert start.tokens == tuple(range(18)) and start.turns == rec.turns[:2] and start.logprobs == (-0.1,) * 18
    assert start.steps == rec.steps[:2] and start.observation == rec.steps[2].observation
    assert (start.start_observation, start.start_info) == (rec.observation, rec.info)
    with pytest.raises(RuntimeError, match="restore is not exact"):
        fork_start(ep, rec, response, 2, *fresh.unwrapped.restore(ep.steps[0].snapshot))


def test_a_forks_prefix_turns_have_no_tokens_in_its_loss():
    """A fork row's action ranges are its own turns: OpenRLHF's action mask is 0 on the backbone's prefix turn,
    so those tokens leave the loss (masked like observation tokens) and every own token gets its own turn's value."""
    import torch

    from envkit.trainers.openrlhf.experience import token_advantages, turn_token_ends
    from envkit.trainers.openrlhf.rollout_records import RolloutSpec
    from tests.trainers.openrlhf.records import T, record

    turns = tuple(T("s", "a", 0.0, False, s, s + 2) for s in (2, 6, 10))  # turn 0: the backbone's prefix
    rec = record(RolloutSpec("g", 2, fork=True), turns, extra={"branch": {"parent": 0, "fork": 1}})
    obs_mask = torch.zeros(13)
    for t in turns[1:]:  # the row's action_ranges
        obs_mask[t.start : t.end] = 1
    action_mask = obs_mask[1:]  # OpenRLHF's shift
    ret = token_advantages([5.0, 1.0, -2.0], turn_token_ends(rec, action_mask), action_mask, None, 0.0, None)
    assert action_mask.tolist() == [0.0] * 5 + [1.0, 1.0] + [0.0] * 2 + [1.0, 1.0, 0.0]  # the prefix turn is at 1, 2
    assert (ret * action_mask).tolist() == [0.0] * 5 + [1.0, 1.0] + [0.0] * 2 + [-2.0, -2.0, 0.0]
