"""One metric vocabulary for both trainers: each name means one quantity, whichever backend logs it.

`METRICS` is the table (docs/metrics.md is generated from it: ``python -m envkit.trainers.metric_names``); the local
trainer writes the names to ``<run_dir>/metrics.jsonl``, the OpenRLHF backend to OpenRLHF's logger as
``envkit/<name>``. `RENAMED` lists the names the OpenRLHF backend (and EDEN's shared statistics) used before the
two vocabularies were made one; `current_names` reads a record written with them (`read_metrics` applies it), so
old files keep working.

Example:
    >>> current_names({"step": 1, "envkit/zero_adv_group_frac": 0.5, "truncated_rate": 0.25})
    {'step': 1, 'envkit/zero_adv_fraction': 0.5, 'truncated_episode_share': 0.25}
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["METRICS", "RENAMED", "Metric", "current_names", "metric_table"]


@dataclass(frozen=True)
class Metric:
    """One logged metric: its name, what it measures, and which trainers log it."""

    name: str
    meaning: str
    local: bool = True
    openrlhf: bool = True


METRICS: tuple[Metric, ...] = (
    Metric("reward_mean", "mean reward of the step's rollouts (local; OpenRLHF logs its own `reward`)", openrlhf=False),
    Metric("success_rate", "share of the step's rollouts that succeeded"),
    Metric("zero_adv_fraction", "share of groups whose advantages are all 0 (docs/methods.md 1; EDEN: over the mixed groups before absorb)"),
    Metric("truncated_share", "share of generated actions (single-turn: responses) cut at the token cap without EOS", openrlhf=False),
    Metric("truncated_episode_share", "share of episodes cut before the env ended them (context, turn cap, env step limit, generation length)", local=False),
    Metric("context_truncated", "episodes stopped at the context cap (count)", openrlhf=False),
    Metric("action_truncated", "actions cut at the token cap (count)", openrlhf=False),
    Metric("eden_noisy_share", "share of the step's rollouts that are EDEN's noisy ones", local=False),
    Metric("eden_noisy_kept_share", "share of EDEN's noisy rollouts kept in the loss (top p by |A|)"),
    Metric("eden_noisy_success_rate", "success rate of EDEN's noisy rollouts"),
    Metric("eden_standard_success_rate", "success rate of EDEN's standard rollouts"),
    Metric("xrpo_rollouts_min", "fewest rollouts XRPO gave a prompt this step"),
    Metric("xrpo_rollouts_max", "most rollouts XRPO gave a prompt this step"),
    Metric("xrpo_icl_share", "share of XRPO's rollouts generated from an ICL-seeded prompt"),
    Metric("sero_rows", "oracle rows trained on this step (count)", openrlhf=False),
    Metric("sero_oracle_share", "share of the step's rows that are oracle rows (each replaced a failed rollout)", local=False),
    Metric("sero_weight_mean", "mean reachability weight of the oracle actions trained on"),
    Metric("state_key_<kind>", "1 for the state key the step's turn credit used (observation / env / graphgpo-recipe)"),
)  # fmt: skip

#: Names used before the vocabularies were one (OpenRLHF backend, EDEN's shared stats) -> the name now.
RENAMED: dict[str, str] = {
    "zero_adv_group_frac": "zero_adv_fraction",
    "truncated_rate": "truncated_episode_share",
    "eden_noisy_kept": "eden_noisy_kept_share",
    "sero_mean_weight": "sero_weight_mean",
}

PREFIX = "envkit/"


def current_names(record: Mapping[str, Any]) -> dict[str, Any]:
    """`record` with every old name (`RENAMED`, also under the ``envkit/`` prefix) replaced by its current one; a
    record holding both keeps the current name's value."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        prefix, bare = (PREFIX, key[len(PREFIX) :]) if key.startswith(PREFIX) else ("", key)
        new = prefix + RENAMED[bare] if bare in RENAMED else key
        if new != key and new in record:
            continue
        out[new] = value
    return out


def metric_table() -> str:
    """The markdown table of `METRICS` (docs/metrics.md holds it; a test checks it is current)."""
    lines = ["| metric | meaning | local | OpenRLHF (`envkit/` prefix) |", "|---|---|---|---|"]
    for m in METRICS:
        lines.append(f"| `{m.name}` | {m.meaning} | {'yes' if m.local else '-'} | {'yes' if m.openrlhf else '-'} |")
    lines.append("")
    lines.append("Names before the two vocabularies were one (read as the current name by `read_metrics`): ")
    lines.append(", ".join(f"`{old}` -> `{new}`" for old, new in RENAMED.items()) + ".")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m envkit.trainers.metric_names > the table of docs/metrics.md
    sys.stdout.write(metric_table())
