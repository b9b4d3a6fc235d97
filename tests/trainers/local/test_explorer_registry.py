"""The local trainer's explorer registry, the budget check of `collect`, and the run as the one owner of sizes."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

from envkit.runtime.models import ModelConfig
from envkit.trainers.explorers.eden import EdenConfig
from envkit.trainers.explorers.xrpo import XrpoConfig
from envkit.trainers.local.agent_source import AgentSource
from envkit.trainers.local.contracts import Budget
from envkit.trainers.local.explorers.plain import PlainEpisodes, PlainGroups
from envkit.trainers.local.explorers.registry import (
    AGENT_EXPLORERS,
    SINGLE_TURN_EXPLORERS,
    make_single_turn_explorer,
    make_source,
)
from envkit.trainers.local.multi_turn import AgentConfig
from envkit.trainers.local.single_turn_source import SingleTurnSource
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig

TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)


def test_every_explorer_exists_for_its_run_kinds():
    # branching rollouts fork agent episodes: multi-turn only
    assert set(SINGLE_TURN_EXPLORERS) == {"none", "eden", "xrpo"}
    assert set(AGENT_EXPLORERS) == {"none", "eden", "xrpo", "branch"}


def test_an_unknown_name_says_what_exists():
    cfg = TrainConfig(task="arith")
    with pytest.raises(
        ValueError, match=r"no single-turn explorer named 'edn'; did you mean 'eden'\? \(known: eden, none, xrpo\)"
    ):
        make_single_turn_explorer(dataclasses.replace(cfg, explorer="edn"), None, None, None, None)  # type: ignore[arg-type]


def test_the_source_and_its_explorer_follow_the_run_kind(tmp_path):
    kw = dict(model=TINY, run_dir=str(tmp_path), tensorboard=False, plot=False, progress=False)
    single = LocalTrainer(TrainConfig(task="arith:1", **kw))  # type: ignore[arg-type]
    assert isinstance(single.source, SingleTurnSource) and isinstance(single.explorer, PlainGroups)
    agent = LocalTrainer(TrainConfig(task="envkit/Toy-v0", agent=AgentConfig(max_turns=2), **kw))  # type: ignore[arg-type]
    assert isinstance(agent.source, AgentSource) and isinstance(agent.explorer, PlainEpisodes)
    with pytest.raises(ValueError, match="needs its task"):
        make_source(single.cfg, single.model, single.tok, None, None)


def test_collect_checks_the_budget_once(tmp_path):
    cfg = TrainConfig(task="envkit/Toy-v0", model=TINY, run_dir=str(tmp_path), prompts_per_step=2, group_size=3,
                      agent=AgentConfig(max_turns=2), tensorboard=False, plot=False, progress=False)  # fmt: skip
    trainer = LocalTrainer(cfg)
    episodes = trainer.explorer.collect(1, [5, 6], Budget(2, 3), seed=1)  # type: ignore[arg-type]
    assert len(episodes) == 6 and {e.group for e in episodes} == {0, 1}
    with pytest.raises(ValueError, match="2 task seeds for a budget of 3"):
        trainer.explorer.collect(1, [5, 6], Budget(3, 3), seed=1)  # type: ignore[arg-type]

    class Greedy(PlainEpisodes):  # spends one episode more than the run's budget
        def _collect(self, step, seeds, budget, *, seed):
            return super()._collect(step, seeds, Budget(budget.prompts, budget.group_size + 1), seed=seed)

    with pytest.raises(RuntimeError, match=r"collected 8 samples for a budget of 6 \(2 prompts x group_size 3\)"):
        Greedy(cfg, trainer.model, trainer.tok).collect(1, [5, 6], Budget(2, 3), seed=1)


def test_the_run_owns_the_group_size():
    assert not hasattr(EdenConfig(), "group_size") and not hasattr(XrpoConfig(), "group_size")
    assert Budget.of(TrainConfig(prompts_per_step=3, group_size=5)) == Budget(3, 5)
    assert Budget(3, 5).total == 15


def test_an_old_eden_group_size_flag_fails_with_a_clear_error():
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "envkit.trainers.cli", "local", "--eden.group-size", "8", "--steps", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "No such option: --eden.group-size (did you mean --group-size?)" in proc.stdout + proc.stderr


def test_the_budget_check_wants_every_prompt_and_no_other():
    Budget(2, 2).check("x", [0, 0, 1, 1])
    Budget(2, 2).check("x", [0, 1, 1], fixed_total=False)  # branch: another budget, but every task
    for groups in ([0, 0, 0, 0], [0, 1, 2, 1]):
        with pytest.raises(RuntimeError, match=r"must cover prompts 0\.\.1"):
            Budget(2, 2).check("x", groups)
    with pytest.raises(RuntimeError, match="collected 3 samples for a budget of 4"):
        Budget(2, 2).check("x", [0, 1, 1])
