"""One per-env resolver (`envkit.env_settings`) for envkit-train local, envkit-train openrlhf and envkit-oracle:
the same env gets the same horizon, root budget, gamma_g and terminal reward in all three, and each cross-field error
says what to set."""

from __future__ import annotations

import pytest

from envkit.credit.defaults import TERMINAL_REWARD
from envkit.env_settings import LOCAL_NAMES, OPENRLHF_NAMES, ORACLE_NAMES, EnvSettings, resolve_env_settings
from envkit.registration import ENVS

pytest.importorskip("tyro")


def _three(env_id: str, sero: bool) -> tuple[tuple, tuple, tuple]:
    """(horizon, root budget, gamma_g, terminal reward) as the local trainer, the OpenRLHF backend and the oracle pipeline resolve
    them for `env_id` with every per-env option unset."""
    from envkit.oracles.run_config import OracleSeroOptions, RunConfig
    from envkit.trainers.local.options import AgentConfig
    from envkit.trainers.openrlhf.config import BackendConfig

    local = AgentConfig(estimator="graphgpo", sero=sero).for_env(env_id)
    backend = BackendConfig(env_id=env_id, sero=sero, advantage="graphgpo")
    oracle = RunConfig(env_id=env_id, sero=OracleSeroOptions(roots_per_group=2 if sero else 0))
    return (
        (local.max_turns, local.sero_opts.min_budget, local.adv.gamma_g, local.adv.terminal_reward),
        (
            backend.turn_cap,
            backend.sero_config.root_budget,
            backend.credit_options.gamma_g,
            backend.credit_options.terminal_reward,
        ),
        (
            oracle.horizon,
            oracle.sero_config.root_budget,
            oracle.sero_config.gamma_g,
            oracle.sero_config.terminal_reward,
        ),
    )


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_every_registered_env_resolves_to_the_same_values_in_both_trainers_and_the_oracle_pipeline(env_id):
    e = ENVS[env_id]
    local, backend, oracle = _three(env_id, sero=True)
    assert local == backend == oracle == (e.horizon, e.min_root_budget, e.gamma_g, TERMINAL_REWARD)
    # without SERO gamma_g and the root budget stay the env's; the turn cap is each trainer's own (local 8,
    # OpenRLHF none: the env's step limit; the oracle pipeline's episodes run to the env's horizon)
    local, backend, oracle = _three(env_id, sero=False)
    assert local[1:] == backend[1:] == oracle[1:] == (e.min_root_budget, e.gamma_g, TERMINAL_REWARD)
    assert (local[0], backend[0], oracle[0]) == (8, None, e.horizon)


def test_webshop_gamma_g_is_0_20_on_openrlhf_too_and_what_a_user_sets_stays():
    from envkit.trainers.openrlhf.config import BackendConfig

    # before the one resolver OpenRLHF fell back to GAMMA_G 0.10 for WebShop (METHODS 3: 0.20)
    assert BackendConfig(env_id="envkit/WebShop-v0", advantage="graphgpo").credit_options.gamma_g == 0.20
    assert BackendConfig(env_id="envkit/ALFWorld-v0", advantage="graphgpo").credit_options.gamma_g == 0.10
    mine = BackendConfig(env_id="envkit/WebShop-v0", advantage="graphgpo", max_turns=9)
    assert (mine.turn_cap, mine.adv.gamma_g, mine.max_turns) == (9, None, 9)  # the options stay as given
    assert BackendConfig.from_json(mine.to_json()).settings == mine.settings  # a worker resolves the same
    assert resolve_env_settings(
        "envkit/WebShop-v0", names=LOCAL_NAMES, horizon=9, root_budget=3, gamma_g=0.5, sero=True
    ) == EnvSettings("envkit/WebShop-v0", 9, 3, 0.5)


def test_the_terminal_reward_is_one_rule_in_both_trainers():
    """Unset, both trainers credit 10 x success (before, OpenRLHF fell back to its scalar reward); set, it stays."""
    from envkit.trainers.local.options import AgentConfig
    from envkit.trainers.openrlhf.config import AdvantageOptions, BackendConfig

    unset = BackendConfig(env_id="envkit/Toy-v0", advantage="gigpo")
    assert unset.adv.terminal_reward is None and unset.credit_options.terminal_reward == TERMINAL_REWARD == 10.0
    assert AgentConfig().for_env("envkit/Toy-v0").adv.terminal_reward == TERMINAL_REWARD
    mine = BackendConfig(env_id="envkit/Toy-v0", adv=AdvantageOptions(terminal_reward=1.0))
    assert mine.credit_options.terminal_reward == mine.settings.terminal_reward == 1.0
    with pytest.raises(ValueError, match=r"--adv.terminal-reward nan: must be finite \(or unset: 10.0\)"):
        BackendConfig(adv=AdvantageOptions(terminal_reward=float("nan")))


def test_the_resolved_settings_are_kept_not_derived_again_on_read():
    from envkit.oracles.run_config import RunConfig
    from envkit.trainers.openrlhf.config import BackendConfig

    run = RunConfig(env_id="envkit/Toy-v0")
    assert run.sero_config is run.sero_config and run.settings is run.settings
    cfg = BackendConfig(explorer="xrpo", n_samples_per_prompt=6)
    assert cfg.xrpo_config() is cfg.xrpo_config()
    branch = BackendConfig(explorer="branch", advantage="graphgpo", max_turns=4, n_samples_per_prompt=4)
    assert branch.branch_config() is branch.branch_config() and branch.credit_options is branch.credit_options


def test_sero_without_graphgpo_is_refused_with_what_to_set():
    from envkit.trainers.local.options import AgentConfig
    from envkit.trainers.openrlhf.config import BackendConfig

    with pytest.raises(
        ValueError, match=r"GraphGPO graph.*set agent.estimator='graphgpo' \(got 'gigpo'\) or agent.sero=False"
    ):
        AgentConfig(sero=True, estimator="gigpo")
    with pytest.raises(ValueError, match=r"GraphGPO graph.*set --advantage graphgpo \(got 'grpo'\) or drop --sero"):
        BackendConfig(env_id="envkit/Toy-v0", sero=True, advantage="grpo")


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (LOCAL_NAMES, r"agent.max_turns 6 leaves no SERO root.*Set agent.max_turns to at least 8 \(the env's horizon is 15: leave agent.max_turns unset"),
        (OPENRLHF_NAMES, r"--max-turns 6 leaves no SERO root.*Set --max-turns to at least 8 \(the env's horizon is 15: pass --max-turns 0"),
        (ORACLE_NAMES, r"--max-steps 6 leaves no SERO root.*Set --max-steps to at least 8 .*or lower --sero.min-budget"),
    ],
)  # fmt: skip
def test_a_turn_cap_below_the_root_budget_is_refused_in_each_front_ends_words(names, message):
    with pytest.raises(ValueError, match=r"SERO roots need 8 steps of budget left \(envkit/WebShop-v0's EnvEntry"):
        resolve_env_settings("envkit/WebShop-v0", names=names, horizon=6, sero=True)
    with pytest.raises(ValueError, match=message):
        resolve_env_settings("envkit/WebShop-v0", names=names, horizon=6, sero=True)
    with pytest.raises(ValueError, match=rf"SERO roots need 9 steps of budget left \({names.root_budget}\)"):
        resolve_env_settings("envkit/WebShop-v0", names=names, horizon=8, root_budget=9, sero=True)
    assert resolve_env_settings("envkit/WebShop-v0", names=names, horizon=6).horizon == 6  # SERO off: no check


def test_each_front_end_raises_the_turn_cap_error():
    from envkit.oracles.run_config import RunConfig
    from envkit.trainers.local.config import TrainConfig
    from envkit.trainers.local.options import AgentConfig
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.sero_options import TrainerSeroOptions

    with pytest.raises(ValueError, match=r"agent\.max_turns 6 leaves no SERO root"):
        TrainConfig(task="envkit/WebShop-v0", agent=AgentConfig(estimator="graphgpo", sero=True, max_turns=6))
    with pytest.raises(ValueError, match="--max-turns 6 leaves no SERO root"):
        BackendConfig(env_id="envkit/WebShop-v0", sero=True, advantage="graphgpo", max_turns=6)
    with pytest.raises(ValueError, match="--max-steps 6 leaves no SERO root"):
        RunConfig(env_id="envkit/WebShop-v0", max_steps=6)
    with pytest.raises(ValueError, match=r"SERO roots need 31 steps.*--sero-opts.min-budget\).*horizon is 30"):
        BackendConfig(sero=True, advantage="graphgpo", sero_opts=TrainerSeroOptions(min_budget=31))  # no --env


def test_values_out_of_range_are_refused_with_the_option_to_set():
    with pytest.raises(ValueError, match=r"--max-steps 0: must be >= 1 \(or unset: the env's horizon 20\)"):
        resolve_env_settings("envkit/Toy-v0", names=ORACLE_NAMES, horizon=0)
    with pytest.raises(ValueError, match=r"--sero.min-budget 0: must be >= 1"):
        resolve_env_settings("envkit/Toy-v0", names=ORACLE_NAMES, root_budget=0)
    with pytest.raises(ValueError, match=r"--gamma-g 1.5: must be in \(0, 1\] \(or unset: the env's 0.1\)"):
        resolve_env_settings("envkit/Toy-v0", names=ORACLE_NAMES, gamma_g=1.5)
