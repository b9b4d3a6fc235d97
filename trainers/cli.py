"""``envkit-train``: training entry points.

    envkit-train local --help        the single-process transformers trainer (`trainers.local`); every option of
                                     `trainers.local.TrainConfig` with its default
    envkit-train openrlhf ...        the OpenRLHF backend (`trainers.openrlhf.entry:main`, imported lazily; the
                                     arguments pass through unchanged)

Options of ``local`` are built by tyro from the config dataclasses: nested settings are dotted
(``--model.path smollm2``, ``--loss.kl-coef 0.01``, ``--eden.rho 0.18``, ``--xrpo.n0 4``).
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import typer

from envkit.errors import require

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="envkit trainers: `local` (single process, transformers) and `openrlhf` (distributed backend).",
)
_PASS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


@app.command("local", context_settings=_PASS, add_help_option=False)
def local(ctx: typer.Context) -> None:
    """Single-process RL trainer on transformers (CPU or one GPU); `envkit-train local --help` lists every option."""
    run_local(list(ctx.args))


@app.command("openrlhf", context_settings=_PASS, add_help_option=False)
def openrlhf(ctx: typer.Context) -> None:
    """OpenRLHF backend (trainers.openrlhf.entry); arguments are passed through unchanged."""
    raise typer.Exit(run_openrlhf(list(ctx.args)))


def run_openrlhf(argv: Sequence[str]) -> int:
    """Import `trainers.openrlhf.entry` lazily and run its ``main`` on the raw arguments."""
    try:
        entry = importlib.import_module("trainers.openrlhf.entry")
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
        from trainers.local import TrainConfig
    except ImportError as exc:  # MissingExtraError, or torch & co. missing under trainers.local
        _fail(f"{exc}. The local trainer needs the `train` extra: pip install -e '.[train]'")
    try:
        cfg = tyro.cli(TrainConfig, args=list(argv), prog="envkit-train local", config=(tyro.conf.FlagConversionOff,))
    except ValueError as exc:  # TrainConfig / ModelConfig checks
        _fail(str(exc))
    from trainers.preflight import problems

    found = problems(cfg.task, cfg.model.path)
    if found:
        _fail(*found)
    run_dir = Path(cfg.run_dir)
    existed = run_dir.exists()
    try:
        from trainers.local import LocalTrainer

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
    """Console-script entry point. Subcommands get their arguments raw (``--`` included), not through click."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "openrlhf":
        sys.exit(run_openrlhf(args[1:]))
    if args and args[0] == "local":
        run_local(args[1:])
        return
    app(args=args, prog_name="envkit-train")


if __name__ == "__main__":
    main()
