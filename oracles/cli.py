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
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envkit.errors import EnvkitError
from envkit.registration import ENVS, EnvEntry
from oracles.pipeline import DEFAULT_ENV, RunConfig, summarize, summary_path

_D = RunConfig()  # the option defaults below are RunConfig's (declared once there)


def _facts(name: str) -> str:
    """One per-env fact of the registry, for --help (envs that keep the default are summed up as "others")."""
    default = getattr(EnvEntry("", "", None, ""), name)
    own = [
        f"{e.id.split('/')[-1].split('-')[0]} {getattr(e, name)}" for e in ENVS.values() if getattr(e, name) != default
    ]
    return ", ".join([*own, f"others {default}"])


app = typer.Typer(
    help="SERO oracle rollouts: restore policy states, continue with the oracle, write training data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)
out_console = Console()


def _fail(msg: str, code: int = 2) -> typer.Exit:
    if "Traceback (most recent call last)" in msg:  # an error raised in a pool worker: keep its first and last line
        lines = [x for x in msg.strip().splitlines() if x.strip()]
        msg = f"{lines[0]} {lines[-1].strip()}"
    console.print(f"[bold red]error:[/] {escape(msg)}")
    return typer.Exit(code)


def _check_env(env_id: str) -> None:
    """Unknown id -> suggestion; missing extra / missing env package -> the pip command."""
    from envkit.errors import MissingExtraError
    from envkit.registration import ENVS, register_envs, suggest

    register_envs()
    import gymnasium as gym

    if env_id not in gym.registry:
        hint = suggest(env_id)
        raise _fail(
            f"unknown environment id {env_id!r}."
            + (f" Did you mean {hint!r}?" if hint else "")
            + f" Known: {', '.join(sorted(ENVS))} (see `envkit-oracle envs`)"
        )
    entry = ENVS.get(env_id)
    module = str(gym.registry[env_id].entry_point).partition(":")[0]
    try:
        importlib.import_module(module)
    except MissingExtraError as exc:
        raise _fail(str(exc)) from exc
    except ImportError as exc:
        extra = entry.extra if entry else None
        fix = f"pip install -e '.[{extra}]'" if extra else "pip install -e ."
        raise _fail(f"{env_id} cannot be imported ({exc}); install its extra: {fix}") from exc


def _check_out(out: str) -> None:
    p = Path(out)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        probe = p.with_name(f".{p.name}.probe-{os.getpid()}")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise _fail(f"cannot write the output {out!r} ({exc.strerror or exc}); choose a writable --out") from exc


def parse_kwargs(items: list[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` options (VALUE parsed as JSON when it can be, else kept as text) as a dict.

    Raises:
        ValueError: an item without ``=`` or without a key (the message names `flag`).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE (VALUE parsed as JSON when it can be), got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _kwargs(items: list[str], flag: str) -> dict[str, Any]:
    try:
        return parse_kwargs(items, flag)
    except ValueError as exc:
        raise _fail(str(exc)) from exc


@app.command()
def rollout(
    env: Annotated[str, typer.Option(help="Registered env id (`envkit-oracle envs` lists them).")] = DEFAULT_ENV,
    policy: Annotated[
        str, typer.Option(help="Rollout policy: random | scripted:FILE | hf:PATH[?mode=choose] | openai:URL#MODEL.")
    ] = _D.policy,
    tasks: Annotated[
        int, typer.Option(help="Number of tasks (task i resets with a seed derived from --seed, i).")
    ] = _D.tasks,
    group: Annotated[int, typer.Option(help="Rollouts per task (G).")] = _D.group,
    roots: Annotated[int, typer.Option(help="SERO roots per group (0: policy rollouts only).")] = _D.roots,
    out: Annotated[str, typer.Option(help="Output file, .parquet or .jsonl (summary: <out>.summary.json).")] = _D.out,
    workers: Annotated[int, typer.Option(help="Env pool size (parallel envs).")] = _D.workers,
    backend: Annotated[str, typer.Option(help="Env pool backend: inprocess | subprocess | ray.")] = _D.backend,
    seed: Annotated[int, typer.Option(help="Run seed (task seeds, random policy draws).")] = _D.seed,
    max_steps: Annotated[
        int | None,
        typer.Option(help=f"Episode step budget (default: the env's EnvEntry.horizon: {_facts('horizon')})."),
    ] = None,
    min_budget: Annotated[
        int | None,
        typer.Option(
            help=f"A root needs this many steps of budget left (default: EnvEntry.min_root_budget: "
            f"{_facts('min_root_budget')})."
        ),
    ] = None,
    scorer: Annotated[str, typer.Option(help="Policy scorer for reachability weights: uniform | hf:PATH.")] = _D.scorer,
    weighting: Annotated[
        str,
        typer.Option(help="l_j: sequence (length-normalised log-lik) | choice (softmax over the admissible actions)."),
    ] = _D.weighting,
    gamma_g: Annotated[
        float | None, typer.Option(help=f"GraphGPO discount (default: EnvEntry.gamma_g: {_facts('gamma_g')}).")
    ] = None,
    p_floor: Annotated[float, typer.Option(help="Reachability weight: per-step likelihood floor.")] = _D.p_floor,
    tau_w: Annotated[float, typer.Option(help="Reachability weight: temperature.")] = _D.tau_w,
    w_min: Annotated[float, typer.Option(help="Reachability weight: minimum.")] = _D.w_min,
    env_kwarg: Annotated[
        list[str] | None, typer.Option(help="Env constructor argument KEY=VALUE (repeatable).")
    ] = None,
    oracle_kwarg: Annotated[
        list[str] | None, typer.Option(help="Oracle constructor argument KEY=VALUE (repeatable).")
    ] = None,
    device: Annotated[str, typer.Option(help="Device of model policies/scorers: auto | cpu | cuda.")] = _D.device,
    chunk_tasks: Annotated[
        int | None,
        typer.Option(
            help="Tasks rolled out together (default: max(ceil(workers / group), ceil(workers / roots))); "
            "no effect on the records."
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = _D.progress,
) -> None:
    """Run G policy rollouts per task, select SERO roots, restore them and continue with the oracle.

    Resumable: run the same command again after a kill; finished tasks are skipped and none is duplicated.
    """
    from oracles.pipeline import run

    try:
        cfg = RunConfig(
            env_id=env,
            env_kwargs=_kwargs(env_kwarg or [], "--env-kwarg"),
            oracle_kwargs=_kwargs(oracle_kwarg or [], "--oracle-kwarg"),
            policy=policy,
            tasks=tasks,
            group=group,
            roots=roots,
            out=out,
            workers=workers,
            backend=backend,
            seed=seed,
            max_steps=max_steps,
            min_budget=min_budget,
            scorer=scorer,
            weighting=weighting,
            gamma_g=gamma_g,
            p_floor=p_floor,
            tau_w=tau_w,
            w_min=w_min,
            device=device,
            chunk_tasks=chunk_tasks,
            progress=progress,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    _check_env(env)
    _check_out(out)
    try:
        summary = run(cfg)
    except EnvkitError as exc:
        raise _fail(str(exc)) from exc
    print_summary(summary, title=f"SERO run -> {out}")
    journal = Path(out).with_name(Path(out).name + ".journal.jsonl")
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
        out_console.print(escape("settings: " + ", ".join(f"{k}={st[k]}" for k in keys if k in st)))
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
    out_console.print(table)
    if tot.get("stop_reasons"):  # one line per reason, whole (reasons contain colons and commas)
        out_console.print("oracle stop reasons:")
        for k, v in tot["stop_reasons"].items():
            out_console.print(escape(f"  {v} x {k}"), soft_wrap=True)
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
        out_console.print(t2)


@app.command()
def inspect(
    file: Annotated[Path, typer.Argument(help="A run's output (.parquet/.jsonl), its .summary.json or its journal.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Print the summary of a run (recomputed from the journal when the run was killed before finishing)."""
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
        raise _fail(f"no run at {file}: expected {summ} or {journal}")
    if as_json:
        out_console.print_json(json.dumps(summary, default=str))
    else:
        print_summary(summary, title=f"SERO run {file}")


@app.command()
def export(
    file: Annotated[Path, typer.Argument(help="A run's output (.parquet or .jsonl).")],
    out: Annotated[
        Path | None, typer.Option(help="Dataset file, .jsonl or .parquet (default: <file>.<format>.jsonl).")
    ] = None,
    format: Annotated[
        str,
        typer.Option(
            help="sft (successful episodes as chat messages + weights) | rl (every step "
            "with prompt, completion, advantage, weight)."
        ),
    ] = "sft",
) -> None:
    """Write a datasets-loadable SFT or RL dataset (load it with datasets.load_dataset('json', data_files=...))."""
    from oracles.export import export as do_export

    if not file.exists():
        raise _fail(f"{file} does not exist: pass the output of `envkit-oracle rollout`")
    target = out or file.with_name(f"{file.stem}.{format}.jsonl")
    try:
        path, n = do_export(file, target, format)
    except EnvkitError as exc:
        raise _fail(str(exc)) from exc
    out_console.print(f"wrote {n} {format} rows to {path}")


@app.command()
def envs() -> None:
    """List the registered env ids, the extra each needs, and whether it can start here (and if not, the fix).

    "usable" checks what the env needs to start: its extra's Python packages, the programs it runs (Chromium,
    bubblewrap), root for sandboxes, its data directory, and that its module imports.
    """
    from envkit.errors import EnvkitError
    from envkit.registration import ENVS, missing

    table = Table(title="envkit environments")
    for col in ("id", "extra", "usable", "data", "oracle", "description"):
        table.add_column(col)
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
        table.add_row(e.id, e.extra or "-", escape(ok), data, e.oracle or "-", e.description)
    out_console.print(table)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
