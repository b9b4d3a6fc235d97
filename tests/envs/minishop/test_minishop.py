"""MiniShop (``envkit/MiniShop-v0`` / ``envkit/MiniShopHeldout-v0``): snapshot contract, exact oracle from any
restored state, disjoint train / held-out words, hostile actions, registered SERO facts."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import envkit
from envkit.envs.minishop.env import MiniShopEnv, vocabulary
from envkit.envs.minishop.tasks import ATTRIBUTES, HELDOUT_ATTRIBUTES, SPLIT_SIZES, make_tasks
from envkit.errors import EnvkitError, InvalidActionError
from envkit.oracles.base import make_oracle, run_oracle
from envkit.oracles.minishop import steps_to_win
from envkit.registration import env_facts


@pytest.mark.parametrize("env_id", ["envkit/MiniShop-v0", "envkit/MiniShopHeldout-v0"])
@pytest.mark.parametrize(("seed", "depth"), [(0, 0), (1, 2), (7, 3), (40, 5)])
def test_snapshot_contract(env_id, seed, depth):
    env = envkit.make(env_id)
    report = envkit.check_snapshot_env(env, seed=seed, depth=depth, horizon=4)
    assert sorted(report.rules) == [1, 2, 3, 4, 5, 6] and env.metadata["snapshot"] == "native"


def test_one_right_item_per_task_and_exact_reward():
    for split in ("train", "heldout"):
        tasks = make_tasks(split)
        assert len(tasks) == SPLIT_SIZES[split] and tasks == make_tasks(split)  # fixed lists
        for t in tasks:
            assert t.items.count(t.goal) == 1 and len(set(t.items)) == len(t.items) == 4
    env = MiniShopEnv()
    obs, info = env.reset(options={"task": 1})
    task = env.task
    listed = " , ".join(f"{task.noun} ${p} {w} opt{k + 1}" for k, (w, p) in enumerate(zip(task.items, task.prices)))
    assert obs == f"page: results ; choose one: {listed} ; find the {task.noun} that is {task.goal}"
    assert obs.endswith(f" {task.goal}") and f" {task.goal} opt{task.answer + 1} " in obs + " "
    wrong = (task.answer + 1) % 4
    obs, r, term, trunc, info = env.step(f"opt{wrong + 1}")
    assert (r, term, info["page"]) == (0.0, False, "item")
    assert f"buy {task.noun} ${task.prices[wrong]} {task.items[wrong]} opt1 , back to results opt2" in obs
    env.step("opt2")  # back to results: the wrong pick is recovered
    env.step(f"opt{task.answer + 1}")
    obs, r, term, trunc, info = env.step("opt1")
    assert (r, term, trunc, info["success"], info["step"]) == (1.0, True, False, True, 4)
    assert "reward 1.0" in obs and info["admissible_actions"] == []
    env.reset(options={"task": 1})
    env.step(f"opt{wrong + 1}")
    assert env.step("opt1")[1:3] == (0.0, True)  # a wrong buy commits: episode over, reward 0


def test_train_and_heldout_words_are_disjoint():
    train, held = make_tasks("train"), make_tasks("heldout")
    words = lambda ts: {w for t in ts for w in (t.goal, *t.items)}  # noqa: E731
    assert not words(train) & words(held)
    assert words(held) == set(HELDOUT_ATTRIBUTES) and words(train) | words(held) == set(ATTRIBUTES)
    assert {t.goal for t in held} == set(HELDOUT_ATTRIBUTES)  # every held-out word is a goal somewhere
    assert len(HELDOUT_ATTRIBUTES) == 24 and len(set(ATTRIBUTES)) == len(ATTRIBUTES) == 72


def test_vocabulary_covers_every_observation_word():
    vocab = vocabulary()
    for env_id in ("envkit/MiniShop-v0", "envkit/MiniShopHeldout-v0"):
        env = envkit.make(env_id).unwrapped
        rng = np.random.default_rng(0)
        for k in range(len(env.tasks)):
            obs, info = env.reset(options={"task": k})
            for _ in range(8):
                assert set(re.findall(r"\w+|[^\w\s]+", obs)) <= vocab, obs
                obs, _, term, trunc, info = env.step(str(rng.choice(info["admissible_actions"] or ["opt1"])))
                if term or trunc:
                    break


def _walk(env, rng, n):
    """n random actions (listed labels, out-of-range labels, junk) from reset; stops at the episode's end."""
    obs, info = env.reset(seed=int(rng.integers(0, 10_000)))
    for _ in range(n):
        a = str(rng.choice([*info["admissible_actions"], "opt9", "junk"]))
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            return obs, info, True
    return obs, info, False


def test_oracle_finishes_from_every_restored_state_in_the_fewest_steps():
    env, fresh = MiniShopEnv(), MiniShopEnv()
    oracle = make_oracle("envkit/MiniShop-v0")
    rng = np.random.default_rng(3)
    won = dead = 0
    for _ in range(300):
        _, _, over = _walk(env, rng, int(rng.integers(0, 8)))
        snap = pickle.loads(pickle.dumps(env.snapshot()))
        obs, info = fresh.restore(snap)  # a fresh instance: native restore of a pickled snapshot
        need, left = steps_to_win(fresh), fresh.steps_left
        reason = oracle.dead_end(fresh)
        if over or need is None or need > left:
            assert reason is not None
            dead += 1
            continue
        assert reason is None
        oracle.start(fresh, obs, info)
        run = run_oracle(fresh, oracle, obs, info, max_steps=left)
        assert run.success and len(run.steps) == need  # exact: the shortest finish, always a success
        won += 1
    assert won > 100 and dead > 20


def test_every_listed_action_keeps_a_finish_within_the_budget_until_it_is_spent():
    """Failures are recoverable: from reset, whatever listed actions a policy takes, the oracle can still win as
    long as no item was bought and 3 steps are left (the registered min_root_budget)."""
    env = MiniShopEnv()
    rng = np.random.default_rng(5)
    for _ in range(200):
        obs, info = env.reset(seed=int(rng.integers(0, 10_000)))
        for _ in range(5):  # 5 non-buying steps: 3 are left
            cmds = [a for a, c in zip(info["admissible_actions"], info["commands"], strict=True) if c[:4] != "buy "]
            obs, _, term, trunc, info = env.step(str(rng.choice(cmds)))
        assert not (term or trunc) and steps_to_win(env) <= env.steps_left == 3


@pytest.mark.parametrize(
    "action", ["opt0", "opt5", "opt99", "opt-1", "opt 1", "OPT1", "1", "buy", "back to results", "", "   ", "opt1opt2",
               "click[opt1]", "ôpt1", "opt１", "\x00opt1", "opt1\nopt2", "x" * 200]
)  # fmt: skip
def test_hostile_actions_are_invalid_cost_a_step_and_never_reward(action):
    env = MiniShopEnv()
    env.reset(options={"task": 3})  # results page: 4 commands
    before = env._snapshot()
    obs, r, term, trunc, info = env.step(action)
    assert (r, term, trunc, info["invalid"], info["success"]) == (0.0, False, False, True, False)
    assert obs.startswith("invalid action: answer with a listed label opt1 to opt4 ; page: results")
    assert env.page == "results" and info["step"] == before[3] + 1  # only the step counter moved


def test_out_of_range_label_on_the_item_page_and_budget_exhaustion():
    env = MiniShopEnv()
    env.reset(options={"task": 0})
    env.step("opt1")  # an item's page: 2 commands
    obs, r, *_, info = env.step("opt3")
    assert info["invalid"] and env.page == "item" and "opt1 to opt2" in obs
    for _ in range(6):
        obs, r, term, trunc, info = env.step("nonsense")
    assert (r, term, trunc, info["step"]) == (0.0, False, True, 8)  # the 8-step budget ends the episode
    with pytest.raises(envkit.errors.ResetNeededError):
        env.step("opt1")


def test_refused_inputs_and_options():
    env = MiniShopEnv()
    env.reset(seed=0)
    with pytest.raises(InvalidActionError):
        env.step(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidActionError):
        env.step("a" * 300)  # over the action length cap
    for bad in (-1, 160, True, "2", 1.0):
        with pytest.raises(ValueError, match=r"option task must be an int in 0\.\.159"):
            env.reset(options={"task": bad})
    with pytest.raises(ValueError, match="split must be one of"):
        MiniShopEnv(split="test")
    with pytest.raises(ValueError, match="max_steps must be >= 3"):
        MiniShopEnv(max_steps=2)


def test_heldout_env_refuses_the_oracle_and_seeds_pick_tasks():
    env = envkit.make("envkit/MiniShopHeldout-v0").unwrapped
    obs, info = env.reset(seed=50)
    assert info["task_id"] == "minishop-heldout-2"  # 50 % 48
    with pytest.raises(EnvkitError, match="evaluation env"):
        run_oracle(env, make_oracle("envkit/MiniShopHeldout-v0"), obs, info, max_steps=8)


def test_registered_sero_facts_match_the_env():
    for env_id in ("envkit/MiniShop-v0", "envkit/MiniShopHeldout-v0"):
        facts = env_facts(env_id)
        assert (facts.horizon, facts.min_root_budget, facts.gamma_g) == (8, 3, 0.20)
        assert facts.oracle == "envkit.oracles.minishop:MiniShopOracle" and not facts.single_turn
    assert MiniShopEnv().max_steps == env_facts("envkit/MiniShop-v0").horizon
    # min_root_budget is the longest shortest finish (a wrong item's page: back, click, buy)
    env = MiniShopEnv()
    env.reset(options={"task": 0})
    assert steps_to_win(env) == 2
    env.step(f"opt{(env.task.answer + 1) % 4 + 1}")
    assert steps_to_win(env) == 3 == env_facts("envkit/MiniShop-v0").min_root_budget


def test_state_key_names_the_state_not_the_step_or_the_feedback():
    env = MiniShopEnv()
    _, info0 = env.reset(options={"task": 2})
    _, _, _, _, bad = env.step("junk")  # invalid: same state, one step later, another observation
    assert bad["state_key"] == info0["state_key"] and bad["step"] == 1
    _, _, _, _, item = env.step("opt1")
    _, _, _, _, back = env.step("opt2")
    assert item["state_key"] != info0["state_key"] and back["state_key"] == info0["state_key"]
    other = MiniShopEnv(split="heldout", evaluation=False)
    assert other.reset(options={"task": 2})[1]["state_key"] != info0["state_key"]  # the split is part of it


def _fixed_position_success(env_id: str, position: int) -> float:
    """Success share of the policy that always clicks item `position` and buys it, over every task of `env_id`."""
    env = envkit.make(env_id).unwrapped
    wins = 0
    for k in range(len(env.tasks)):
        env.reset(options={"task": k})
        env.step(f"opt{position + 1}")
        wins += int(env.step("opt1")[1] == 1.0)
    return wins / len(env.tasks)


@pytest.mark.parametrize("env_id", ["envkit/MiniShopHeldoutRotated-v0", "envkit/MiniShopReadableHeldoutRotated-v0",
                                    "envkit/MiniShopReadableEndHeldoutRotated-v0"])  # fmt: skip
def test_rotated_heldout_gives_any_positional_policy_exactly_a_quarter(env_id):
    for position in range(4):
        assert _fixed_position_success(env_id, position) == 0.25
    # the unrotated held-out set had a positional shortcut (answers at positions 8/14/9/17 of 48)
    assert max(_fixed_position_success("envkit/MiniShopHeldout-v0", p) for p in range(4)) == 17 / 48


def test_rotations_move_only_the_listing():
    base, rot = make_tasks("heldout"), make_tasks("heldout", rotations=4)
    n = SPLIT_SIZES["heldout"]
    assert len(rot) == 4 * n and rot[:n] == base
    for r in range(4):
        for k in (0, 5, 47):
            t = rot[r * n + k]
            assert (t.goal, t.noun, sorted(t.items)) == (base[k].goal, base[k].noun, sorted(base[k].items))
            assert t.answer == (base[k].answer - r) % 4 and t.prices[t.answer] == base[k].prices[base[k].answer]
    with pytest.raises(ValueError, match="rotations must be 1 or 4"):
        make_tasks("train", rotations=2)


def test_readable_item_page_says_match_or_nomatch_and_nothing_else_changes():
    word, readable = envkit.make("envkit/MiniShop-v0").unwrapped, envkit.make("envkit/MiniShopReadable-v0").unwrapped
    for env in (word, readable):
        env.reset(options={"task": 3})
    assert word.reset(options={"task": 3})[0] == readable.reset(options={"task": 3})[0]  # the results page
    answer = readable.task.answer
    right = readable.step(f"opt{answer + 1}")[0]
    assert right.startswith("page: item ; match ; choose one: buy ")
    readable.step("opt2")
    wrong = readable.step(f"opt{(answer + 1) % 4 + 1}")[0]
    assert wrong.startswith("page: item ; nomatch ; choose one: buy ")
    plain = word.step(f"opt{(answer + 1) % 4 + 1}")[0]
    assert plain.startswith("page: item ; choose one: buy ") and "match" not in plain.split()
    assert {"match", "nomatch"} <= vocabulary()
    run = run_oracle(readable, make_oracle("envkit/MiniShopReadable-v0"), *readable.reset(options={"task": 3}),
                     max_steps=8)  # fmt: skip
    assert run.success and len(run.steps) == 2


def test_readable_end_puts_the_verdict_last_and_refuses_an_unknown_marker():
    top, end = (
        envkit.make("envkit/MiniShopReadable-v0").unwrapped,
        envkit.make("envkit/MiniShopReadableEnd-v0").unwrapped,
    )
    for env in (top, end):
        env.reset(options={"task": 3})
    answer = end.task.answer
    a, b = top.step(f"opt{answer + 1}")[0], end.step(f"opt{answer + 1}")[0]
    assert b.endswith(f"{end.task.instruction} ; match") and b.split()[:3] == ["page:", "item", ";"]
    assert sorted(a.split()) == sorted(b.split())  # the same words, only the verdict moved
    end.step("opt2")
    assert end.step(f"opt{(answer + 1) % 4 + 1}")[0].endswith(" ; nomatch")
    assert "match" not in end.step("opt2")[0].split()  # the results page has no verdict
    assert end.state_settings()["marker"] == "end" and top.state_settings()["marker"] == "top"
    run = run_oracle(end, make_oracle("envkit/MiniShopReadableEnd-v0"), *end.reset(options={"task": 3}), max_steps=8)
    assert run.success and len(run.steps) == 2
    with pytest.raises(ValueError, match="marker must be one of"):
        MiniShopEnv(readable=True, marker="middle")
