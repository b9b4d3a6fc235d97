"""argv splitting, envkit's forced/refused OpenRLHF flags, and the runpy wiring into OpenRLHF's real CLI."""

from __future__ import annotations

import json

import pytest

from envkit.trainers.openrlhf.argv import (
    ASYNC_REFUSAL,
    FORCED_ESTIMATOR,
    ArgvError,
    drop_flag,
    flag_value,
    openrlhf_argv,
    split_argv,
)

EXE = "/x/agent_executor.py"


def test_split_at_first_double_dash():
    assert split_argv(["--explorer", "eden", "--", "--a", "1", "--", "x"]) == (
        ["--explorer", "eden"],
        ["--a", "1", "--", "x"],
    )
    assert split_argv(["--explorer", "xrpo"]) == (["--explorer", "xrpo"], [])
    assert split_argv(["--", "--a"]) == ([], ["--a"])


def test_split_without_double_dash_at_first_dotted_flag():
    """A caller that consumed the '--' (click does): the first dotted OpenRLHF flag starts theirs."""
    argv = ["--adv.gamma", "0.9", "--env", "envkit/Toy-v0", "--rollout.batch_size=4", "--use_ms", "--x.y", "1"]
    assert split_argv(argv) == (argv[:4], argv[4:])


def test_envkit_train_cli_passes_openrlhf_flags(capsys):
    """Through the real `envkit-train` console entry (trainers/cli.py), which passes the '--' on unchanged."""
    from envkit.trainers.cli import main

    argv = ["openrlhf", "--advantage", "graphgpo", "--dry-run", "--", "--rollout.n_samples_per_prompt", "4"]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--actor.model_name_or_path", "m"])
    stdout = capsys.readouterr().out
    assert done.value.code == 0, stdout
    out = json.loads(stdout[stdout.index("{") :])
    assert out["envkit"]["advantage"] == "graphgpo"
    assert out["openrlhf"]["rollout"]["n_samples_per_prompt"] == 4


def test_flag_value_and_drop_both_spellings():
    flags = ["--rollout.n_samples_per_prompt", "8", "--x=3", "--flag", "--x", "4"]
    assert flag_value(flags, "--rollout.n_samples_per_prompt") == "8"
    assert flag_value(flags, "--x") == "4"  # the last one wins, as argparse does
    assert flag_value(flags, "--missing") is None
    assert drop_flag(flags, "--x") == ["--rollout.n_samples_per_prompt", "8", "--flag"]
    assert drop_flag(["--flag", "--y", "1"], "--flag") == ["--y", "1"]  # bare switch


def test_forced_estimator_and_executor_are_appended_once():
    out = openrlhf_argv(
        ["--rollout.n_samples_per_prompt", "8", "--algo.advantage.estimator=group_norm"],
        executor_path=EXE,
        explorer="none",
    )
    assert out == [
        "--rollout.n_samples_per_prompt",
        "8",
        "--algo.advantage.estimator",
        FORCED_ESTIMATOR,
        "--train.agent_func_path",
        EXE,
    ]


@pytest.mark.parametrize(
    ("flags", "explorer", "needle"),
    [
        (["--train.async_enable"], "none", "--train.async_enable is not supported"),
        (["--train.partial_rollout_enable"], "none", "--train.async_enable is not supported"),
        (["--algo.advantage.estimator", "rloo"], "none", "--advantage grpo|gigpo|graphgpo"),
        (["--train.agent_func_path", "my_agent.py"], "none", "--env ID"),
        (["--reward.remote_url", "http://rm"], "none", "env's own verifier"),
        (["--algo.dynamic_filtering_enable"], "xrpo", "variable number of rollouts"),
    ],
)
def test_refusals_say_what_to_do(flags, explorer, needle):
    with pytest.raises(ArgvError, match=needle.replace("|", r"\|").replace(".", r"\.")):
        openrlhf_argv(flags, executor_path=EXE, explorer=explorer)


def test_main_refuses_async_with_exit_code_2(capsys):
    from envkit.trainers.openrlhf.entry import main

    assert main(["--", "--rollout.n_samples_per_prompt", "4", "--train.async_enable"]) == 2
    assert ASYNC_REFUSAL in capsys.readouterr().err


def test_main_rejects_unknown_option_and_bad_overrides(capsys):
    from envkit.trainers.openrlhf.entry import main

    assert main(["--bogus"]) == 2
    assert "No such option" in capsys.readouterr().err
    assert main(["--adv.gama", "0.9", "--", "--rollout.n_samples_per_prompt", "4"]) == 2
    assert "did you mean --adv.gamma" in capsys.readouterr().err
    assert main(["--", "--rollout.n_samples_per_prompt", "1"]) == 2
    assert ">= 2 rollouts" in capsys.readouterr().err


def test_help_shows_this_backends_sero_knobs_and_refuses_the_oracle_pipelines(capsys):
    from envkit.trainers.openrlhf.entry import main

    assert main(["--help", "--", "--rollout.n_samples_per_prompt", "4"]) == 0
    text = capsys.readouterr().out
    for flag in ("--sero-opts.max-oracle-share", "--sero-opts.roots-per-group", "--sero-opts.min-budget"):
        assert flag in text, flag
    assert "--sero-opts.weighting" not in text  # l_j scoring by choice: envkit-oracle rollout only
    assert main(["--sero-opts.weighting", "choice", "--", "--rollout.n_samples_per_prompt", "4"]) == 2
    assert "No such option" in capsys.readouterr().err


def test_help_shows_only_the_eden_knobs_that_act_here_and_refuses_the_rest(capsys):
    """OpenRLHF is given its bank and runs its own update: EDEN's selection and update knobs do nothing here."""
    from envkit.trainers.openrlhf.entry import main

    budget = ["--", "--rollout.n_samples_per_prompt", "4"]
    assert main(["--help", *budget]) == 0
    text = capsys.readouterr().out
    for knob in ("n-noisy", "rho", "top-p", "gamma", "tau-r", "tau-n-start", "warmup-steps", "ablation"):
        assert f"--eden.{knob}" in text, knob
    for knob in ("n-anchors", "n-selection-prompts", "candidate-percentiles", "max-cos", "max-scored",
                 "min-validity", "eps-low", "eps-high", "kl-coef", "entropy-coef"):  # fmt: skip
        assert f"--eden.{knob}" not in text, knob
        assert main(["--explorer", "eden", "--eden-anchors", "1", f"--eden.{knob}", "1", *budget]) == 2
        assert "No such option" in capsys.readouterr().err
    from envkit.config_io import from_data  # a worker's config as data: the same knobs are refused there too
    from envkit.trainers.openrlhf.config import BackendConfig

    with pytest.raises(TypeError, match=r"BackendConfig.eden: EdenConfig has no field\(s\) \['max_cos'\]"):
        from_data(BackendConfig, {"eden": {"max_cos": 0.5}})


def test_dry_run_goes_through_openrlhfs_real_parser(capsys):
    """runpy runs openrlhf.cli.train_ppo_ray's __main__ block: its parser, hierarchize and checks."""
    from envkit.trainers.openrlhf.entry import EXECUTOR_PATH, main

    rc = main(
        [
            "--advantage",
            "gigpo",
            "--env",
            "envkit/Toy-v0",
            "--adv.gamma",
            "0.9",
            "--dry-run",
            "--",
            "--rollout.n_samples_per_prompt",
            "4",
            "--rollout.batch_size",
            "2",
            "--actor.model_name_or_path",
            "m",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    orl = out["openrlhf"]
    assert orl["algo"]["advantage"]["estimator"] == "group_norm"
    assert orl["train"]["agent_func_path"] == EXECUTOR_PATH
    assert orl["reward"]["remote_url"] == ["agent"]  # OpenRLHF's own rewrite when an agent file is given
    assert orl["critic"]["model_name_or_path"] is None  # group_norm needs no critic
    assert orl["rollout"]["n_samples_per_prompt"] == 4
    assert out["envkit"]["advantage"] == "gigpo" and out["envkit"]["adv"]["gamma"] == 0.9
    assert out["envkit"]["n_samples_per_prompt"] == 4 and out["envkit"]["rollout_batch_size"] == 2


def test_openrlhfs_own_checks_still_apply(resolve_flags):
    with pytest.raises(AssertionError, match="n_samples_per_prompt > 1"):
        resolve_flags(["--actor.model_name_or_path", "m"])


def test_install_puts_envkit_classes_where_train_looks_them_up():
    """train() imports PPOTrainer from openrlhf.trainer.ppo_trainer at call time and create_vllm_engines reads
    the RolloutRayActor global: after install() both are envkit's subclasses."""
    import inspect

    import openrlhf.cli.train_ppo_ray as cli
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray.vllm_engine as vllm_engine

    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.entry import install
    from envkit.trainers.openrlhf.rollout_actor import EnvkitRolloutActor
    from envkit.trainers.openrlhf.trainer_actor import EnvkitPPOTrainer

    src = inspect.getsource(cli.train)
    assert "from openrlhf.trainer.ppo_trainer import PPOTrainer" in src  # looked up at call time
    assert "RolloutRayActor" in inspect.getsource(vllm_engine.create_vllm_engines)
    old = ppo_trainer.PPOTrainer, vllm_engine.RolloutRayActor
    try:
        install(BackendConfig(n_samples_per_prompt=4))
        assert ppo_trainer.PPOTrainer.__ray_actor_class__ is EnvkitPPOTrainer
        assert vllm_engine.RolloutRayActor.__ray_actor_class__ is EnvkitRolloutActor
        assert issubclass(EnvkitPPOTrainer, old[0].__ray_actor_class__)
        assert issubclass(EnvkitRolloutActor, old[1].__ray_actor_class__)
    finally:
        ppo_trainer.PPOTrainer, vllm_engine.RolloutRayActor = old


def test_the_run_owns_the_group_size(capsys):
    """EDEN's and XRPO's group is n_samples_per_prompt: no --eden.group-size to disagree with, and settings that
    do not fit the run's n are refused with what to set."""
    from envkit.trainers.explorers.eden import EdenConfig
    from envkit.trainers.explorers.xrpo import XrpoConfig
    from envkit.trainers.openrlhf.config import BackendConfig
    from envkit.trainers.openrlhf.entry import main

    assert main(["--eden.group-size", "8", "--", "--rollout.n_samples_per_prompt", "4"]) == 2
    assert "No such option: --eden.group-size" in capsys.readouterr().err
    assert BackendConfig(explorer="xrpo", n_samples_per_prompt=6).xrpo_config() == XrpoConfig(n0=4)
    with pytest.raises(ValueError, match=r"n0 \(6\) must be <= the run's group size 4"):
        BackendConfig(explorer="xrpo", n_samples_per_prompt=4, xrpo=XrpoConfig(n0=6)).xrpo_config()
    with pytest.raises(ValueError, match=r"n_noisy \(4\) must be < the run's group size \(4\)"):
        BackendConfig(explorer="eden", n_samples_per_prompt=4, eden_anchors=(1,), eden=EdenConfig(n_noisy=4))
