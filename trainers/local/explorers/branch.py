"""Branching rollouts on agent envs for the local trainer (``--explorer branch``; docs/methods.md section 8).

Per step and task (planning and budget: `envkit.trainers.explorers.branch`; credit: `envkit.credit.branching`):

1. ``backbones`` episodes are played with a snapshot before every step (`play_specs` with ``record=True``);
2. one no-grad forward pass per backbone gives the policy's entropy at every decision: the mean, over the action's
   tokens, of the next-token entropy at the sampling temperature (`decision_entropies`);
3. rounds: `admit` picks the highest-entropy decisions that fit the unspent env-step budget; each point's
   snapshot is restored natively K times (`fork`: the restored observation must equal the one the backbone saw,
   else it raises): into fresh env instances, or, where snapshots are native only in the instance that took them
   (ALFWorld), in the backbone's own env, one branch per env at a time; each branch keeps the backbone's token ids up to that turn (its row's
   prompt: the shared prefix is trained once, on the backbone's row) and the policy samples its own action there
   and finishes the episode (`play_specs(started=...)`); unused reservations are refunded before the next round;
4. every snapshot is discarded in the env that took it (`envkit.lifetime.discard_many`) before `collect` returns;
5. `postprocess`: per task, ``estimator_weight * (the estimator's turn advantage) + loo_weight * (leave-one-out
   sibling advantage)``, the tree's leave-one-out values normalised as ``agent.adv.norm`` says
   (`envkit.trainers.explorers.branch.branch_credit`, the OpenRLHF backend's too, over `branch_nodes`).

`branch_config(base, ...)` turns any multi-turn `TrainConfig` into a branching one (a script's arm in one line);
`AgentBranchDriver.set_budget` changes the env-step budget between steps (matching another run step by step).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from envkit.lifetime import discard_many, instance_scoped
from envkit.recorder import EpisodeRecorder
from envkit.snapshot import snapshot_env
from envkit.trainers.explorers.branch import BranchConfig, BranchNode, admit, branch_credit, worst_cost
from envkit.trainers.local.contracts import AgentExplorer, Budget, EpisodeCredit
from envkit.trainers.local.generation import batch_sequences
from envkit.trainers.local.multi_turn import (
    LOST_ENV_ERRORS,
    AgentConfig,
    Episode,
    EpisodeSpec,
    lost_episode,
    play_specs,
    shared_envs,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = ["AgentBranchDriver", "branch_config", "branch_nodes", "decision_entropies", "fork"]


def branch_config(base: Any, **branch: Any) -> Any:
    """`base` (a multi-turn `TrainConfig`) with ``explorer="branch"`` and `BranchConfig(**branch)`."""
    return dataclasses.replace(base, explorer="branch", branch=BranchConfig(**branch))


@torch.no_grad()
def decision_entropies(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, episodes: list[Episode], temperature: float
) -> list[np.ndarray]:
    """Per episode, the policy's entropy (nats) at each decision: the mean over the action's tokens of the
    entropy of softmax(logits / temperature) at that token. One forward pass per episode that computes logits
    only at the action tokens' positions (``logits_to_keep``), so a long context with a large vocabulary does not
    need a [L, V] logits tensor."""
    from envkit.trainers.losses import token_entropy

    device = next(model.parameters()).device
    out = []
    for e in episodes:
        response = e.context[len(e.prompt_ids) :]
        ids, attn, _ = batch_sequences([e.prompt_ids], [response], tokenizer.pad_token_id, device, [e.flags])
        # logits at position p predict token p + 1: response token j is predicted at len(prompt) + j - 1
        own = [
            (j, turn) for j, (turn, flag) in enumerate(zip(e.turn_of_token, e.flags, strict=True)) if flag and turn >= 0
        ]
        keep = torch.tensor([len(e.prompt_ids) + j - 1 for j, _ in own], dtype=torch.long, device=device)
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits[0].float()
        ent = token_entropy(logits / temperature).tolist()
        per_turn = np.zeros(len(e.actions))
        count = np.zeros(len(e.actions))
        for (_, turn), h in zip(own, ent, strict=True):
            per_turn[turn] += h
            count[turn] += 1
        out.append(per_turn / np.maximum(count, 1))
    return out


def fork(backbone: Episode, turn: int, env: gym.Env[str, str], index: int) -> Episode:
    """A new episode in `env`, restored natively to `backbone`'s state before `turn`, with its prefix.

    Raises:
        ValueError: the backbone has no snapshot before `turn` (it was played without ``record=True``, or its
            env has no snapshots).
        RuntimeError: the restored observation differs from the one the backbone saw there.
    """
    if turn >= len(backbone.steps) or backbone.steps[turn].snapshot is None:
        raise ValueError(
            f"fork: backbone {backbone.group}/{backbone.index} has no snapshot before turn {turn}; play it with "
            "record=True in a snapshot-capable env (envkit.lifetime, metadata['snapshot'])"
        )
    obs, _ = snapshot_env(env).restore(backbone.steps[turn].snapshot)
    if str(obs) != backbone.steps[turn].observation:
        raise RuntimeError(
            f"fork: restoring backbone {backbone.group}/{backbone.index} before turn {turn} gave a different "
            "observation than the backbone saw; the env's restore is not exact (check it with "
            "envkit.checker.check_snapshot_env)"
        )
    start = backbone.action_start(turn)
    state_info = backbone.infos[turn]  # the info of the state it starts from (its exact state key)
    rec = EpisodeRecorder(backbone.steps[turn].observation, state_info, snapshots=False)  # its own steps from here
    return Episode(
        backbone.group, index, env, backbone.context[:start], backbone.context[:start], [], [], rec, backbone, turn,
        seed=backbone.seed,
    )  # fmt: skip


def branch_nodes(episodes: Sequence[Episode], links: Mapping[tuple[int, int], tuple[int, int]]) -> list[BranchNode]:
    """Per episode, its node of its group's tree (`envkit.trainers.explorers.branch.branch_credit`'s input).

    Args:
        episodes: Backbones and forks (any order).
        links: ``(group, index) -> (parent index or -1, fork turn)`` of every episode (a backbone and a fork at
            turn 0: ``(-1, 0)``).
    """
    return [BranchNode(e.group, e.index, *links[(e.group, e.index)], success=e.success) for e in episodes]


class AgentBranchDriver(AgentExplorer):
    """Branching-rollout hooks of the local trainer (see the module docstring). Its budget is env steps per task
    (`BranchConfig.resolve`), so the number of episodes per task varies (``fixed_total = False``)."""

    fixed_total = False

    def __init__(
        self, cfg: BranchConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, run: TrainConfig,
        state: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        if run.agent.sero:
            raise ValueError("explorer 'branch' is the policy-only control to SERO: set agent.sero=False")
        if run.agent.max_turns is None:
            raise ValueError("explorer 'branch': agent.max_turns is None; resolve it with agent.for_env(env_id) first")
        self.cfg, self.model, self.tok, self.run = cfg, model, tok, run
        self.agent: AgentConfig = run.agent
        self.horizon: int = run.agent.max_turns
        self.backbones, self.budget = cfg.resolve(run.group_size, self.horizon)
        self._links: dict[tuple[int, int], tuple[int, int]] = {}  # (group, index) -> (parent index or -1, fork)
        self._stats: dict[str, Any] = {}

    def set_budget(self, budget_steps: int) -> None:
        """Change the env-step budget per task from the next step on (a script matching another run's env steps
        step by step: the SERO miniature's compute-matched arms).

        Raises:
            ValueError: a budget below 1.
        """
        cfg = dataclasses.replace(self.cfg, budget_steps=int(budget_steps))
        self.backbones, self.budget = cfg.resolve(self.run.group_size, self.horizon)
        self.cfg = cfg

    def _collect(self, step: int, seeds: list[int], budget: Budget, *, seed: int) -> list[Episode]:
        """Backbones, then rounds of branches within the budget; every snapshot discarded on return."""
        model, tokenizer, env_id = self.model, self.tok, self.run.task
        kw: dict[str, Any] = dict(max_new_tokens=self.run.max_new_tokens, temperature=self.run.temperature)
        specs = [EpisodeSpec(g, j, int(s)) for g, s in enumerate(seeds) for j in range(self.backbones)]
        backbones = play_specs(model, tokenizer, env_id, specs, self.agent, seed=seed, record=True, **kw)
        try:
            return self._branch(model, tokenizer, env_id, backbones, seed, kw)
        finally:
            discarded = sum(discard_many(b.env, b.snapshots()) for b in backbones)
            self._stats["branch_snapshots_discarded"] = discarded

    def _branch(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        env_id: str,
        backbones: list[Episode],
        seed: int,
        kw: dict[str, Any],
    ) -> list[Episode]:
        cfg, horizon, temperature = self.cfg, self.horizon, float(kw["temperature"])
        by_group: dict[int, list[Episode]] = defaultdict(list)
        live = [b for b in backbones if not b.lost]  # a lost backbone (its env died) is dropped, and never forked
        for b in live:
            by_group[b.group].append(b)
        entropy = dict(zip(map(id, live), decision_entropies(model, tokenizer, live, temperature), strict=True))
        unspent = {g: self.budget - sum(len(b.actions) for b in bs) for g, bs in by_group.items()}
        start = dict(unspent)  # negative: the backbones alone overran a budget below their worst case
        taken: dict[int, set[tuple[int, int]]] = defaultdict(set)
        next_index = {g: len(bs) for g, bs in by_group.items()}
        self._links = {(b.group, b.index): (-1, 0) for b in backbones}
        branches: list[Episode] = []
        chosen_entropy: list[float] = []
        restores: dict[str, int] = defaultdict(int)  # by kind: "native", or "replay" where the env fell back
        rounds = 0
        fork_turn: dict[tuple[int, int], int] = {}
        while True:
            pending: list[tuple[Episode, int, int]] = []  # (backbone, turn, index of the new branch)
            reserved: dict[int, int] = defaultdict(int)
            for g, bs in by_group.items():
                lengths = [len(b.actions) for b in bs] if cfg.reserve == "backbone" else None
                pts = admit(
                    [entropy[id(b)] for b in bs], unspent=unspent[g], branches=cfg.branches, max_turns=horizon,
                    limit=cfg.points - len(taken[g]), taken=taken[g], lengths=lengths,
                )  # fmt: skip
                for b_local, t in pts:
                    taken[g].add((b_local, t))
                    cost = worst_cost(t, cfg.branches, horizon)
                    reserved[g] += cost if lengths is None else cfg.branches * (lengths[b_local] - t)
                    chosen_entropy.append(float(entropy[id(bs[b_local])][t]))
                    for _ in range(cfg.branches):
                        # A fork at turn 0 shares nothing: it is one more root option (envkit.credit.branching).
                        self._links[(g, next_index[g])] = (bs[b_local].index, t) if t > 0 else (-1, 0)
                        fork_turn[(g, next_index[g])] = t
                        pending.append((bs[b_local], t, next_index[g]))
                        next_index[g] += 1
            if not pending:
                break
            for g, r in reserved.items():
                unspent[g] -= r
            played = self._play_forks(model, tokenizer, env_id, pending, len(backbones) + len(branches), restores,
                                      seed * 7919 + 1000 * rounds, kw)  # fmt: skip
            for g, r in reserved.items():  # refund what the branches did not use
                unspent[g] += r - sum(len(e.actions) - fork_turn[(g, e.index)] for e in played if e.group == g)
            branches += played
            rounds += 1
        worst = cfg.reserve == "worst"
        if worst and any(unspent[g] < min(0, start[g]) for g in unspent):  # worst cases reserved: cannot happen
            raise RuntimeError(f"branch: branches spent more than the env-step budget {self.budget} left ({unspent})")
        # Env steps taken: every backbone step, and each branch's own steps (from its fork turn on).
        steps = sum(len(b.actions) for b in backbones)
        steps += sum(len(e.actions) - fork_turn[(e.group, e.index)] for e in branches)
        self._stats = {
            "branch_points": sum(len(v) for v in taken.values()),
            "branch_entropy_at_points": float(np.mean(chosen_entropy)) if chosen_entropy else 0.0,
            "branch_entropy_all": float(np.mean(np.concatenate([entropy[id(b)] for b in backbones]))),
            "branches": len(branches),
            "branches_finished": sum(e.done and not e.context_truncated and not e.lost for e in branches),
            "branch_success_rate": float(np.mean([e.success for e in branches])) if branches else 0.0,
            "backbone_success_rate": float(np.mean([b.success for b in backbones])),
            "branch_rounds": rounds,
            "branch_native_restores": restores["native"],
            "branch_replay_restores": restores["replay"],
            "branch_env_steps": steps,
            "branch_budget_steps": self.budget * len(by_group),
            "branch_budget_overrun": sum(max(0, -u) for u in unspent.values()),
        }
        return sorted([*backbones, *branches], key=lambda e: (e.group, e.index))

    def _play_forks(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, env_id: str, pending: list[tuple[Episode, int, int]], offset: int,
        restores: dict[str, int], seed: int, kw: dict[str, Any],
    ) -> list[Episode]:  # fmt: skip
        """Restore and finish every pending fork. Where snapshots restore natively only in the instance that took
        them (``SnapshotCapability.scope == "instance"``: ALFWorld), each fork runs in its backbone's own env,
        one per env at a time (waves); elsewhere all run at once in fresh env instances of the pool."""
        scoped = instance_scoped(pending[0][0].env)
        played: list[Episode] = []
        wave = 0
        while pending:
            if scoped:
                busy: set[int] = set()
                now: list[tuple[Episode, int, int]] = []
                later: list[tuple[Episode, int, int]] = []
                for item in pending:
                    (later if id(item[0].env) in busy else now).append(item)
                    busy.add(id(item[0].env))
                envs = [b.env for b, _, _ in now]
            else:
                now, later = pending, []
                envs = shared_envs(env_id, offset + len(now), self.agent.fleet)[offset:]
                offset += len(now)
            kids = []
            for (b, t, index), env in zip(now, envs, strict=True):
                try:
                    kids.append(fork(b, t, env, index))
                except LOST_ENV_ERRORS as exc:  # the snapshot's fleet actor died: this branch is lost, not the step
                    kids.append(lost_episode(b.group, index, env, b.seed, exc, parent=b, fork_turn=t))
                    continue
                restores[getattr(env, "last_restore_kind", "") or "native"] += 1
            specs = [EpisodeSpec(e.group, e.index, int(e.seed or 0)) for e in kids]
            play_specs(model, tokenizer, env_id, specs, self.agent, seed=seed + wave + 1, started=kids, **kw)
            played += kids
            pending, wave = later, wave + 1
        return played

    def postprocess(self, episodes: list[Episode], turn_advantages: list[np.ndarray]) -> EpisodeCredit:
        """Estimator advantages plus the tree's leave-one-out sibling advantages (`branch_credit`, shared with
        the OpenRLHF backend)."""
        out, stats = branch_credit(branch_nodes(episodes, self._links), turn_advantages, self.cfg, self.agent.adv)
        return EpisodeCredit(tuple(out), {**self._stats, **stats})

    def state_dict(self) -> dict[str, Any]:
        return {}
