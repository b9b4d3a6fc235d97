"""Trajectory records on disk: JSONL and Parquet (loadable by `datasets`), append-only and resumable.

Records are written in *units* (for example all records of one task). Each unit is appended to a journal
(``<out>.journal.jsonl``) as ONE line holding all its records, flushed and fsync'ed, so a run killed at any
moment (SIGKILL included) leaves only whole units plus at most one torn last line, which `RecordStore` drops on
open. `finalize()` writes the output file (``.jsonl`` or ``.parquet``, chosen by suffix) atomically, with units
in sorted unit-id order, so a killed-and-resumed run produces a byte-identical file to an uninterrupted one.

Example:
    >>> store = RecordStore("runs/demo.jsonl")            # doctest: +SKIP
    >>> if "task-0" not in store.done: store.append("task-0", [{"step": 0}])   # doctest: +SKIP
    >>> store.finalize()                                   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envkit.core import Trajectory
from envkit.errors import EnvkitError

FORMATS = (".jsonl", ".parquet")


class RecordStore:
    """Append-only, resumable store of record units; see the module docstring.

    Args:
        path: Output file; its suffix picks the format (``.jsonl`` or ``.parquet``).
        meta: Run settings; stored in the journal's first line and checked on resume so that a resumed run
            cannot silently mix different settings into one file.
    """

    def __init__(self, path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None):
        self.path = Path(path)
        if self.path.suffix not in FORMATS:
            raise EnvkitError(f"output {self.path} must end in .jsonl or .parquet (got {self.path.suffix!r})")
        self.journal = self.path.with_name(self.path.name + ".journal.jsonl")
        self.meta = dict(meta or {})
        self._units: dict[str, list[dict[str, Any]]] = {}
        self.dropped_torn_line = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.journal.exists():
            self._load()
        else:
            self._write_line({"__meta__": self.meta})

    @property
    def done(self) -> set[str]:
        """Ids of the units already stored (skip these on resume)."""
        return set(self._units)

    def _load(self) -> None:
        # Every unit is written as one line ending in a newline, so a last line without one was cut by a kill.
        *complete, tail = self.journal.read_bytes().split(b"\n")
        for i, line in enumerate(complete):
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise EnvkitError(
                    f"journal {self.journal} is corrupt at line {i + 1}; delete it to start over"
                ) from None
            if "__meta__" in obj:
                old = obj["__meta__"]
                if self.meta and old != self.meta:
                    changed = changed_settings(old, self.meta)
                    raise EnvkitError(
                        f"{self.journal} was written with other settings ({', '.join(changed)} differ); resume with "
                        "the same settings, or choose another --out, or delete the journal to start over"
                    )
                self.meta = old
            else:
                self._units[obj["unit"]] = obj["records"]
        if tail:
            self.dropped_torn_line = True
            with open(self.journal, "r+b") as f:
                f.truncate(sum(len(line) + 1 for line in complete))

    def _write_line(self, obj: Mapping[str, Any]) -> None:
        data = (json.dumps(obj, ensure_ascii=False, sort_keys=True, default=_default) + "\n").encode()
        with open(self.journal, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def append(self, unit: str, records: Sequence[Mapping[str, Any]]) -> None:
        """Store one unit atomically. Appending a unit id twice is refused (it would duplicate records)."""
        if unit in self._units:
            raise EnvkitError(f"unit {unit!r} is already stored in {self.journal}; check store.done before running it")
        recs = [dict(r) for r in records]
        self._write_line({"unit": unit, "records": recs})
        self._units[unit] = json.loads(json.dumps(recs, sort_keys=True, default=_default))

    def records(self) -> list[dict[str, Any]]:
        """Every record, units in sorted id order."""
        return [r for u in sorted(self._units, key=_natural) for r in self._units[u]]

    def finalize(self) -> Path:
        """Write the output file atomically from the journal; returns its path."""
        recs = self.records()
        tmp = self.path.with_name(self.path.name + ".tmp")
        if self.path.suffix == ".jsonl":
            with open(tmp, "w", encoding="utf-8") as f:
                for r in recs:
                    f.write(json.dumps(r, ensure_ascii=False, sort_keys=True, default=_default) + "\n")
        else:
            write_parquet(recs, tmp, meta=self.meta)
        os.replace(tmp, self.path)
        return self.path


def _natural(unit: str) -> tuple[Any, ...]:
    """Sort key that orders ``task-2`` before ``task-10``."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", unit))


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} in a record; convert it to JSON-able values")


def write_parquet(
    records: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None
) -> None:
    """Write records as one Parquet file (nested values as JSON strings when their types vary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list[Any]] = {}
    keys: list[str] = []
    for r in records:
        for k in r:
            if k not in cols:
                cols[k] = []
                keys.append(k)
    for r in records:
        for k in keys:
            cols[k].append(r.get(k))
    arrays = {}
    for k in keys:
        try:
            arrays[k] = pa.array(cols[k])
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays[k] = pa.array(
                [None if v is None else json.dumps(v, sort_keys=True, default=_default) for v in cols[k]]
            )
    table = pa.table(arrays) if arrays else pa.table({})
    if meta:
        table = table.replace_schema_metadata({"envkit": json.dumps(meta, sort_keys=True, default=_default)})
    pq.write_table(table, path)


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read records from a ``.jsonl`` or ``.parquet`` file."""
    p = Path(path)
    if not p.exists():
        raise EnvkitError(f"{p} does not exist")
    if p.suffix == ".jsonl":
        with open(p, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(p).to_pylist()
        return rows
    raise EnvkitError(f"{p}: unknown format; expected .jsonl or .parquet")


def trajectory_records(traj: Trajectory, **extra: Any) -> list[dict[str, Any]]:
    """One record per step of a trajectory (snapshots are not stored), with `extra` fields on each."""
    out = []
    for t, s in enumerate(traj.steps):
        out.append(
            {
                **extra,
                "env_id": traj.env_id,
                "task_id": traj.task_id,
                "seed": traj.seed,
                "step": t,
                "observation": s.observation,
                "action": s.action,
                "reward": s.reward,
                "next_observation": s.next_observation,
                "terminated": s.terminated,
                "truncated": s.truncated,
                "is_oracle": s.is_oracle,
                "success": traj.success,
            }
        )
    return out


def write_trajectories(trajs: Iterable[Trajectory], path: str | os.PathLike[str]) -> Path:
    """Write trajectories (one record per step) to a fresh ``.jsonl``/``.parquet`` file."""
    recs = [r for i, t in enumerate(trajs) for r in trajectory_records(t, trajectory=i)]
    p = Path(path)
    if p.suffix == ".jsonl":
        with open(p, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    elif p.suffix == ".parquet":
        write_parquet(recs, p)
    else:
        raise EnvkitError(f"{p}: unknown format; expected .jsonl or .parquet")
    return p


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between two settings mappings (a key missing on one side differs), sorted.

    The one comparison behind every resume check: the oracle journal (`RecordStore`) and the local trainer's
    run folder (`envkit.trainers.local.run_dir`).
    """
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
