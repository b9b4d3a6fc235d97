"""Recompute the credit an OpenRLHF run sent to its loss with the local trainer's functions; compare value by value.

A run started with ``envkit-train openrlhf --credit-log ...`` writes one group per step to
``<ckpt.output_dir>/envkit_credit.jsonl`` (`envkit.trainers.openrlhf.credit_log`): its records, the per-turn
advantages and loss weights the experience maker computed, and the per-token advantages the loss received. This
script rebuilds the group as the local trainer's `Episode`s (each record's policy episode, `policy_steps`: the
executor's recorded steps, fed to `Episode.from_steps`) and SERO continuations (each oracle row's ``Turn.oracle``
steps, their l_j), credits it with the local trainer's own
functions (`envkit.trainers.local.sero.episode_credit` for GraphGPO + SERO, `episode_steps.step_table` +
`turn_credit` for plain GiGPO / GraphGPO, then `envkit.trainers.explorers.branch.branch_credit` over the local
driver's `branch_nodes` for a branching run's group: its backbones and forks, the tree from each record's
``extra["branch"]``), and checks:

1. every turn's advantage and loss weight equals the local trainer's, bit for bit (policy turns: the episode's
   turn credit; oracle turns: the rescue's credit and reachability weight);
2. every action token of a turn reached the loss with ``(a_j + kl) * w_j`` (float32: the token tensor's dtype;
   ``kl`` is OpenRLHF's KL reward tail, 0 with ``--algo.kl.use_loss``), 0 on a row dropped from the loss;
3. a fork's prefix turns (its backbone's, before the fork turn) sent no token to the loss (trained once, on the
   backbone's row).

Checkable: ``--explorer none`` or ``branch`` with ``--advantage gigpo|graphgpo`` (``--sero`` or not) and no
``--reward.clip_range``; any state key (both trainers read the anchors from the same recorded steps). Both trainers
credit ``terminal_reward * success`` (``--adv.terminal-reward``, unset: 10, resolved per run by
`envkit.env_settings.resolve_env_settings`).

    python scripts/openrlhf_credit_check.py RUN/ckpt/envkit_credit.jsonl     # JSON summary; exit 1 on a mismatch
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from envkit.core import Root
from envkit.credit.sero import SeroOptions, widen_options
from envkit.credit.turn_credit import turn_credit
from envkit.oracles.continuation import ContinuationOutcome
from envkit.trainers.explorers.branch import branch_credit
from envkit.trainers.local.episode_steps import step_table
from envkit.trainers.local.explorers.branch import branch_nodes
from envkit.trainers.local.multi_turn import AgentConfig, Episode
from envkit.trainers.local.sero import episode_credit
from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RolloutRecord
from envkit.trainers.sero_options import TrainerSeroOptions

#: float32 tolerance of a token's value (the token tensor is float32; OpenRLHF's reward-to-go sums increments)
TOKEN_RTOL = 1e-5


def _episode(i: int, rec: RolloutRecord, index: int | None = None) -> Episode:
    """A record's policy episode (`RolloutRecord.policy_steps`, from the record's first state) as the local
    trainer's `Episode` (`Episode.from_steps`: the same steps through its recorder); `index`: the episode's index in
    its group (default `i`; a branch group: the row's spec index)."""
    steps = rec.policy_steps()
    if not steps:
        raise ValueError(f"row {i}: a record without steps cannot be credited per turn")
    return Episode.from_steps(0, i if index is None else index, rec.observation, rec.info, steps)


def _outcome(i: int, rec: RolloutRecord) -> tuple[ContinuationOutcome, list[float]]:
    """An oracle row's continuation (its ``Turn.oracle`` steps) as the local trainer's `ContinuationOutcome`, with
    its l_j."""
    ora = [(s, t) for s, t in zip(rec.steps, rec.turns, strict=True) if t.oracle]
    steps = tuple(s for s, _ in ora)
    root = Root(0, i, int(rec.extra["root_t"]), steps[0].observation)
    return ContinuationOutcome(root, "native", steps=steps, success=True), [float(t.loglik or 0.0) for _, t in ora]


def local_credit(entry: dict[str, Any]) -> list[tuple[list[float], list[float]]]:
    """Per logged row, (advantage, weight) of each of its turns under the local trainer's credit."""
    cfg = BackendConfig.from_json(json.dumps(entry["config"]))
    if cfg.explorer not in ("none", "branch") or cfg.advantage not in ("gigpo", "graphgpo"):
        raise ValueError(f"not checkable: --explorer {cfg.explorer} --advantage {cfg.advantage} (see the module doc)")
    records = [RolloutRecord.from_dict(r["record"]) for r in entry["rows"]]
    if cfg.explorer == "branch":
        return _branch_credit(cfg, records)
    episodes = [_episode(i, rec) for i, rec in enumerate(records)]
    acfg = _agent_config(cfg, episodes)
    oracle_rows = [i for i, rec in enumerate(records) if rec.oracle]
    if cfg.sero:
        found = [_outcome(i, records[i]) for i in oracle_rows]
        res = episode_credit(
            episodes, [(episodes[o.root.trajectory], o) for o, _ in found], [ll for _, ll in found], acfg
        )
        policy = res.policy.advantages
    else:
        policy = turn_credit(step_table(episodes, acfg), cfg.advantage, acfg.adv).advantages
    out, r = [], 0
    for i, (rec, e) in enumerate(zip(records, episodes, strict=True)):
        own = [float(x) for x in policy[r : r + len(e.actions)]]
        r += len(e.actions)
        adv = own[: int(rec.extra["root_t"])] if rec.oracle else own  # an oracle row trains the turns before its root
        w = [1.0] * len(adv)
        if rec.oracle:
            part = res.oracle.of(oracle_rows.index(i))
            adv += [float(x) for x in res.oracle.advantages[part]]
            w += [float(x) for x in res.oracle.weights[part]]
        out.append((adv, w))
    return out


def _agent_config(cfg: BackendConfig, episodes: list[Episode]) -> AgentConfig:
    shared = SeroOptions(**{f.name: getattr(cfg.sero_opts, f.name) for f in fields(SeroOptions)})
    sero = widen_options(shared, TrainerSeroOptions, "credit check")  # the SERO options both backends share
    # adv with gamma_g (unset: the env's) and terminal_reward (unset: 10) resolved, as the local trainer's
    # `AgentConfig.for_env` does (the shared `resolve_env_settings`); the raw cfg.adv would credit with GraphGPO's
    # fallback 0.1 instead
    return AgentConfig(estimator=cfg.advantage, sero=cfg.sero, max_turns=max(len(e.actions) for e in episodes),
                       adv=cfg.credit_options, sero_opts=sero)  # fmt: skip


def _branch_credit(cfg: BackendConfig, records: list[RolloutRecord]) -> list[tuple[list[float], list[float]]]:
    """A branch group (backbones and forks, each fork's record holding its backbone's prefix turns) credited as
    the local trainer does: the estimator over every row as a full episode, then `branch_credit` (the tree from
    each record's ``extra["branch"]``: parent spec index, fork turn, read by the local driver's `branch_nodes`)."""
    episodes, links = [], {}
    for i, rec in enumerate(records):
        node = rec.extra.get("branch")
        if node is None:
            raise ValueError(f"row {i}: no tree in record.extra['branch'] (not a branching run's row)")
        episodes.append(_episode(i, rec, index=rec.spec.index))
        links[(0, rec.spec.index)] = (int(node["parent"]), int(node["fork"]))
    acfg = _agent_config(cfg, episodes)
    flat = turn_credit(step_table(episodes, acfg), cfg.advantage, acfg.adv).advantages
    per_episode, r = [], 0
    for e in episodes:
        per_episode.append(np.asarray(flat[r : r + len(e.actions)]))
        r += len(e.actions)
    credit, _ = branch_credit(branch_nodes(episodes, links), per_episode, cfg.branch_config(), acfg.adv)
    return [([float(x) for x in a], [1.0] * len(a)) for a in credit]


def problems(entry: dict[str, Any]) -> list[str]:
    """What the logged group violates (empty: the loss got the local trainer's credit, value by value)."""
    out: list[str] = []
    try:
        expected = local_credit(entry)
    except (ValueError, KeyError) as exc:
        return [f"step {entry.get('step')}: {exc}"]
    for row, (adv, w) in zip(entry["rows"], expected, strict=True):
        where = f"step {entry['step']} row {row['index']}"
        if row["per_turn"] != adv:
            out.append(f"{where}: per-turn advantages {row['per_turn']} != local trainer's {adv}")
        if row["weights"] != w:
            out.append(f"{where}: loss weights {row['weights']} != local trainer's {w}")
        node = row["record"].get("extra", {}).get("branch") or {}
        prefix = int(node.get("turn", 0)) if row["record"]["spec"].get("fork") else 0
        for j, (values, kls) in enumerate(zip(row["loss_tokens"], row["kl_tails"], strict=True)):
            if j < prefix and values:  # a fork's prefix is trained once, on its backbone's row
                out.append(f"{where} turn {j}: a fork's prefix turn reached the loss ({len(values)} tokens)")
                continue
            if len(values) != len(kls):
                out.append(f"{where} turn {j}: {len(values)} loss tokens but {len(kls)} KL tails")
                continue
            want = np.array([(adv[j] + k) * w[j] if row["keep"] else 0.0 for k in kls])
            got = np.array(values)
            if len(got) and not np.allclose(got, want, rtol=TOKEN_RTOL, atol=TOKEN_RTOL):
                out.append(f"{where} turn {j}: loss tokens {got.tolist()} != (a + kl) * w = {want.tolist()}")
    return out


def check_file(path: Path) -> dict[str, Any]:
    """Summary of a credit log: entries, rows, turns, oracle turns, branch forks (with a prefix shared with their
    backbone: ``prefix_forks``) and tokens checked, and every problem."""
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    found = [p for e in entries for p in problems(e)]
    rows = [r for e in entries for r in e["rows"]]
    turns = [t for r in rows for t in r["record"]["turns"]]
    return {
        "entries": len(entries), "rows": len(rows), "turns": len(turns),
        "oracle_turns": sum(bool(t.get("oracle")) for t in turns),
        "forks": sum(bool(r["record"]["spec"].get("fork")) for r in rows),
        "prefix_forks": sum(int((r["record"].get("extra", {}).get("branch") or {}).get("parent", -1)) >= 0 for r in rows),
        "tokens": sum(len(v) for r in rows for v in r["loss_tokens"]), "problems": found,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path, help="envkit_credit.jsonl of a run started with --credit-log")
    summary = check_file(ap.parse_args(argv).log)
    print(json.dumps(summary))
    return 1 if summary["problems"] or not summary["entries"] else 0


if __name__ == "__main__":
    sys.exit(main())
