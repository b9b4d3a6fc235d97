"""``envkit-train``: training entry points.

    envkit-train local --help        the single-process transformers trainer (`envkit.trainers.local.trainer`); every option of
                                     `envkit.trainers.local.config.TrainConfig` with its default
    envkit-train openrlhf --help     the OpenRLHF backend (`envkit.trainers.openrlhf.entry:main`, imported lazily):
                                     envkit's options, then ``--`` and OpenRLHF's own flags

Options of both are built by tyro from the config dataclasses: nested settings are dotted
(``--model.path smollm2``, ``--loss.kl-coef 0.01``, ``--eden.rho 0.18``, ``--xrpo.n0 4``).
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from envkit.errors import require

USAGE = """usage: envkit-train {local,openrlhf} [OPTIONS]

envkit trainers:
  local      single-process RL trainer on transformers (CPU or one GPU); `envkit-train local --help` lists
             every option with its default
  openrlhf   the OpenRLHF backend (Ray + DeepSpeed + vLLM): envkit's options, then `--` and OpenRLHF's flags;
             `envkit-train openrlhf --help` lists envkit's options
"""


def run_openrlhf(argv: Sequence[str]) -> int:
    """Import `envkit.trainers.openrlhf.entry` lazily and run its ``main`` on the raw arguments."""
    try:
        entry = importlib.import_module("envkit.trainers.openrlhf.entry")
    except ImportError as exc:
        _fail(
            f"envkit-train openrlhf cannot import its backend ({exc}): on a GPU machine "
            "pip install -c constraints.txt -e '.[openrlhf]' (docs/openrlhf.md)"
        )
    return int(entry.main(list(argv)) or 0)


def run_local(argv: Sequence[str]) -> None:
    """Parse `argv` into a `TrainConfig` (tyro), check it, and train.

    Every failure a user can fix (a typo'd ``--task``, an env that cannot start here, missing weights or
    extras, a bad option value) ends in ``error:`` lines with the fix and exit code 2, never a traceback; the
    run folder is created only once the checks pass, and removed again if building the trainer fails.
    """
    from envkit.errors import EnvkitError

    try:
        tyro = require("tyro", "train", what="envkit-train local")
        # the config alone (no torch): --help and option errors come back in about a second
        from envkit.trainers.local.config import TrainConfig
    except ImportError as exc:  # MissingExtraError
        _fail(f"{exc}. The local trainer needs the `train` extra: pip install -e '.[train]'")
    from envkit.runtime.command_line import cli

    cfg = cli(TrainConfig, args=list(argv), prog="envkit-train local", config=(tyro.conf.FlagConversionOff,))
    from envkit.trainers.local.preflight import problems

    found = problems(cfg.task, cfg.model.path)
    if found:
        _fail(*found)
    from envkit.trainers.local.run_dir import RunDirError, check_run_dir

    try:
        check_run_dir(cfg)
    except RunDirError as exc:
        _fail(str(exc))
    run_dir = Path(cfg.run_dir)
    existed = run_dir.exists()
    try:
        try:
            from envkit.trainers.local.trainer import LocalTrainer
        except ImportError as exc:  # torch & co. missing
            _fail(f"{exc}. The local trainer needs the `train` extra: pip install -e '.[train]'")
        trainer = LocalTrainer(cfg)
    except (EnvkitError, ValueError, FileNotFoundError) as exc:
        if not existed:
            shutil.rmtree(run_dir, ignore_errors=True)
        _fail(str(exc))
    try:
        records = trainer.train()
    except EnvkitError as exc:
        _fail(f"{exc} (run folder: {run_dir})")
    last = records[-1] if records else {}
    keys = ("step", "reward_mean", "success_rate", "zero_adv_fraction", "entropy")
    print({k: last[k] for k in keys if k in last})
    print(f"run folder: {run_dir} (metrics.jsonl, checkpoints/, curves.png)")


def _fail(*lines: str) -> NoReturn:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point. Subcommands get their arguments raw (``--`` included)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "openrlhf":
        sys.exit(run_openrlhf(args[1:]))
    if args and args[0] == "local":
        run_local(args[1:])
        return
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        raise SystemExit(0 if args else 2)
    _fail(f"unknown command {args[0]!r}: choose `envkit-train local ...` or `envkit-train openrlhf ...` (--help)")


if __name__ == "__main__":
    main()
