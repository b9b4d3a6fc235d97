"""A run folder belongs to one run: refuse to train into a used one without ``--resume``, or to resume it with
other settings (the oracle CLI's journal check, `envkit.io.changed_settings`, applied to ``config.json``).

A new run into a used folder would overwrite ``metrics.jsonl`` and keep the older run's checkpoints, so a later
``--resume`` would mix two runs; a resume with changed settings would continue one run under another's name.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envkit.errors import EnvkitError
from envkit.io import changed_settings

if TYPE_CHECKING:
    from envkit.trainers.local.config import TrainConfig

__all__ = ["RUN_ONLY_KEYS", "RunDirError", "check_run_dir", "run_settings"]

#: TrainConfig fields that may change between a run and its resume (how long and how it is shown, not what).
RUN_ONLY_KEYS = frozenset(
    {"steps", "resume", "run_dir", "progress", "tensorboard", "plot", "torch_threads", "save_every", "keep_checkpoints"}
)


class RunDirError(EnvkitError, ValueError):
    """A run folder holds another run (no ``--resume``), or ``--resume`` was given other settings."""


def run_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The settings of `cfg` (a `TrainConfig`) that a resume must keep, as JSON data (``config.json``'s form)."""
    data = json.loads(json.dumps(dataclasses.asdict(cfg), default=str))
    return {k: v for k, v in data.items() if k not in RUN_ONLY_KEYS}


def _used(run_dir: Path) -> list[str]:
    """What in `run_dir` shows a run was there (empty: the folder is new or holds nothing of a run)."""
    found = [n for n in ("metrics.jsonl", "config.json") if (run_dir / n).exists()]
    ckpts = run_dir / "checkpoints"
    if ckpts.is_dir() and any(ckpts.iterdir()):
        found.append("checkpoints/")
    return found


def check_run_dir(cfg: TrainConfig) -> None:
    """Refuse a used `cfg.run_dir` without `cfg.resume`, and a resume whose settings differ from ``config.json``.

    Raises:
        RunDirError: the message says which files show the earlier run, or which settings differ (old -> new),
            and the three ways out.
    """
    run_dir = Path(cfg.run_dir)
    used = _used(run_dir)
    if not used:
        return
    if not cfg.resume:
        raise RunDirError(
            f"{run_dir} already holds a run ({', '.join(used)}): continue it with --resume True, or choose another "
            f"--run-dir, or delete {run_dir} to start over (training into it would overwrite metrics.jsonl and keep "
            "the older checkpoints, so a later resume would mix two runs)"
        )
    path = run_dir / "config.json"
    if not path.exists():
        return
    old = {k: v for k, v in json.loads(path.read_text()).items() if k not in RUN_ONLY_KEYS}
    new = run_settings(cfg)
    changed = changed_settings(old, new)
    if changed:
        detail = "; ".join(f"{k}: {json.dumps(old.get(k))} -> {json.dumps(new.get(k))}" for k in changed)
        raise RunDirError(
            f"{run_dir} was trained with other settings ({detail}); resume with the same settings (only "
            f"{', '.join(sorted(RUN_ONLY_KEYS - {'resume', 'run_dir'}))} may change), or choose another --run-dir, "
            f"or delete {run_dir} to start over"
        )
