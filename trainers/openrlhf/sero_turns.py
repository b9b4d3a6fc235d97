"""SERO's credit in the OpenRLHF experience maker: the batch's policy episodes and oracle rows through
`envkit.credit.sero_advantages.sero_advantages`, the function the local trainer and ``envkit-oracle rollout`` call.

Each row's policy episode is ``record.policy_steps()`` (an oracle row: the failed rollout's steps before the root,
then its ``policy_suffix``), in the same table plain GraphGPO builds (`turn_paths.turn_table`); each oracle
row adds one `Rescue` (its ``Turn.oracle`` steps with their l_j; states: their nodes under the table's state
key, `turn_paths.turns_state_key`, read from the row's steps by `turn_paths.row_nodes`). Back come, per row and turn, the advantage (policy
turns: their policy credit; oracle turns: the success's credit) and the loss weight (oracle turns: the reachability
weight, `envkit.credit.reachability.ReachConfig.weights`; policy turns 1).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from envkit.credit.sero_advantages import Rescue, sero_advantages
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.turn_paths import SampleRow, row_nodes, turn_table, turns_state_key

__all__ = ["sero_turn_advantages"]


def sero_turn_advantages(
    rows: Sequence[SampleRow], groups: list[Hashable], cfg: BackendConfig
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, float]]:
    """(per-turn advantages, per-turn weights, SERO diagnostics) of a batch of `SampleRow`s (GraphGPO + SERO)."""
    batch = list(rows)
    table, owner = turn_table(batch, groups, cfg, policy_only=True)
    kind = turns_state_key(batch, cfg, policy_only=True)  # the oracle turns' nodes: anchors under the table's key
    win = float(cfg.credit_options.terminal_reward or 0.0)  # a rescue succeeds; resolved per run (set)
    rescues: list[Rescue] = []
    where: list[tuple[int, list[int]]] = []
    for i, row in enumerate(batch):
        js = [j for j, t in enumerate(row.turns) if t.oracle]
        if not js or row.record is None:
            continue
        ora = [row.turns[j] for j in js]
        nodes = row_nodes(row, kind)  # every state of the row: the rollout's before the root, then the oracle's
        states, nexts = tuple(nodes[j] for j in js), tuple(nodes[j + 1] for j in js)
        rescues.append(
            Rescue(
                groups[i], i, int(row.record.extra["root_t"]), states, tuple(row.steps[j].action for j in js), nexts,
                tuple(row.record.invalid[j] for j in js),
                tuple(float(t.loglik if t.loglik is not None else 0.0) for t in ora), win,
            )
        )  # fmt: skip
        where.append((i, js))
    res = sero_advantages(table, rescues, cfg.credit_options, cfg.sero_opts)
    per_turn = [np.zeros(max(len(r.turns), 1)) for r in batch]
    weights = [np.ones(max(len(r.turns), 1)) for r in batch]
    for r, (i, j) in enumerate(owner):
        if j is not None:
            per_turn[i][j] = res.policy.advantages[r]
    for k, (i, js) in enumerate(where):
        part = res.oracle.of(k)
        per_turn[i][js] = res.oracle.advantages[part]
        weights[i][js] = res.oracle.weights[part]
    return per_turn, weights, res.metrics()
