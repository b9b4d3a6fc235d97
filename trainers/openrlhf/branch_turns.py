"""Branching rollouts' credit in the OpenRLHF experience maker (``--explorer branch``; docs/methods.md section 8).

Per group (one prompt: its backbones and forks, `envkit.trainers.openrlhf.branch_rows`), the tree in the records'
``extra["branch"]`` (``parent`` as a spec index, ``fork`` turn) becomes an `envkit.credit.branching.BranchTree`
over the rows in spec order, with each row's full length (a fork's record holds the backbone's prefix turns) and
its episode return (``adv.terminal_reward`` x success when set, else OpenRLHF's reward: the estimator's return);
`envkit.credit.branching.loo_advantages` (the local trainer's function) gives every owned turn its leave-one-out
sibling value, normalised as ``adv.norm`` says. Each turn's advantage is then
``estimator_weight * estimator + loo_weight * loo``; a fork's prefix turns get 0 from the tree and have no tokens
in its row (its ``action_ranges`` are its own turns), so the shared prefix is trained once, on the backbone's row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from envkit.credit.branching import BranchTree, loo_advantages
from envkit.trainers.openrlhf.config import BackendConfig


def branch_tree(rows: Sequence[Any], returns: Sequence[float]) -> BranchTree:
    """The `BranchTree` of one group's rows (`SampleRow`s in spec-index order) with their `returns`.

    Raises:
        ValueError: a row carries no tree (``record.extra["branch"]``) or names a parent outside the group.
    """
    where = {r.record.spec.index: k for k, r in enumerate(rows)}
    parent, fork = [], []
    for r in rows:
        node = r.record.extra.get("branch") if r.record is not None else None
        if node is None:
            raise ValueError(
                f"explorer branch: row {r.index} has no tree in record.extra['branch'] (it did not come through "
                "envkit's branch step); run with --explorer branch end to end"
            )
        p = int(node["parent"])
        if p != -1 and p not in where:
            raise ValueError(f"explorer branch: row {r.index} forks from backbone {p}, which is not in its group")
        parent.append(-1 if p == -1 else where[p])
        fork.append(int(node["fork"]))
    length = tuple(max(len(r.turns), 1) for r in rows)
    return BranchTree(parent=tuple(parent), fork=tuple(fork), length=length, returns=tuple(map(float, returns)))


def branch_turn_advantages(
    rows: Sequence[Any], groups: list[Hashable], per_turn: list[np.ndarray], returns: Sequence[float],
    cfg: BackendConfig,
) -> tuple[list[np.ndarray], dict[str, float]]:  # fmt: skip
    """(per-turn advantages with the leave-one-out term added, diagnostics) of a batch (see the module docstring).

    Groups whose rows carry no tree (evaluation's plain rollouts) keep the estimator's values.
    """
    bcfg = cfg.branch_config()
    budget = bcfg.resolve(cfg.n_samples_per_prompt, cfg.max_turns)[1]
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [np.asarray(p, dtype=np.float64).copy() for p in per_turn]
    mass = 0.0
    owned = decisions = steps = over = n_groups = forks = 0
    kinds: dict[str, int] = defaultdict(int)
    entropy: list[float] = []
    points: set[tuple[Hashable, int, int]] = set()
    for g, idx in members.items():
        if not all(rows[i].record is not None and "branch" in rows[i].record.extra for i in idx):
            continue
        idx.sort(key=lambda i: rows[i].record.spec.index)
        tree = branch_tree([rows[i] for i in idx], [returns[i] for i in idx])
        credit = loo_advantages(tree, norm=cfg.adv.norm, eps=cfg.adv.eps)
        decisions += credit.decisions
        n_groups += 1
        used = 0
        for k, i in enumerate(idx):
            loo = credit.advantages[k]
            out[i] = bcfg.estimator_weight * out[i] + bcfg.loo_weight * loo
            node = rows[i].record.extra["branch"]
            own = len(rows[i].turns) - (int(node["turn"]) if "turn" in node else 0)  # env steps this row took
            used += own
            mass += float(np.abs(loo[tree.fork[k] :]).sum())
            owned += tree.length[k] - tree.fork[k]
            if rows[i].record.spec.fork:
                forks += 1
                points.add((g, int(node["source"]), int(node["turn"])))
                entropy.append(float(node["entropy"]))
                kinds[str(node["restored"])] += 1
        steps += used
        over += max(0, used - budget)
    if not n_groups:
        return out, {}
    stats = {
        "branch_points": float(len(points)),
        "branch_forks": float(forks),
        "branch_decisions": float(decisions),
        "branch_entropy_at_points": float(np.mean(entropy)) if entropy else 0.0,
        "branch_native_restores": float(kinds["native"]),
        "branch_replay_restores": float(kinds["replay"]),
        "branch_env_steps": float(steps),
        "branch_budget_steps": float(budget * n_groups),
        "branch_budget_overrun": float(over),
        "branch_loo_abs_mean": mass / max(owned, 1),
    }
    return out, stats
