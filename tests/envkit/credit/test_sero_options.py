"""SERO's options: one owner per knob, `None` resolved once, each front-end's extension widening the shared base."""

from __future__ import annotations

import dataclasses

import pytest

from envkit.credit.defaults import MIN_ROOT_BUDGET
from envkit.credit.reachability import ReachConfig
from envkit.credit.sero import SeroConfig, SeroOptions, widen_options
from envkit.registration import ENVS, EnvEntry, env_facts


def test_a_root_budget_left_unset_is_the_envs_and_a_set_one_stays():
    """The per-env resolver (`envkit.env_settings`) is the one place ``min_budget=None`` becomes the env's."""
    from envkit.env_settings import ORACLE_NAMES, resolve_env_settings

    def budget(env_id, min_budget=None):
        return resolve_env_settings(env_id, names=ORACLE_NAMES, root_budget=min_budget).root_budget

    assert budget("envkit/WebShop-v0") == 8  # EnvEntry.min_root_budget
    assert budget("envkit/ALFWorld-v0") == 20
    assert budget("my/Unregistered-v0") == MIN_ROOT_BUDGET == 2  # the registry's default
    assert budget(None) == MIN_ROOT_BUDGET
    assert budget("envkit/ALFWorld-v0", 3) == 3
    for e in ENVS.values():  # resolve gives the maths the same number
        assert SeroOptions(min_budget=budget(e.id)).resolve(horizon=50).root_budget == e.min_root_budget


def test_one_default_site_for_the_minimum_root_budget():
    assert EnvEntry("x", "m:C", None, "").min_root_budget == MIN_ROOT_BUDGET
    assert SeroConfig().root_budget == MIN_ROOT_BUDGET
    assert env_facts("my/Unregistered-v0").min_root_budget == MIN_ROOT_BUDGET


def test_resolve_keeps_only_the_shared_knobs_and_what_the_run_fixes():
    pytest.importorskip("tyro")
    from envkit.trainers.sero_options import TrainerSeroOptions

    opts = TrainerSeroOptions(roots_per_group=3, same_state="all", reach=ReachConfig(tau_w=2.0), max_oracle_share=0.5)
    cfg = opts.resolve(horizon=12, gamma_g=0.2, terminal_reward=1.0)
    assert type(cfg) is SeroConfig
    assert (cfg.roots_per_group, cfg.same_state, cfg.reach.tau_w, cfg.min_budget) == (3, "all", 2.0, 2)
    assert (cfg.horizon, cfg.gamma_g, cfg.terminal_reward) == (12, 0.2, 1.0)
    assert not hasattr(cfg, "max_oracle_share")


def test_a_front_end_widens_the_shared_options_and_refuses_another_front_ends():
    pytest.importorskip("tyro")
    from envkit.oracles.run_config import OracleSeroOptions
    from envkit.trainers.sero_options import TrainerSeroOptions

    shared = SeroOptions(roots_per_group=1, min_budget=4, reach=ReachConfig(w_min=0.1))
    wide = widen_options(shared, TrainerSeroOptions, "--sero-opts")
    assert type(wide) is TrainerSeroOptions
    assert {f.name: getattr(wide, f.name) for f in dataclasses.fields(SeroOptions)} == dataclasses.asdict(shared) | {
        "reach": shared.reach
    }
    assert wide.max_oracle_share == 0.25  # the owner's default
    trainer = TrainerSeroOptions(max_oracle_share=0.5)
    assert widen_options(trainer, TrainerSeroOptions, "x") is trainer
    with pytest.raises(TypeError, match=r"agent.sero_opts: got OracleSeroOptions.*pass envkit.trainers"):
        widen_options(OracleSeroOptions(weighting="choice"), TrainerSeroOptions, "agent.sero_opts")


def test_each_front_ends_config_widens_what_it_is_given():
    pytest.importorskip("tyro")
    from envkit.oracles.run_config import OracleSeroOptions, RunConfig
    from envkit.trainers.local.multi_turn import AgentConfig
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.sero_options import TrainerSeroOptions

    assert type(RunConfig(env_id="envkit/Toy-v0", sero=SeroOptions()).sero) is OracleSeroOptions
    assert type(AgentConfig(sero_opts=SeroOptions()).sero_opts) is TrainerSeroOptions
    assert type(BackendConfig(sero_opts=SeroOptions()).sero_opts) is TrainerSeroOptions
    with pytest.raises(TypeError, match="OracleSeroOptions"):
        BackendConfig(sero_opts=OracleSeroOptions())
