"""``envkit-train openrlhf``: OpenRLHF 0.11.2's ``train_ppo_ray`` with envkit's advantages and explorers.

Usage (``envkit-train openrlhf --help`` lists every option with its default)::

    envkit-train openrlhf [--explorer none|eden|xrpo|branch] [--advantage grpo|gigpo|graphgpo] [--sero] [--env ID]
                          [--adv.FIELD V ...] [--eden.FIELD V ...] [--xrpo.FIELD V ...] [--branch.FIELD V ...]
                          [--sero-opts.FIELD V ...]
                          [--dry-run] -- <any openrlhf.cli.train_ppo_ray flag>

What `main` does:

1. splits argv at ``--`` (`envkit.trainers.openrlhf.argv`), parses ours into a `BackendConfig` with tyro (the nested
   `AdvantageOptions`, `SeroOptions`, `EdenConfig`, `XrpoConfig` and `BranchConfig` as dotted options; EDEN's,
   XRPO's and branching's defaults shown sized to the run's ``--rollout.n_samples_per_prompt``);
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
import dataclasses
import json
import os
import runpy
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import tyro

from envkit.fleet.config import FleetConfig
from envkit.runtime.command_line import cli, fail
from envkit.trainers.openrlhf.argv import ArgvError, int_flag, openrlhf_argv, split_argv
from envkit.trainers.openrlhf.config import CONFIG_ENV, EXPLORER_SECTIONS, BackendConfig
from envkit.trainers.openrlhf.explorers.registry import explorer_class

#: The agent executor file OpenRLHF loads with ``--train.agent_func_path``.
EXECUTOR_PATH = str(Path(__file__).with_name("agent_executor.py").resolve())
OPENRLHF_MODULE = "openrlhf.cli.train_ppo_ray"


class _Stop(Exception):
    """Raised inside OpenRLHF's ``train`` by the dry-run hook, carrying the resolved args."""

    def __init__(self, args: Any) -> None:
        super().__init__("dry run")
        self.resolved = args


@dataclass(frozen=True)
class OpenRLHFCommand:
    """Train with OpenRLHF 0.11.2 (Ray + DeepSpeed + vLLM) with envkit's envs, advantages and explorers;
    OpenRLHF's own flags go after '--'.

    Attributes:
        backend: envkit's options (`BackendConfig`).
        dry_run: Resolve OpenRLHF's args, print them as JSON and stop (no GPU, no Ray).
    """

    backend: Annotated[BackendConfig, tyro.conf.arg(name="")]
    dry_run: bool = False


def build_config(ours: Sequence[str], openrlhf_flags: Sequence[str]) -> OpenRLHFCommand:
    """Our options (tyro) on top of the defaults that OpenRLHF's flags fix (the rollout budget).

    EDEN's and XRPO's configs default to their documented values sized to the run; an explorer config left at
    those defaults is stored as None (sized again wherever it is read), one that was changed for an explorer
    that is not chosen is refused. Every error exits 2 with one ``error:`` line.
    """
    prog = "envkit-train openrlhf"
    try:
        n = int_flag(openrlhf_flags, "--rollout.n_samples_per_prompt", 1)
        batch = int_flag(openrlhf_flags, "--rollout.batch_size", 1024)
    except ArgvError as exc:
        fail(str(exc), prog=prog)
    # our options are parsed first (an unknown one is reported before a bad budget), on a valid budget
    base = BackendConfig(n_samples_per_prompt=max(n, 2), rollout_batch_size=max(batch, 1))
    eden, xrpo, branch = base.sized_eden(), base.sized_xrpo(), base.sized_branch()
    default = OpenRLHFCommand(
        backend=dataclasses.replace(base, eden=eden, xrpo=xrpo, branch=branch, fleet=FleetConfig())
    )
    cmd = cli(
        OpenRLHFCommand, args=ours, prog=prog, default=default, config=(tyro.conf.AvoidSubcommands,),
        error_prefix=prog,
    )  # fmt: skip
    cfg = cmd.backend
    try:
        if (n, batch) != (base.n_samples_per_prompt, base.rollout_batch_size):
            cfg = dataclasses.replace(cfg, n_samples_per_prompt=n, rollout_batch_size=batch)
    except ValueError as exc:
        fail(str(exc), prog=prog)
    if not any(a.startswith("--fleet.") for a in ours):  # envs in the rollout actors unless a --fleet.* is given
        cfg = dataclasses.replace(cfg, fleet=None)
    if cfg.eden == eden:
        cfg = dataclasses.replace(cfg, eden=None)
    if cfg.xrpo == xrpo:
        cfg = dataclasses.replace(cfg, xrpo=None)
    if cfg.branch == branch:
        cfg = dataclasses.replace(cfg, branch=None)
    try:
        section = explorer_class(cfg.explorer).section
    except ValueError as exc:
        fail(str(exc), prog=prog)
    for name in EXPLORER_SECTIONS:
        if getattr(cfg, name) is not None and name != section:
            fail(f"--{name}.* options were given but --explorer is not '{name}'", prog=prog)
    return dataclasses.replace(cmd, backend=cfg)


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

    from envkit.trainers.openrlhf.rollout_actor import remote_rollout_actor
    from envkit.trainers.openrlhf.trainer_actor import remote_trainer

    ppo_trainer.PPOTrainer = remote_trainer()  # train() imports it from this module at call time
    vllm_engine.RolloutRayActor = remote_rollout_actor()  # create_vllm_engines() reads this global


def run(config: BackendConfig, flags: Sequence[str]) -> None:
    """Start Ray with the config, install the subclasses and run OpenRLHF's CLI module."""
    import ray

    started = False
    if config.cpu:
        from envkit.trainers.openrlhf import cpu_shim

        cpu_shim.activate()
    if not ray.is_initialized():
        if config.cpu:
            kwargs = cpu_shim.ray_init_kwargs(ray_runtime_env(config))
            print(f"envkit-train openrlhf --cpu: private Ray in {kwargs['_temp_dir']}", file=sys.stderr, flush=True)
            cpu_shim.start_ray(kwargs)
        else:
            ray.init(runtime_env=ray_runtime_env(config))
        started = True
    install(config)
    try:
        _run_module([*flags])
    finally:
        if started and config.cpu:
            ray.shutdown()


def _check_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            "vllm is not importable: the OpenRLHF backend needs a CUDA machine with "
            "'pip install openrlhf==0.11.2 vllm==0.29.0' (see docs/openrlhf.md); on a CPU use 'envkit-train local'"
        ) from exc


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``envkit-train openrlhf``; returns the process exit code (2 with one ``error:`` line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, theirs = split_argv(argv)
    prog = "envkit-train openrlhf"
    try:
        cmd = build_config(ours, theirs)
        try:
            flags = openrlhf_argv(theirs, executor_path=EXECUTOR_PATH, explorer=cmd.backend.explorer)
            if cmd.backend.cpu:
                from envkit.trainers.openrlhf.cpu_shim import cpu_flags

                flags = cpu_flags(flags)
            _check_vllm()
        except (ArgvError, RuntimeError) as exc:
            fail(str(exc), prog=prog)
    except SystemExit as exc:  # --help (0) or an error already printed (2)
        return int(exc.code or 0)
    if cmd.backend.cpu:
        from envkit.trainers.openrlhf import cpu_shim

        cpu_shim.activate()  # before openrlhf is imported (flash_attn stub), also for --dry-run
    if cmd.dry_run:
        args = resolve_openrlhf_args(flags)
        out = {"envkit": json.loads(cmd.backend.to_json()), "envkit_env_settings": dataclasses.asdict(cmd.backend.settings),
               "openrlhf": _plain(args), "argv": flags}  # fmt: skip
        print(json.dumps(out, indent=1))
        return 0
    run(cmd.backend, flags)
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
