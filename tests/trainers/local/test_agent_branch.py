"""Branching rollouts in the local trainer (`envkit.trainers.local.explorers.branch`), on the real Toy-v0 env with a
tiny transformers model: the env-step budget, the rows, the discards and the credit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envkit.core import Step  # noqa: E402
from envkit.credit.advantage_options import AdvantageOptions  # noqa: E402
from envkit.errors import SnapshotError  # noqa: E402
from envkit.runtime.models import ModelConfig  # noqa: E402
from envkit.trainers.local import multi_turn  # noqa: E402
from envkit.trainers.local.contracts import Budget  # noqa: E402
from envkit.trainers.local.explorers.branch import AgentBranchDriver, branch_config, fork  # noqa: E402
from envkit.trainers.local.multi_turn import AgentConfig, Episode  # noqa: E402
from envkit.trainers.local.trainer import LocalTrainer, TrainConfig  # noqa: E402

torch.set_num_threads(1)
TINY = ModelConfig(path="tiny:bytes", device="cpu", hidden_size=32, layers=1)
TOY = "envkit/Toy-v0"


def _cfg(tmp_path, **branch) -> TrainConfig:
    base = TrainConfig(
        task=TOY, model=TINY, run_dir=str(tmp_path), steps=1, prompts_per_step=2, group_size=4, max_new_tokens=6,
        agent=AgentConfig(max_turns=4, max_context_tokens=4000, estimator="gigpo"), tensorboard=False, plot=False,
        progress=False,
    )  # fmt: skip
    return branch_config(base, **branch)


@pytest.fixture()
def counted_steps(monkeypatch):
    """Counts every `step` call on the trainer's Toy env instances (the real env does the step)."""
    calls = {"n": 0}
    for env in multi_turn.shared_envs(TOY, 40):

        def counting(action, _step=env.step):
            calls["n"] += 1
            return _step(action)

        monkeypatch.setattr(env, "step", counting)
    return calls


def _collect(trainer: LocalTrainer):
    return trainer.explorer.collect(0, [11, 12], Budget.of(trainer.cfg), seed=5)


def test_the_env_step_budget_holds_and_every_snapshot_is_discarded(tmp_path, counted_steps):
    trainer = LocalTrainer(_cfg(tmp_path, points=3, branches=2))
    driver = trainer.explorer
    assert isinstance(driver, AgentBranchDriver) and (driver.backbones, driver.budget) == (2, 16)
    episodes = _collect(trainer)
    stats = driver._stats
    backbones = [e for e in episodes if driver._links[(e.group, e.index)] == (-1, 0) and e.steps]
    branches = [e for e in episodes if e not in backbones]
    assert len(backbones) == 4 and len(branches) == stats["branches"] == 2 * stats["branch_points"]
    assert stats["branch_env_steps"] == counted_steps["n"]  # the metric counts exactly the env's steps
    for g in (0, 1):
        used = sum(len(e.actions) for e in backbones if e.group == g)
        used += sum(len(e.actions) - driver._links[(g, e.index)][1] for e in branches if e.group == g)
        assert used <= 16
    # every snapshot the backbones took is gone from the env that took it
    snaps = [(b.env, s) for b in backbones for s in b.snapshots()]
    assert len(snaps) == stats["branch_snapshots_discarded"] == sum(len(b.actions) + 1 for b in backbones)
    for env, s in snaps:
        with pytest.raises(SnapshotError, match="discarded"):
            env.restore(s)
    assert not any(e.snapshots() for e in branches)  # branches take no snapshots of their own


def test_a_tight_budget_admits_only_points_whose_worst_case_fits(tmp_path, counted_steps):
    # 2 backbones x 4 turns = 8 steps; 2 steps left: only a point at turn 3 fits (K=2 branches of 1 step).
    trainer = LocalTrainer(_cfg(tmp_path, points=4, branches=2, budget_steps=10))
    episodes = _collect(trainer)
    driver = trainer.explorer
    branches = [e for e in episodes if driver._links[(e.group, e.index)] != (-1, 0)]
    assert driver._stats["branch_points"] == 2 and len(branches) == 4
    assert all(driver._links[(e.group, e.index)][1] == 3 and len(e.actions) == 4 for e in branches)
    assert counted_steps["n"] == driver._stats["branch_env_steps"] == 2 * 10


def test_set_budget_changes_the_next_steps_budget_and_logs_a_backbone_overrun(tmp_path, counted_steps):
    trainer = LocalTrainer(_cfg(tmp_path, points=4, branches=2))
    trainer.explorer.set_budget(8)  # the backbones' worst case exactly: no branch fits
    _collect(trainer)
    stats = trainer.explorer._stats
    assert stats["branches"] == 0 and counted_steps["n"] == 2 * 8 and stats["branch_budget_overrun"] == 0
    trainer.explorer.set_budget(5)  # below the backbones' 2 x 4 steps: they overrun it by 3 per task, no branch
    _collect(trainer)
    stats = trainer.explorer._stats
    assert stats["branches"] == 0 and counted_steps["n"] == 4 * 8 and stats["branch_budget_overrun"] == 2 * 3
    with pytest.raises(ValueError, match="must be >= 1"):
        trainer.explorer.set_budget(0)
    assert trainer.explorer.budget == 5


def test_branch_rows_train_only_their_own_actions_after_the_backbones_prefix(tmp_path):
    trainer = LocalTrainer(_cfg(tmp_path, points=2, branches=2))
    batch, m = trainer.source.batch(0, seed=3)
    assert m["rollouts"] == len(batch.prompts) == 4 + m["branches"] and m["branches"] == 8
    for key in ("branch_points", "branch_entropy_at_points", "branches_finished", "branch_loo_mass"):
        assert key in m
    assert m["branch_entropy_at_points"] >= m["branch_entropy_all"] - 1e-9  # the highest-entropy decisions
    full = [p + r for p, r in zip(batch.prompts, batch.responses, strict=True)]
    longest_prompt = max(len(p) for p in batch.prompts)
    assert longest_prompt > min(len(p) for p in batch.prompts)  # forks after turn 0 carry a prefix
    for p, r, f in zip(batch.prompts, batch.responses, batch.loss_flags, strict=True):
        assert len(r) == len(f) and sum(f) > 0
        assert any(other[: len(p)] == p for other in full)  # a branch's prompt is some row's token prefix


def _episode(group, index, actions, success):
    steps = [Step("s", a, 0.0, "s", success and t == len(actions) - 1, False, {"success": success})
             for t, a in enumerate(actions)]  # fmt: skip
    return Episode.from_steps(group, index, "s", {}, steps)


def test_postprocess_adds_weighted_leave_one_out_to_the_estimator(tmp_path):
    base = _cfg(tmp_path, loo_weight=2.0, estimator_weight=0.5)
    agent = AgentConfig(max_turns=4, estimator="gigpo", adv=AdvantageOptions(terminal_reward=10.0, norm="mean"))
    run = dataclasses.replace(base, agent=agent)
    driver = AgentBranchDriver(base.branch, None, None, run)  # type: ignore[arg-type]  # postprocess needs no model
    eps = [_episode(0, 0, ["a", "b", "c"], True), _episode(0, 1, ["a", "x"], False)]
    driver._links = {(0, 0): (-1, 0), (0, 1): (0, 1)}
    credit = driver.postprocess(eps, [np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0])])
    out, stats = credit.advantages, credit.metrics
    # LOO at (0, 1): returns 10 vs 0 -> +10 / -10; 0.5 * estimator + 2 * LOO
    assert out[0].tolist() == [0.5, 20.5, 20.5] and out[1].tolist() == [1.0, -19.0]
    assert stats["branch_loo_mass"] == 30.0 and stats["branch_loo_abs_mean"] == 7.5
    assert stats["branch_loo_nonzero_share"] == 0.75 and stats["branch_decisions"] == 1


def test_sero_single_turn_and_snapshotless_forks_are_refused(tmp_path):
    cfg = _cfg(tmp_path)
    with pytest.raises(ValueError, match=r"set agent\.sero=False"):
        sero = dataclasses.replace(cfg, agent=AgentConfig(max_turns=4, estimator="graphgpo", sero=True))
        AgentBranchDriver(cfg.branch, None, None, sero)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no single-turn explorer named 'branch'"):
        LocalTrainer(TrainConfig(task="arith", model=TINY, run_dir=str(tmp_path), explorer="branch"))
    with pytest.raises(ValueError, match="play it with record=True"):
        fork(_episode(0, 0, ["a"], False), 0, None, 1)


def test_decision_entropies_match_the_full_forward_at_the_sampling_temperature():
    from envkit.runtime.models import load_model
    from envkit.trainers.local.explorers.branch import decision_entropies
    from envkit.trainers.local.generation import batch_sequences
    from envkit.trainers.local.multi_turn import EpisodeSpec, play_specs
    from envkit.trainers.losses import token_entropy

    model, tok = load_model(TINY)
    torch.manual_seed(0)
    with torch.no_grad():  # a peaked, non-uniform policy, so the temperature matters
        model.get_output_embeddings().weight.mul_(40.0)
    agent = AgentConfig(max_turns=3, max_context_tokens=4000)
    (e,) = play_specs(model, tok, TOY, [EpisodeSpec(0, 0, 3)], agent, max_new_tokens=6, temperature=0.7, seed=1)
    got = decision_entropies(model, tok, [e], 0.7)[0]
    ids, attn, _ = batch_sequences([e.prompt_ids], [e.context[len(e.prompt_ids) :]], tok.pad_token_id, "cpu")
    with torch.no_grad():
        ent = token_entropy(model(input_ids=ids, attention_mask=attn).logits[0, :-1].float() / 0.7)
    want = [
        np.mean([float(ent[len(e.prompt_ids) + j - 1]) for j, t in enumerate(e.turn_of_token) if t == k])
        for k in range(len(e.actions))
    ]
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert len(got) == len(e.actions) == 3
    hotter = decision_entropies(model, tok, [e], 2.0)[0]
    assert (hotter > got).all()  # entropy at the sampling temperature, not at 1
