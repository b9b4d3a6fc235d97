"""Turn an ``envkit-oracle rollout`` output into a `datasets`-loadable SFT or RL dataset.

Rows are chat turns rendered by `envkit.oracles.prompts.turn_messages` (the prompt the policies and scorers use), with the
history rebuilt from the run's records (an oracle row's history is its root trajectory's policy prefix followed by
the earlier oracle steps).

- ``sft``: one row per step of every *successful* episode: the policy's own successes and the oracle
  continuations (their oracle steps only). Columns: ``messages`` (system, user, assistant = the action),
  ``weight`` (the reachability weight of oracle rows, 1 for policy rows), ``is_oracle``, ``task_id``,
  ``env_task_id`` (the env's own id of the task: WebShop goal, SWE instance, ALFWorld game), ``trajectory``,
  ``step``.
- ``rl``: one row per step of every episode: ``prompt`` (system + user messages), ``completion`` (the action),
  ``advantage`` (GraphGPO, before weighting), ``weight``, ``weighted_advantage``, ``is_oracle``, ``reward``,
  ``distance``, ``task_id``, ``env_task_id``, ``trajectory``, ``step``.

Output: ``.jsonl`` or ``.parquet``; load with ``datasets.load_dataset("json"|"parquet", data_files=PATH)``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envkit.core import Step
from envkit.errors import EnvkitError
from envkit.io import read_records, write_parquet
from envkit.oracles.prompts import PromptConfig, turn_messages
from envkit.policies import PolicyInput

FORMATS = ("sft", "rl")


def _step(r: Mapping[str, Any]) -> Step:
    return Step(
        r["observation"],
        r["action"],
        float(r["reward"]),
        r["next_observation"],
        bool(r["terminated"]),
        bool(r["truncated"]),
        {},
        None,
        bool(r["is_oracle"]),
    )


def episodes(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    """Records grouped by (task_id, trajectory), each list ordered by step."""
    out: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        out[(str(r["task_id"]), int(r["trajectory"]))].append(r)
    for rows in out.values():
        rows.sort(key=lambda r: int(r["step"]))
    return dict(out)


def _turn(r: Mapping[str, Any], history: Sequence[Step], prompt: PromptConfig) -> list[dict[str, str]]:
    acts = r.get("admissible_actions")
    if isinstance(acts, str):  # parquet may hold nested values as JSON text
        acts = json.loads(acts)
    x = PolicyInput(r["observation"], {"admissible_actions": list(acts or [])}, tuple(history), str(r["task_id"]))
    return turn_messages(x, prompt)


def build_rows(
    records: Sequence[Mapping[str, Any]], fmt: str = "sft", prompt: PromptConfig | None = None
) -> list[dict[str, Any]]:
    """The dataset rows (see the module docstring)."""
    if fmt not in FORMATS:
        raise EnvkitError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    prompt = prompt or PromptConfig()
    eps = episodes(records)
    rows: list[dict[str, Any]] = []
    for (task_id, traj), recs in sorted(eps.items(), key=lambda kv: (_natural(kv[0][0]), kv[0][1])):
        oracle = bool(recs[0]["is_oracle"])
        history: list[Step] = []
        if oracle:
            prefix = eps.get((task_id, int(recs[0]["root_trajectory"])), [])
            history = [_step(p) for p in prefix if int(p["step"]) < int(recs[0]["root_step"])]
        success = bool(recs[0]["success"])
        for r in recs:
            msgs = _turn(r, history, prompt)
            history.append(_step(r))
            base = {
                "task_id": task_id,
                "env_task_id": r.get("env_task_id"),
                "trajectory": traj,
                "step": int(r["step"]),
                "is_oracle": oracle,
                "weight": float(r["reach_weight"]),
            }
            if fmt == "sft":
                if success:
                    rows.append({"messages": [*msgs, {"role": "assistant", "content": r["action"]}], **base})
            else:
                adv = r.get("advantage")
                rows.append(
                    {
                        "prompt": msgs,
                        "completion": r["action"],
                        **base,
                        "reward": float(r["reward"]),
                        "advantage": None if adv is None else float(adv),
                        "weighted_advantage": None if adv is None else float(adv) * float(r["reach_weight"]),
                        "distance": r.get("distance"),
                    }
                )
    return rows


def export(run: str | os.PathLike[str], out: str | os.PathLike[str], fmt: str = "sft") -> tuple[Path, int]:
    """Write the dataset of `run` (a rollout output) to `out` (.jsonl or .parquet); returns (path, rows)."""
    rows = build_rows(read_records(run), fmt)
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    if p.suffix == ".jsonl":
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    elif p.suffix == ".parquet":
        write_parquet(rows, tmp)
    else:
        raise EnvkitError(f"export output {p} must end in .jsonl or .parquet")
    os.replace(tmp, p)
    return p, len(rows)


def _natural(s: str) -> tuple[Any, ...]:
    import re

    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", s))
