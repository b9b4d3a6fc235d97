"""``envkit-oracle``: SERO oracle rollouts from the command line.

Commands:
    ``envkit-oracle rollout``   G policy rollouts per task, SERO roots, oracle continuations, one record per step
                                (defaults: WebShop with its embedded catalog, random policy, 32 tasks x 8 rollouts)
    ``envkit-oracle inspect FILE``   print a run's summary (works on a killed run's journal too)
    ``envkit-oracle export FILE``    write a `datasets`-loadable SFT or RL dataset from a run
    ``envkit-oracle envs``      list the registered env ids, their extra, and whether each can start here

Every option is documented in ``--help`` with its default.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import tyro
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envkit.errors import EnvkitError
from envkit.oracles.pipeline import RunConfig, summarize, summary_path
from envkit.runtime.command_line import cli, parse_kwargs

__all__ = ["Envs", "Export", "Inspect", "main", "parse_kwargs", "print_summary"]

PROG = "envkit-oracle"


#: Width of tables written to a pipe or a log file (no terminal, no COLUMNS): wide enough that no cell is cut.
PIPED_WIDTH = 1000


#: Below this many columns `envkit-oracle envs` prints two columns (id, details) instead of nine.
WIDE_TABLE = 150


def _console(stderr: bool = False) -> Console:
    """A rich console made now (it reads COLUMNS / NO_COLOR of the moment, so callers and tests can set them).

    On a terminal tables fit its width; written to a pipe or a file (``envkit-oracle envs | less``, a CI log) rich
    would assume 80 columns and cut every cell (``envki…``), so there the width is `PIPED_WIDTH` unless COLUMNS
    says otherwise: each row is one full line.
    """
    stream = sys.stderr if stderr else sys.stdout
    if os.environ.get("COLUMNS") or (hasattr(stream, "isatty") and stream.isatty()):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPED_WIDTH)


def _fail(msg: str, code: int = 2) -> NoReturn:
    if "Traceback (most recent call last)" in msg:  # an error raised in a pool worker: keep its first and last line
        lines = [x for x in msg.strip().splitlines() if x.strip()]
        msg = f"{lines[0]} {lines[-1].strip()}"
    _console(stderr=True).print(f"[bold red]error:[/] {escape(msg)}", soft_wrap=True)
    raise SystemExit(code)


def _check_env(env_id: str) -> None:
    """Unknown id -> suggestion; missing extra / missing env package -> the pip command."""
    from envkit.errors import MissingExtraError
    from envkit.registration import ENVS, register_envs, suggest

    register_envs()
    import gymnasium as gym

    if env_id not in gym.registry:
        hint = suggest(env_id)
        _fail(
            f"unknown environment id {env_id!r}."
            + (f" Did you mean {hint!r}?" if hint else "")
            + f" Known: {', '.join(sorted(ENVS))} (see `envkit-oracle envs`)"
        )
    entry = ENVS.get(env_id)
    module = str(gym.registry[env_id].entry_point).partition(":")[0]
    try:
        importlib.import_module(module)
    except MissingExtraError as exc:
        _fail(str(exc))
    except ImportError as exc:
        extra = entry.extra if entry else None
        fix = f"pip install -e '.[{extra}]'" if extra else "pip install -e ."
        _fail(f"{env_id} cannot be imported ({exc}); install its extra: {fix}")


def _check_out(out: str) -> None:
    p = Path(out)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        probe = p.with_name(f".{p.name}.probe-{os.getpid()}")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        _fail(f"cannot write the output {out!r} ({exc.strerror or exc}); choose a writable --out")


@dataclass(frozen=True)
class Inspect:
    """Print the summary of a run (recomputed from the journal when the run was killed before finishing).

    Attributes:
        file: A run's output (.parquet/.jsonl), its .summary.json or its journal.
        json: Print the summary as JSON.
    """

    file: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="FILE")]
    json: bool = False


@dataclass(frozen=True)
class Export:
    """Write a datasets-loadable SFT or RL dataset (load it with datasets.load_dataset('json', data_files=...)).

    Attributes:
        file: A run's output (.parquet or .jsonl).
        out: Dataset file, .jsonl or .parquet (None: <file>.<format>.jsonl).
        format: sft (successful episodes as chat messages + weights) | rl (every step with prompt, completion,
            advantage, weight).
    """

    file: Annotated[Path, tyro.conf.Positional, tyro.conf.arg(metavar="FILE")]
    out: Path | None = None
    format: Literal["sft", "rl"] = "sft"


@dataclass(frozen=True)
class Envs:
    """List the registered env ids, the extra each needs, whether it can start here (and if not, the fix), and
    their per-env facts (horizon, a SERO root's minimum budget, GraphGPO's gamma_g).

    "usable" checks what the env needs to start: its extra's Python packages, the programs it runs (Chromium,
    bubblewrap), root for sandboxes, its data directory, and that its module imports.
    """


def rollout(cfg: RunConfig) -> None:
    """Run G policy rollouts per task, select SERO roots, restore them and continue with the oracle.

    Resumable: run the same command again after a kill; finished tasks are skipped and none is duplicated.
    """
    from envkit.oracles.pipeline import run

    _check_env(cfg.env_id)
    _check_out(cfg.out)
    try:
        summary = run(cfg)
    except EnvkitError as exc:
        _fail(str(exc))
    print_summary(summary, title=f"SERO run -> {cfg.out}")
    journal = Path(cfg.out).with_name(Path(cfg.out).name + ".journal.jsonl")
    if journal.exists():
        size = journal.stat().st_size / 1e6
        print(  # plain print: a path must not be wrapped
            f"journal: {journal} ({size:.1f} MB, uncompressed JSON of every record): the resumable copy that "
            "re-running the command resumes or extends (--tasks); delete it once the run is final"
        )


def print_summary(summary: dict[str, Any], title: str = "SERO run") -> None:
    """Print a summary as rich tables."""
    tot, ses = summary.get("totals", {}), summary.get("session", {})
    st = summary.get("settings") or {}
    if st:
        keys = ("env_id", "policy", "group", "roots", "horizon", "min_budget", "scorer", "weighting", "seed")
        _console().print(escape("settings: " + ", ".join(f"{k}={st[k]}" for k in keys if k in st)))
    table = Table(title=title, show_header=True)
    table.add_column("counter")
    table.add_column("value", justify="right")
    order = [
        "tasks",
        "trajectories",
        "policy_successes",
        "success_rate_before",
        "success_rate_after",
        "group_success_before",
        "group_success_after",
        "zero_adv_before",
        "zero_adv_after",
        "roots_tried",
        "dead_roots_skipped",
        "restored_native",
        "restored_replay",
        "replay_diverged",
        "restore_failed",
        "continued_to_success",
        "rescued_trajectories",
        "oracle_steps",
        "oracle_rows",
        "mean_reach_weight",
        "choice_fallbacks",
        "failed_to_run",
    ]
    for k in order:
        if k in tot:
            v = tot[k]
            table.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
    _console().print(table)
    if tot.get("stop_reasons"):  # one line per reason, whole (reasons contain colons and commas)
        _console().print("oracle stop reasons:")
        for k, v in tot["stop_reasons"].items():
            _console().print(escape(f"  {v} x {k}"), soft_wrap=True)
    if ses:
        t2 = Table(title="this session", show_header=True)
        t2.add_column("measure")
        t2.add_column("value", justify="right")
        for k in (
            "tasks_run",
            "wall_s",
            "rollout_s",
            "continue_s",
            "scoring_s",
            "credit_s",
            "io_s",
            "policy_steps_per_s",
            "continuations",
            "continuations_per_min",
            "snapshots_released",
            "rows",
            "workers",
            "backend",
        ):
            if k in ses and ses[k] is not None:
                v = ses[k]
                t2.add_row(k, f"{v:.2f}" if isinstance(v, float) else str(v))
        _console().print(t2)


def inspect(cmd: Inspect) -> None:
    """Print the summary of a run (see `Inspect`)."""
    file = cmd.file
    from envkit.io import RecordStore

    name = file.name
    for suffix in (".summary.json", ".journal.jsonl"):
        if name.endswith(suffix):
            file = file.with_name(name[: -len(suffix)])
    summ = summary_path(file)
    journal = file.with_name(file.name + ".journal.jsonl")
    if summ.exists() and (not journal.exists() or summ.stat().st_mtime >= journal.stat().st_mtime):
        summary = json.loads(summ.read_text())
    elif journal.exists():
        store = RecordStore(file)
        summary = summarize([r["__stats__"] for r in store.records() if "__stats__" in r])
        summary["settings"] = store.meta
    else:
        _fail(f"no run at {file}: expected {summ} or {journal}")
    if cmd.json:
        _console().print_json(json.dumps(summary, default=str))
    else:
        print_summary(summary, title=f"SERO run {file}")


def export(cmd: Export) -> None:
    """Write a dataset from a run (see `Export`)."""
    file, out, format = cmd.file, cmd.out, cmd.format
    from envkit.io import RecordStore
    from envkit.oracles.export import export as do_export

    if not file.exists():
        journal = file.with_name(file.name + ".journal.jsonl")
        if journal.exists():  # a run that was interrupted (or is still going): its records are in the journal
            done = len(RecordStore(file).done)
            _fail(
                f"{file} is not written yet: its run stopped before the end ({done} tasks are in its journal "
                f"{journal}). Finish it by running the same `envkit-oracle rollout ... --out {file}` again (it "
                f"resumes from the journal), then export; `envkit-oracle inspect {file}` shows what it holds so far"
            )
        _fail(f"{file} does not exist: pass the output of `envkit-oracle rollout`")
    target = out or file.with_name(f"{file.stem}.{format}.jsonl")
    try:
        path, n = do_export(file, target, format)
    except EnvkitError as exc:
        _fail(str(exc))
    _console().print(f"wrote {n} {format} rows to {path}")


def envs(cmd: Envs) -> None:
    """Print the env table (see `Envs`)."""
    from envkit.errors import EnvkitError
    from envkit.registration import ENVS, missing

    console = _console()
    wide = console.width >= WIDE_TABLE
    table = Table(title="envkit environments")
    # never cut an id: its column is as wide as the longest id and does not wrap; on a narrow terminal (80 columns)
    # the other facts go into one wrapped column instead of nine cut ones
    table.add_column("id", no_wrap=True, min_width=max(len(e.id) for e in ENVS.values()))
    for col in (
        ("extra", "usable", "data", "oracle", "horizon", "min root budget", "gamma_g", "description")
        if wide
        else ("details",)
    ):
        table.add_column(col, overflow="fold")
    for e in ENVS.values():
        why = missing(e)
        if not why:
            try:
                importlib.import_module(e.entry_point.partition(":")[0])
            except (ImportError, EnvkitError) as exc:
                why.append(f"import failed ({type(exc).__name__}: {exc})")
        ok = "yes" if not why else "no: " + "; ".join(why)
        data = (
            "-" if not e.needs_data else f"${e.needs_data}" + (" (set)" if os.environ.get(e.needs_data) else " (unset)")
        )
        if wide:
            table.add_row(
                e.id, e.extra or "-", escape(ok), data, e.oracle or "-", str(e.horizon), str(e.min_root_budget),
                str(e.gamma_g), e.description,
            )  # fmt: skip
        else:
            table.add_row(
                e.id,
                f"{e.description}. usable: {escape(ok)}; extra: {e.extra or '-'}; data: {data}; oracle: "
                f"{e.oracle or '-'}; horizon {e.horizon}, min root budget {e.min_root_budget}, gamma_g {e.gamma_g}",
            )
    console.print(table)


#: The subcommands: the tyro union of their dataclasses, and what runs each.
COMMANDS = (
    Annotated[RunConfig, tyro.conf.subcommand("rollout", description=(rollout.__doc__ or "").split("\n")[0])]
    | Annotated[Inspect, tyro.conf.subcommand("inspect")]
    | Annotated[Export, tyro.conf.subcommand("export")]
    | Annotated[Envs, tyro.conf.subcommand("envs")]
)
RUN: dict[type, Any] = {RunConfig: rollout, Inspect: inspect, Export: export, Envs: envs}


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: one subcommand, its options built by tyro from its dataclass."""
    args = list(sys.argv[1:] if argv is None else argv)
    cmd: Any = cli(COMMANDS, args=args or ["--help"], prog=PROG, description=(__doc__ or "").split("\n\n")[0])  # type: ignore[arg-type]
    RUN[type(cmd)](cmd)


if __name__ == "__main__":
    main()
