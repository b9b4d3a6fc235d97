"""Training metrics: one JSON line per step, TensorBoard scalars, and PNG plots of the curves.

Every record is ``{"step": int, "time": float, <metric>: float, ...}`` in ``<run_dir>/metrics.jsonl``; the same
scalars go to TensorBoard under ``<run_dir>/tb`` (when ``tensorboard`` is installed). `plot_metrics` draws the
curves of a metrics file into one PNG.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with MetricsLogger(d, tensorboard=False) as log:
    ...     log.log(1, {"reward_mean": 0.5})
    >>> read_metrics(d / "metrics.jsonl")[0]["reward_mean"]
    0.5
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from envkit.trainers.metric_names import current_names

# The curves docs/methods.md section 7 asks for, in plot order (keys absent from a run are skipped).
PLOT_KEYS = (
    "reward_mean",
    "success_rate",
    "zero_adv_fraction",
    "entropy",
    "response_length",
    "clip_fraction",
    "kl",
    "eden_noisy_kept_share",
    "eden_noisy_success_rate",
    "xrpo_icl_share",
    "xrpo_rollouts_max",
    "truncated_share",
    # SERO (--agent.sero True): roots tried, continuations the env confirmed, oracle rows trained on, their mean
    # reachability weight (`envkit.trainers.local.sero`); absent from other runs, so their panels do not appear
    "sero_tried",
    "sero_succeeded",
    "sero_rows",
    "sero_weight_mean",
)


class MetricsLogger:
    """Appends metric records to JSONL and TensorBoard.

    Args:
        run_dir: Folder of the run (created).
        tensorboard: Also write TensorBoard event files (needs the ``tensorboard`` package).
        resume_step: When resuming, drop records with ``step > resume_step`` left by the interrupted run.
    """

    def __init__(self, run_dir: Path | str, tensorboard: bool = True, resume_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._file = self.path.open("a")
        self._tb: Any = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=resume_step + 1 if resume_step else None)

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Write one record (numbers only go to TensorBoard) and return it."""
        record: dict[str, Any] = {"step": int(step), "time": time.time()}
        for key, value in metrics.items():
            record[key] = _plain(value)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key not in ("step", "time") and isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        return record

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _plain(value: Any) -> Any:
    """Numbers as float/int, sequences as lists of plain values (numpy and torch scalars included)."""
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    return float(value)


def read_metrics(path: Path | str) -> list[dict[str, Any]]:
    """All records of a metrics JSONL file, old metric names read as today's (`envkit.trainers.metric_names`)."""
    return [current_names(json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_metrics(path: Path | str, out: Path | str, keys: Sequence[str] = PLOT_KEYS, title: str = "") -> Path:
    """Plot every numeric key of `keys` present in a metrics file (one panel each) into the PNG `out`."""
    runs = {"": read_metrics(path)}
    return plot_runs(runs, out, keys, title=title)


def plotted_keys(runs: Mapping[str, Sequence[Mapping[str, Any]]], keys: Sequence[str] = PLOT_KEYS) -> list[str]:
    """The keys of `keys` that some record holds as a number: the panels `plot_runs` draws, in order."""
    return [k for k in keys if any(isinstance(r.get(k), int | float) for recs in runs.values() for r in recs)]


def plot_runs(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], out: Path | str, keys: Sequence[str], title: str = ""
) -> Path:
    """Plot several runs' records (label -> records) on shared panels, one per key present, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = plotted_keys(runs, keys)
    if not present:
        raise ValueError(f"none of the keys {list(keys)} is in the records: nothing to plot")
    cols = min(3, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, key in zip(axes.flat, present):
        for label, recs in runs.items():
            pts = [(r["step"], r[key]) for r in recs if isinstance(r.get(key), int | float)]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, label=label or None, linewidth=1.2)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if any(runs):
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
