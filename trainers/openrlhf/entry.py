"""``envkit-train openrlhf``: OpenRLHF 0.11.2's ``train_ppo_ray`` with envkit's advantages and explorers.

Usage::

    envkit-train openrlhf [--explorer none|eden|xrpo] [--advantage grpo|gigpo|graphgpo] [--sero] [--env ID]
                          [--adv K=V ...] [--eden K=V ...] [--xrpo K=V ...] [--sero-opt K=V ...] [--dry-run]
                          -- <any openrlhf.cli.train_ppo_ray flag>

What `main` does:

1. splits argv at ``--`` (`trainers.openrlhf.argv`), parses ours into a `BackendConfig`;
2. rewrites OpenRLHF's flags: forces ``--algo.advantage.estimator group_norm`` and
   ``--train.agent_func_path <trainers/openrlhf/agent_executor.py>``, refuses ``--train.async_enable``;
3. starts Ray with the config in the runtime env (`CONFIG_ENV`), so every worker reads the same options;
4. installs two subclasses in the driver (the PPO-trainer actor and the vLLM rollout actor), then
5. runs ``openrlhf.cli.train_ppo_ray`` unchanged through `runpy` (its parser lives under ``__main__``).

``--dry-run`` runs OpenRLHF's own parser and argument checks, prints the resolved configuration as JSON and stops
before Ray starts (no GPU needed, but ``vllm`` must import).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import warnings
from collections.abc import Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer

from trainers.openrlhf.argv import ArgvError, int_flag, openrlhf_argv, split_argv
from trainers.openrlhf.config import (
    CONFIG_ENV,
    AdvantageOptions,
    BackendConfig,
    SeroOptions,
    field_names,
    parse_overrides,
)

#: The agent executor file OpenRLHF loads with ``--train.agent_func_path``.
EXECUTOR_PATH = str(Path(__file__).with_name("agent_executor.py").resolve())
OPENRLHF_MODULE = "openrlhf.cli.train_ppo_ray"


class Explorer(StrEnum):
    none = "none"
    eden = "eden"
    xrpo = "xrpo"


class Advantage(StrEnum):
    grpo = "grpo"
    gigpo = "gigpo"
    graphgpo = "graphgpo"


class _Stop(Exception):
    """Raised inside OpenRLHF's ``train`` by the dry-run hook, carrying the resolved args."""

    def __init__(self, args: Any) -> None:
        super().__init__("dry run")
        self.resolved = args


def _eden_anchor_ids(bank: Path | None, anchors: str | None) -> tuple[int, ...]:
    if bank is not None:
        from trainers.explorers.anchors import AnchorBank

        if not bank.exists():
            raise ValueError(f"--eden-bank {bank}: no such file (write one with AnchorBank.save)")
        return tuple(int(t) for t in AnchorBank.load(bank).token_ids)
    if anchors:
        try:
            return tuple(int(t) for t in anchors.split(","))
        except ValueError as exc:
            raise ValueError(f"--eden-anchors {anchors!r}: expected comma-separated token ids") from exc
    return ()


def build_config(
    *,
    explorer: str,
    advantage: str,
    sero: bool,
    env: str | None,
    env_kwargs: str,
    max_turns: int,
    feedback_template: str,
    seed: int,
    adv: list[str] | None,
    eden: list[str] | None,
    xrpo: list[str] | None,
    sero_opt: list[str] | None,
    eden_bank: Path | None,
    eden_anchors: str | None,
    openrlhf_flags: Sequence[str],
) -> BackendConfig:
    """`BackendConfig` from our options and the OpenRLHF flags that size the rollout budget."""
    try:
        kwargs = json.loads(env_kwargs)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-kwargs {env_kwargs!r}: expected a JSON object, e.g. '{{\"max_steps\": 30}}'") from exc
    eden_fields = xrpo_fields = None
    if eden:
        from trainers.explorers.eden import EdenConfig

        eden_fields = field_names(EdenConfig)
    if xrpo:
        from trainers.explorers.xrpo import XrpoConfig

        xrpo_fields = field_names(XrpoConfig)
    return BackendConfig(
        explorer=explorer,
        advantage=advantage,
        sero=sero,
        env_id=env,
        env_kwargs=kwargs,
        max_turns=max_turns,
        feedback_template=feedback_template,
        n_samples_per_prompt=int_flag(openrlhf_flags, "--rollout.n_samples_per_prompt", 1),
        rollout_batch_size=int_flag(openrlhf_flags, "--rollout.batch_size", 1024),
        seed=seed,
        adv=AdvantageOptions(**parse_overrides(adv, field_names(AdvantageOptions), "--adv")),
        sero_opts=SeroOptions(**parse_overrides(sero_opt, field_names(SeroOptions), "--sero-opt")),
        eden=parse_overrides(eden, eden_fields, "--eden"),
        xrpo=parse_overrides(xrpo, xrpo_fields, "--xrpo"),
        eden_anchors=_eden_anchor_ids(eden_bank, eden_anchors),
    )


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def resolve_openrlhf_args(flags: Sequence[str]) -> SimpleNamespace:
    """Run OpenRLHF's own ``train_ppo_ray`` parser and checks on ``flags``; stop before Ray starts.

    Returns:
        The hierarchical args namespace OpenRLHF's ``train(args)`` would get.

    Raises:
        SystemExit: OpenRLHF's parser rejected a flag (argparse prints why).
        AssertionError: one of OpenRLHF's own checks failed.
    """
    import openrlhf.utils
    import ray

    def stop(args: Any) -> Any:
        raise _Stop(args)

    with (
        _patched(openrlhf.utils, "get_strategy", stop),
        _patched(ray, "is_initialized", lambda: True),
        contextlib.redirect_stdout(sys.stderr),  # OpenRLHF prints its warnings to stdout; keep ours clean
    ):
        try:
            _run_module([*flags])
        except _Stop as stopped:
            return stopped.resolved  # type: ignore[no-any-return]
    raise RuntimeError(f"{OPENRLHF_MODULE} returned without calling train(args); is openrlhf 0.11.2 installed?")


def _run_module(flags: list[str]) -> None:
    old = sys.argv
    sys.argv = [OPENRLHF_MODULE, *flags]
    try:
        with warnings.catch_warnings():  # runpy warns when the module was imported before (harmless here)
            warnings.filterwarnings("ignore", message=".*found in sys.modules.*", category=RuntimeWarning)
            runpy.run_module(OPENRLHF_MODULE, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = old


def ray_runtime_env(config: BackendConfig) -> dict[str, Any]:
    """The runtime env of the job: OpenRLHF's own env-var defaults plus envkit's config."""
    return {
        "env_vars": {
            "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "true"),
            "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN"),
            "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": os.environ.get("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", "1"),
            CONFIG_ENV: config.to_json(),
        }
    }


def install(config: BackendConfig) -> None:
    """Put envkit's actor classes where OpenRLHF's ``train`` looks them up (driver process only)."""
    os.environ[CONFIG_ENV] = config.to_json()
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ray.vllm_engine as vllm_engine

    from trainers.openrlhf.rollout_actor import remote_rollout_actor
    from trainers.openrlhf.trainer_actor import remote_trainer

    ppo_trainer.PPOTrainer = remote_trainer()  # train() imports it from this module at call time
    vllm_engine.RolloutRayActor = remote_rollout_actor()  # create_vllm_engines() reads this global


def run(config: BackendConfig, flags: Sequence[str]) -> None:
    """Start Ray with the config, install the subclasses and run OpenRLHF's CLI module."""
    import ray

    if not ray.is_initialized():
        ray.init(runtime_env=ray_runtime_env(config))
    install(config)
    _run_module([*flags])


def _check_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            "vllm is not importable: the OpenRLHF backend needs a CUDA machine with "
            "'pip install openrlhf==0.11.2 vllm==0.29.0' (see docs/openrlhf.md); on a CPU use 'envkit-train local'"
        ) from exc


def _command(
    explorer: Annotated[Explorer, typer.Option(help="Exploration strategy.")] = Explorer.none,
    advantage: Annotated[
        Advantage, typer.Option(help="Advantage estimator (gigpo/graphgpo: multi-turn envs).")
    ] = Advantage.grpo,
    sero: Annotated[bool, typer.Option(help="Add SERO oracle continuations from restored states.")] = False,
    env: Annotated[str | None, typer.Option(help="Default envkit env id of a task (labels may name another).")] = None,
    env_kwargs: Annotated[str, typer.Option(help="JSON kwargs for gymnasium.make(env).")] = "{}",
    max_turns: Annotated[int, typer.Option(help="Policy turns per episode (0: the env's own limit).")] = 0,
    feedback_template: Annotated[str, typer.Option(help="How an observation follows an action.")] = "\n{obs}\n",
    seed: Annotated[int, typer.Option(help="Seed of EDEN's anchors/noise and XRPO's planner.")] = 0,
    adv: Annotated[list[str] | None, typer.Option(help="Advantage option KEY=VALUE (repeat).")] = None,
    eden: Annotated[list[str] | None, typer.Option(help="EdenConfig field KEY=VALUE (repeat).")] = None,
    xrpo: Annotated[list[str] | None, typer.Option(help="XrpoConfig field KEY=VALUE (repeat).")] = None,
    sero_opt: Annotated[list[str] | None, typer.Option(help="SeroOptions field KEY=VALUE (repeat).")] = None,
    eden_bank: Annotated[Path | None, typer.Option(help="EDEN AnchorBank .npz (AnchorBank.save).")] = None,
    eden_anchors: Annotated[str | None, typer.Option(help="EDEN anchor token ids, comma-separated.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Resolve OpenRLHF's args, print them as JSON, stop.")] = False,
) -> dict[str, Any]:
    """Train with OpenRLHF 0.11.2 (Ray + DeepSpeed + vLLM); OpenRLHF's own flags go after '--'."""
    return dict(locals())


def _parse_ours(ours: list[str]) -> dict[str, Any] | int:
    app = typer.Typer(add_completion=False)
    app.command(name="openrlhf")(_command)
    cmd = typer.main.get_command(app)
    try:
        rv = cmd.main(args=ours, prog_name="envkit-train openrlhf", standalone_mode=False)
    except typer.Exit as exc:  # --help
        return int(exc.exit_code)
    except Exception as exc:  # click's UsageError and friends
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        return 2
    if isinstance(rv, int):
        return rv
    return dict(rv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``envkit-train openrlhf``; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, theirs = split_argv(argv)
    parsed = _parse_ours(ours)
    if isinstance(parsed, int):
        return parsed
    dry_run = parsed.pop("dry_run")
    parsed["explorer"] = parsed["explorer"].value
    parsed["advantage"] = parsed["advantage"].value
    try:
        flags = openrlhf_argv(theirs, executor_path=EXECUTOR_PATH, explorer=parsed["explorer"])
        config = build_config(**parsed, openrlhf_flags=flags)
        _check_vllm()
    except (ArgvError, ValueError, RuntimeError) as exc:
        print(f"envkit-train openrlhf: error: {exc}", file=sys.stderr)
        return 2
    if dry_run:
        args = resolve_openrlhf_args(flags)
        print(json.dumps({"envkit": json.loads(config.to_json()), "openrlhf": _plain(args), "argv": flags}, indent=1))
        return 0
    run(config, flags)
    return 0


def _plain(ns: Any) -> Any:
    if isinstance(ns, SimpleNamespace):
        return {k: _plain(v) for k, v in vars(ns).items()}
    if isinstance(ns, (list, tuple)):
        return [_plain(v) for v in ns]
    if isinstance(ns, (str, int, float, bool)) or ns is None:
        return ns
    return repr(ns)


if __name__ == "__main__":
    raise SystemExit(main())
