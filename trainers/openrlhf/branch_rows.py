"""Branching rollouts on the OpenRLHF backend (``--explorer branch``; docs/methods.md section 8, docs/openrlhf.md).

The samples generator plans each prompt's n rows as ``backbones`` rollouts and ``points x branches`` fork slots
(`envkit.trainers.openrlhf.explorers.branch.branch_specs`; `BackendConfig.branch_config` refuses any other count, so
OpenRLHF's ``batch x n`` arithmetic holds). In the vLLM rollout actor:

1. the agent executor plays the backbones from reset with a snapshot before every step, records per turn the
   sampled tokens' mean ``-log p`` (vLLM's log-prob of each sampled token, ``logprobs=0``: an unbiased estimate of
   the mean token entropy the local trainer computes exactly, see docs/openrlhf.md) and keeps each backbone's
   episode and env (`GymAgentExecutor._held`) until the group is finished; a fork slot returns `fork_slot`, a
   placeholder, without touching an env;
2. `branch_group` (from `GymAgentExecutor.finish_group`) ranks the backbones' decisions with the local trainer's
   `envkit.trainers.explorers.branch.admit` (highest entropy first, at most ``points``; the budget is not used to
   size forks here) and assigns ``branches`` slots per point (`plan_forks`; fewer decisions than points: the slots
   cycle over the points found);
3. each fork restores its point's snapshot natively: where snapshots are instance-scoped (ALFWorld) in the env
   that took it, one fork per env at a time, else in a leased env of the pool, all at once; the restored
   observation must be the one the backbone saw (else it raises, as the local driver's `fork` does); the engine
   then finishes the fork from the backbone's token prefix (`GymAgentExecutor.play_episode` with a `ForkStart`);
4. a fork's row: tokens = the backbone's up to the fork turn, then its own; ``action_ranges`` = its own turns only
   (the shared prefix is trained once, on the backbone's row); its record's steps and turns = the backbone's
   before the fork turn (the estimator credits the fork as a full episode; anchors are read from the steps) then
   its own; ``record.extra["branch"]`` = the tree
   (``parent``: the backbone's spec index, or -1 for a fork at turn 0, which shares nothing and is another root;
   ``fork``: the fork turn) plus ``source``, ``turn``, ``entropy`` and ``restored`` (native / replay);
5. `GymAgentExecutor.finish_group` then discards every backbone snapshot in its env and returns the envs to the
   cache; the experience maker adds the tree's leave-one-out term (`envkit.trainers.openrlhf.branch_turns`).
"""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from copy import deepcopy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envkit.lifetime import instance_scoped
from envkit.snapshot import snapshot_env
from envkit.trainers.explorers.branch import admit
from envkit.trainers.openrlhf.executor_contract import ForkStart, GenerationContext
from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord, RolloutSpec

if TYPE_CHECKING:
    from envkit.trainers.openrlhf.executor_contract import GroupExecutor
    from envkit.trainers.openrlhf.sero_rows import SeroEpisode

__all__ = ["ForkStart", "branch_group", "fork_slot", "plan_forks"]


def fork_slot(prompt: str, label: object) -> dict[str, Any]:
    """The placeholder a fork slot's `execute` returns; `branch_group` replaces it (it never reaches a batch)."""
    record = RolloutRecord(spec=RolloutSpec(group="", fork=True), reason="fork_slot")
    return {"prompt": prompt, "label": label, "observation_tokens": [], "action_ranges": [], "reward": 0.0,
            "scores": 0.0, "rollout_log_probs": None, "truncated": False, RESPONSE_KEY: record.to_dict()}  # fmt: skip


def plan_forks(points: list[tuple[int, int]], slots: int, branches: int) -> list[tuple[int, int]]:
    """The (backbone, turn) each of `slots` fork slots branches from: `branches` per point in order; with fewer
    points than ``slots / branches`` the slots cycle over the points.

    Example:
        >>> plan_forks([(0, 2), (1, 0)], 4, 2), plan_forks([(1, 3)], 3, 1)
        ([(0, 2), (0, 2), (1, 0), (1, 0)], [(1, 3), (1, 3), (1, 3)])

    Raises:
        RuntimeError: no point at all (every backbone ended before its first action).
    """
    if not points:
        raise RuntimeError(
            "explorer branch: no backbone took a turn (each one's prompt filled the context?), so no fork can be "
            "made; raise --generate.max_len (OpenRLHF) or shorten the prompt"
        )
    return [points[(j // branches) % len(points)] for j in range(slots)]


def fork_start(
    episode: SeroEpisode, record: RolloutRecord, response: dict, turn: int, obs: str, info: dict[str, Any]
) -> ForkStart:
    """The `ForkStart` of a fork of `episode` (a `sero_rows.SeroEpisode` with its snapshots) before `turn`, once
    its env was restored there (`obs`, `info`): the backbone's record's steps and turns before `turn`.

    Raises:
        RuntimeError: the restored observation differs from what the backbone saw there (the env's restore is
            not exact).
    """
    seen = episode.steps[turn].observation
    if str(obs) != seen:
        raise RuntimeError(
            f"explorer branch: restoring backbone {record.spec.index} of group {record.spec.group} before turn "
            f"{turn} gave a different observation than the backbone saw; the env's restore is not exact (check it "
            "with envkit.checker.check_snapshot_env)"
        )
    start = record.turns[turn].start
    lps = response.get("rollout_log_probs") or []
    return ForkStart(
        observation=str(obs), info=dict(info), start_observation=record.observation, start_info=record.info,
        steps=record.steps[:turn], turns=record.turns[:turn], tokens=tuple(response["observation_tokens"][:start]),
        logprobs=tuple(float(x) for x in lps[:start]),
    )  # fmt: skip


async def branch_group(
    executor: GroupExecutor, responses: list[dict], episodes: list[SeroEpisode | None], gen: GenerationContext
) -> list[dict]:
    """The group's responses with every fork slot replaced by a played fork (see the module docstring); `gen`'s
    engine is the rollout actor, each fork gets its own `SpecEngine` on it."""
    from envkit.trainers.openrlhf.rollout_actor import SpecEngine

    cfg = executor.config
    bcfg = cfg.branch_config()
    records = [RolloutRecord.from_dict(r[RESPONSE_KEY]) for r in responses]
    backbones = [i for i, r in enumerate(records) if not r.spec.fork]
    slots = [i for i, r in enumerate(records) if r.spec.fork]
    kept = {i: ep for i in backbones if (ep := episodes[i]) is not None}
    if len(kept) < len(backbones):
        raise RuntimeError("explorer branch: a backbone's episode was not kept (the executor ran without the explorer)")
    nll = [records[i].extra["branch"]["nll"] for i in backbones]
    points = admit(nll, unspent=sys.maxsize, branches=bcfg.branches, max_turns=cfg.max_turns, limit=bcfg.points)
    plan = plan_forks(points, len(slots), bcfg.branches)
    out = list(responses)

    async def play(slot: int, b: int, t: int, env: gym.Env[str, str]) -> None:
        i = backbones[b]
        ep, rec = kept[i], records[i]
        obs, info = await asyncio.to_thread(snapshot_env(env).restore, ep.steps[t].snapshot)
        restored = getattr(env, "last_restore_kind", "") or "native"
        start = fork_start(ep, rec, responses[i], t, obs, info)
        spec = records[slot].spec
        params = deepcopy(gen.sampling_params)
        if spec.temperature is not None:
            params.temperature = spec.temperature
        fork_gen = replace(gen, engine=SpecEngine(gen.engine, spec), sampling_params=params)
        row = await executor.play_episode(env, ep.task, responses[i]["prompt"], responses[i]["label"], fork_gen, start)
        new = RolloutRecord.from_dict(row[RESPONSE_KEY])
        tree = {"parent": rec.spec.index if t > 0 else -1, "fork": t, "source": rec.spec.index, "turn": t,
                "entropy": float(nll[b][t]), "restored": restored}  # fmt: skip
        row[RESPONSE_KEY] = replace(new, extra={**new.extra, "branch": tree}).to_dict()
        out[slot] = row

    jobs: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # backbone -> its forks, played in turn
    for slot, (b, t) in zip(slots, plan, strict=True):
        jobs[b].append((slot, b, t))
    scoped = instance_scoped(kept[backbones[0]].env)

    async def run(items: list[tuple[int, int, int]]) -> None:
        if scoped:  # the backbone's own env: one fork at a time
            for slot, b, t in items:
                await play(slot, b, t, kept[backbones[b]].env)
            return

        async def leased(slot: int, b: int, t: int) -> None:
            async with executor.lease(kept[backbones[b]].task) as env:
                await play(slot, b, t, env)

        await asyncio.gather(*(leased(*item) for item in items))

    await asyncio.gather(*(run(items) for items in jobs.values()))
    return out
