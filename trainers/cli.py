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
import sys
from collections.abc import Sequence

import typer

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
    entry = importlib.import_module("trainers.openrlhf.entry")
    return int(entry.main(list(argv)) or 0)


def run_local(argv: Sequence[str]) -> None:
    """Parse `argv` into a `TrainConfig` (tyro) and train."""
    import tyro

    from trainers.local import TrainConfig, train

    cfg = tyro.cli(TrainConfig, args=list(argv), prog="envkit-train local", config=(tyro.conf.FlagConversionOff,))
    records = train(cfg)
    last = records[-1] if records else {}
    keys = ("step", "reward_mean", "success_rate", "zero_adv_fraction", "entropy")
    print({k: last[k] for k in keys if k in last})


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
