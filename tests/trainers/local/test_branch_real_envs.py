"""Branching rollouts on the real ALFWorld (TextWorld/PDDL engine) and WebShop envs: a fork restores the exact
state (observation, info, and the same transitions for the same actions), natively; and a short local-trainer
run with ``explorer="branch"`` on WebShop produces rows and the branch metrics."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.core import jsonable  # noqa: E402
from envkit.recorder import EpisodeRecorder  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.local.explorers.branch import fork  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig, Episode  # noqa: E402

torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)


def _needs_alfworld() -> None:
    if importlib.util.find_spec("textworld") is None or importlib.util.find_spec("alfworld") is None:
        pytest.skip("needs the alfworld extra: pip install -e '.[alfworld]'")


def _transition(out: tuple) -> tuple:
    obs, reward, terminated, truncated, info = out
    return str(obs), float(reward), bool(terminated), bool(truncated), jsonable(info)


def _backbone(env: Any, reset: dict[str, Any], choose) -> tuple[Episode, list[tuple]]:
    """A scripted episode recorded the way `play_specs(record=True)` records one (a snapshot before each step),
    with stand-in token ids: turn k's action is one id, its observation one more."""
    obs, info = env.reset(**reset)
    ep = Episode(0, 0, env, [0], [0], [], [], EpisodeRecorder(obs, info, snapshots=True))
    transitions = []
    for k in range(6):
        action = choose(k, info)
        snap = env.snapshot()
        out = env.step(action)
        transitions.append(_transition(out))
        ep.recorder.step(snap, action, *out)  # the episode's one record: actions, rewards, flags, infos
        ep.context += [100 + k, 7]
        ep.flags += [1, 0]
        ep.turn_of_token += [k, -1]
        info = out[4]
        if out[2] or out[3]:
            break
    return ep, transitions


def _check_forks(backbone: Episode, transitions: list[tuple], envs: list[Any], native: bool) -> None:
    for t in range(len(backbone.actions)):
        for j, env in enumerate(envs):
            kid = fork(backbone, t, env, 1 + j)
            if native:
                assert getattr(env.unwrapped, "last_restore_kind", "native") == "native"
            assert kid.observations == backbone.observations[: t + 1] and kid.actions == backbone.actions[:t]
            assert kid.infos == backbone.infos[: t + 1] and kid.snapshots() == []  # the prefix is the backbone's
            assert kid.prompt_ids == backbone.context[: 1 + 2 * t]  # the shared token prefix, up to turn t
        # the same actions from the restored state give the backbone's transitions, in every fork
        for k in range(t, len(backbone.actions)):
            outs = [_transition(env.step(backbone.actions[k])) for env in envs]
            assert all(o == transitions[k] for o in outs), (t, k)


def test_alfworld_forks_restore_the_exact_state_natively_in_the_backbones_instance(alfworld_data: Path):
    _needs_alfworld()
    from envkit.envs.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(data_dir=alfworld_data)
    try:
        backbone, transitions = _backbone(
            env, {"seed": 0, "options": {"game": 0}}, lambda k, info: sorted(info["admissible_actions"])[(7 * k) % 5]
        )
        assert len(set(backbone.observations)) > 2  # the script moves through different states
        # restore info equals the one recorded at the snapshot: step 0's comes from reset, check later ones
        for t in range(1, len(backbone.actions)):
            obs, info = env.restore(backbone.steps[t].snapshot)
            assert str(obs) == backbone.observations[t]
            assert jsonable(info) == backbone.steps[t - 1].info
        _check_forks(backbone, transitions, [env], native=True)
    finally:
        env.close()


def test_webshop_forks_restore_the_exact_state_natively_in_fresh_instances():
    pytest.importorskip("bm25s")
    from envkit.envs.webshop.env import WebShopEnv

    env = WebShopEnv()
    obs, info = env.reset(seed=0, options={"goal_index": 7})
    g = env.goal
    title = env.catalog.by_asin[g.asin].title.lower()
    script = [f"search[{title}]", f"click[{g.asin.lower()}]", "click[< prev]", f"click[{g.asin.lower()}]"]
    script += [f"click[{v}]" for v in g.goal_options] + ["click[buy now]"]
    backbone, transitions = _backbone(env, {"seed": 0, "options": {"goal_index": 7}}, lambda k, info: script[k])
    assert len(set(backbone.observations)) >= 3
    for t in range(1, len(backbone.actions)):
        fresh = WebShopEnv()
        obs, info = fresh.restore(backbone.steps[t].snapshot)
        assert str(obs) == backbone.observations[t] and jsonable(info) == backbone.steps[t - 1].info
    _check_forks(backbone, transitions, [WebShopEnv(), WebShopEnv()], native=True)


@pytest.mark.slow
def test_a_short_local_run_with_the_branch_explorer_on_webshop(tmp_path):
    pytest.importorskip("bm25s")
    from envkit.trainers.explorers.branch import BranchConfig
    from envkit.trainers.local.trainer import LocalTrainer, TrainConfig

    cfg = TrainConfig(
        task="envkit/WebShop-v0", model=TINY, run_dir=str(tmp_path), steps=2, prompts_per_step=2, group_size=2,
        max_new_tokens=8, explorer="branch", branch=BranchConfig(points=2, branches=2),
        agent=AgentConfig(max_turns=3, max_context_tokens=8000, estimator="grpo"), tensorboard=False, plot=False,
        progress=False, lr_warmup_steps=1,
    )  # fmt: skip
    LocalTrainer(cfg).train()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "branch_points" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["branch_points"] >= 1 and r["branches"] == 2 * r["branch_points"] == r["branches_finished"]
        assert r["branch_native_restores"] == r["branches"] and r["branch_replay_restores"] == 0
        assert r["branch_env_steps"] <= r["branch_budget_steps"] == 2 * 2 * 3
        assert r["branch_entropy_at_points"] > 0 and r["branch_snapshots_discarded"] > 0
        assert r["rows_in_loss"] == r["rollouts"] == 2 + r["branches"]
        assert "branch_loo_mass" in r and r["branch_decisions"] >= 1


@pytest.mark.slow
def test_alfworld_branches_run_in_the_backbones_own_instance(alfworld_data: Path, tmp_path, monkeypatch):
    _needs_alfworld()
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data))
    from envkit.trainers.explorers.branch import BranchConfig
    from envkit.trainers.local.trainer import LocalTrainer, TrainConfig

    cfg = TrainConfig(
        task="envkit/ALFWorld-v0", model=TINY, run_dir=str(tmp_path), steps=1, prompts_per_step=1, group_size=2,
        max_new_tokens=6, explorer="branch", branch=BranchConfig(points=2, branches=2),
        agent=AgentConfig(max_turns=3, max_context_tokens=8000, estimator="gigpo"), tensorboard=False, plot=False,
        progress=False,
    )  # fmt: skip
    trainer = LocalTrainer(cfg)
    batch, m = trainer.source.batch(0, seed=1)
    assert m["branches"] == 2 * m["branch_points"] >= 2
    assert m["branch_native_restores"] == m["branches"] and m["branch_replay_restores"] == 0
    assert m["branch_env_steps"] <= m["branch_budget_steps"] == 6 and len(batch.prompts) == 1 + m["branches"]
