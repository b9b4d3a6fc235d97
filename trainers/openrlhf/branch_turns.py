"""Branching rollouts' credit in the OpenRLHF experience maker (``--explorer branch``; docs/methods.md section 8).

Per group (one prompt: its backbones and forks, `envkit.trainers.openrlhf.branch_rows`), the tree in the records'
``extra["branch"]`` (``parent`` as a spec index, ``fork`` turn) is read into the shared `BranchNode`s
(`branch_nodes`), and `envkit.trainers.explorers.branch.branch_credit` (the local trainer's function) adds each
turn's leave-one-out sibling value: ``estimator_weight * estimator + loo_weight * loo``, returns
``adv.terminal_reward * success`` (resolved per run, `BackendConfig.credit_options`). A fork's prefix turns get 0
from the tree and have no tokens in its row (its ``action_ranges`` are its own turns), so the shared prefix is
trained once, on the backbone's row. This module adds only the rollout's own diagnostics (points, forks, restores,
env steps against the budget).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from envkit.trainers.explorers.branch import BranchNode, branch_credit
from envkit.trainers.openrlhf.config import BackendConfig

__all__ = ["branch_nodes", "branch_turn_advantages"]


def branch_nodes(rows: Sequence[Any], groups: list[Hashable]) -> list[BranchNode | None]:
    """Per row (`SampleRow`), its node of its group's tree; None for every row of a group whose rows carry no
    tree (evaluation's plain rollouts keep the estimator's values).

    Raises:
        ValueError: some rows of a group carry a tree and others do not (a row that did not come through envkit's
            branch step).
    """
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out: list[BranchNode | None] = [None] * len(rows)
    for g, idx in members.items():
        nodes = [rows[i].record.extra.get("branch") if rows[i].record is not None else None for i in idx]
        if all(n is None for n in nodes):
            continue
        for i, node in zip(idx, nodes, strict=True):
            if node is None:
                raise ValueError(
                    f"explorer branch: row {rows[i].index} has no tree in record.extra['branch'] (it did not come "
                    "through envkit's branch step); run with --explorer branch end to end"
                )
            spec = rows[i].record.spec
            out[i] = BranchNode(g, spec.index, int(node["parent"]), int(node["fork"]), rows[i].success)
    return out


def branch_turn_advantages(
    rows: Sequence[Any], groups: list[Hashable], per_turn: list[np.ndarray], cfg: BackendConfig
) -> tuple[list[np.ndarray], dict[str, float]]:
    """(per-turn advantages with the leave-one-out term added, diagnostics) of a batch (see the module docstring).

    Groups whose rows carry no tree (evaluation's plain rollouts) keep the estimator's values.
    """
    bcfg = cfg.branch_config()
    nodes = branch_nodes(rows, groups)
    if all(n is None for n in nodes):
        return [np.array(p, dtype=np.float64) for p in per_turn], {}
    out, credit_stats = branch_credit(nodes, per_turn, bcfg, cfg.credit_options)
    budget = bcfg.resolve(cfg.n_samples_per_prompt, cfg.max_turns)[1]
    used: dict[Hashable, int] = defaultdict(int)  # env steps per group: a fork's own turns only
    kinds: dict[str, int] = defaultdict(int)
    entropy: list[float] = []
    points: set[tuple[Hashable, int, int]] = set()
    for row, node in zip(rows, nodes, strict=True):
        if node is None:
            continue
        tree = row.record.extra["branch"]
        used[node.group] += len(row.turns) - (int(tree["turn"]) if "turn" in tree else 0)
        if row.record.spec.fork:
            points.add((node.group, int(tree["source"]), int(tree["turn"])))
            entropy.append(float(tree["entropy"]))
            kinds[str(tree["restored"])] += 1
    stats = {
        "branch_points": float(len(points)),
        "branch_forks": float(sum(kinds.values())),
        "branch_entropy_at_points": float(np.mean(entropy)) if entropy else 0.0,
        "branch_native_restores": float(kinds["native"]),
        "branch_replay_restores": float(kinds["replay"]),
        "branch_env_steps": float(sum(used.values())),
        "branch_budget_steps": float(budget * len(used)),
        "branch_budget_overrun": float(sum(max(0, u - budget) for u in used.values())),
        **{k: float(v) for k, v in credit_stats.items()},
    }
    return out, stats
