"""XRPO in the local trainer, both forms: `XrpoDriver` (single-turn responses) and `AgentXrpoDriver` (episodes).

Both drive `envkit.trainers.explorers.xrpo.XrpoPlanner` with the run's budget (``prompts_per_step * group_size``,
exactly) and keep an ICL corpus (`envkit.trainers.explorers.icl.IclCorpus`, saved in checkpoints).

Single-turn (`XrpoDriver`): `XrpoPlanner` phases (one `generate` call per phase), all-fail prompts get ICL
demonstrations retrieved from the corpus (raw prompts: as ``prompt answer <eos>`` token runs; chat prompts:
``corpus.augment`` text), verified successes are added to the corpus, correct rollouts are sharpened with the
sampling log-probs recorded during generation (no extra forward pass).

Agent envs (`AgentXrpoDriver`) allocate whole episodes, as the OpenRLHF backend's
`envkit.trainers.openrlhf.xrpo_rounds` does:

1. `XrpoPlanner` phases: phase 1 plays ``n0`` episodes of every task, later phases hand out the rest of the step's
   budget (``prompts_per_step * group_size`` episodes, exactly) by t-interval priority on the episodes' success.
2. A task whose episodes all failed so far starts its later episodes from its first observation prefixed with
   the ``icl_k`` most similar solved tasks of the corpus (`envkit.trainers.explorers.icl.IclCorpus`: a solved task is
   its first observation and the shortest successful action sequence, one action per line). The loss sees that
   prompt (``icl_loss_prompt="augmented"``, docs/methods.md) or the plain one (``"clean"``).
3. After the advantages: with an episode-level estimator (``grpo``, ``rloo``, ...), successful episodes are
   sharpened with their mean action-token sampling log-prob (`envkit.trainers.explorers.xrpo.sharpen`); GiGPO /
   GraphGPO per-turn advantages are left as they are (as on the OpenRLHF backend). Successful episodes enter the
   corpus.

Each phase is one `envkit.trainers.local.multi_turn.play_specs` call on env instances of its own, so SERO can restore any
episode of the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from envkit.credit.advantages import ESTIMATORS  # the episode-level estimators
from envkit.trainers.explorers.xrpo import IclCorpus, XrpoConfig, XrpoPlanner, sharpen
from envkit.trainers.local.contracts import (
    AgentExplorer,
    Budget,
    EpisodeCredit,
    RolloutCredit,
    SingleTurnExplorer,
)
from envkit.trainers.local.multi_turn import AgentConfig, Episode, EpisodeSpec, play_specs
from envkit.trainers.local.prompt_encoding import encode_prompt
from envkit.trainers.local.single_turn import Rollout, generate_rows
from envkit.trainers.local.tasks import Problem, ProblemSource

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from envkit.trainers.local.config import TrainConfig

__all__ = ["AgentXrpoDriver", "XrpoDriver", "xrpo_corpus"]


def xrpo_corpus(cfg: XrpoConfig, run: TrainConfig, state: dict[str, Any] | None) -> IclCorpus:
    """Check `cfg` against the run's group size; the ICL corpus (from a checkpoint's `state`, or a new one)."""
    cfg.check_group(run.group_size)
    if state is not None:
        return IclCorpus.from_state_dict(state)
    return IclCorpus(k=cfg.icl_k, backend=cfg.icl_backend, model_path=cfg.icl_model_path)


class XrpoDriver(SingleTurnExplorer):
    """XRPO rollouts on single-turn tasks (see the module docstring)."""

    def __init__(
        self, cfg: XrpoConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, task: ProblemSource,
        run: TrainConfig, state: dict[str, Any] | None,
    ):  # fmt: skip
        self.cfg, self.corpus = cfg, xrpo_corpus(cfg, run, state)
        self.model, self.tok, self.task, self.run = model, tok, task, run

    def _icl_prompt(self, problem: Problem) -> list[int] | None:
        examples = self.corpus.retrieve(problem.prompt, exclude=problem.task_id)
        if not examples:
            return None
        if self.task.raw_prompts or not getattr(self.tok, "chat_template", None):
            demos = [(e.problem, e.solution) for e in examples]
            return encode_prompt(self.tok, problem.prompt, raw=True, demos=demos)
        text, _ = self.corpus.augment(problem.prompt, exclude=problem.task_id)
        return encode_prompt(self.tok, text, raw=False)

    def _collect(
        self, step: int, problems: Sequence[Problem], prompts: Sequence[list[int]], budget: Budget, *, seed: int
    ) -> list[Rollout]:
        temperature, max_new_tokens = self.run.temperature, self.run.max_new_tokens
        planner = XrpoPlanner(self.cfg, n_prompts=len(prompts), step=step, group_size=budget.group_size)
        out: list[Rollout] = []
        phase = 0
        augmented: dict[int, list[int] | None] = {}  # the corpus does not change during collection
        while (alloc := planner.next_phase()) is not None:
            seeded = planner.all_failed() if self.cfg.icl else np.zeros(len(prompts), dtype=bool)
            use = [list(p) for p in prompts]
            icl = np.zeros(len(prompts), dtype=bool)
            for g in np.flatnonzero(seeded & (alloc > 0)).tolist():  # retrieval only for prompts sampled now
                if g not in augmented:
                    augmented[g] = self._icl_prompt(problems[g])
                aug = augmented[g]
                if aug is not None:
                    use[g], icl[g] = aug, True
            rows = [(g, use[g]) for g in range(len(prompts)) for _ in range(int(alloc[g]))]
            new = generate_rows(
                self.model, self.tok, rows, [temperature] * len(rows), max_new_tokens=max_new_tokens,
                seed=seed * 7 + phase, return_logprobs=self.cfg.sharpen,
            )  # fmt: skip
            rewards = self.task.score([problems[r.group] for r in new], [r.text for r in new])
            per_prompt: list[list[float]] = [[] for _ in prompts]
            scored = []
            for r, reward in zip(new, rewards, strict=True):
                seeded_row = bool(icl[r.group])
                per_prompt[r.group].append(reward)
                # An ICL row sampled with the prefix is learned without it under icl_loss_prompt="clean".
                clean = seeded_row and self.cfg.icl_loss_prompt == "clean"
                loss_prompt = list(prompts[r.group]) if clean else r.prompt_ids
                scored.append(dataclasses.replace(r, reward=reward, icl=seeded_row, prompt_ids=loss_prompt))
            planner.observe(per_prompt)
            out += scored
            phase += 1
        self._stats = {**planner.stats(), "xrpo_rollout_counts": planner.counts.tolist()}  # JSONL only (a list)
        return out

    def postprocess(
        self, step: int, problems: Sequence[Problem], rollouts: Sequence[Rollout], advantages: Sequence[float]
    ) -> RolloutCredit:
        """Sharpening of correct rollouts (with their sampling log-probs), corpus growth, the ``xrpo_*`` metrics."""
        thr = self.cfg.success_threshold
        correct = np.array([r.reward > thr for r in rollouts])
        out = tuple(advantages)
        if self.cfg.sharpen:
            mean_lp = [float(np.mean(r.logprobs)) if r.logprobs else 0.0 for r in rollouts]
            adv = sharpen(
                list(advantages), correct, mean_lp, [r.group for r in rollouts],
                lambda_n=self.cfg.lambda_n, kappa=self.cfg.kappa,
            )  # fmt: skip
            out = tuple(adv.tolist())
        added = 0
        for r, ok in zip(rollouts, correct.tolist(), strict=True):
            if ok:
                p = problems[r.group]
                added += int(self.corpus.add(p.task_id, p.prompt, r.text.strip()))
        stats = {
            **self._stats,
            "xrpo_icl_share": float(np.mean([r.icl for r in rollouts])),
            "xrpo_icl_success_rate": float(np.mean([r.reward > thr for r in rollouts if r.icl]))
            if any(r.icl for r in rollouts)
            else 0.0,
            "xrpo_corpus_size": len(self.corpus),
            "xrpo_corpus_added": added,
        }
        return RolloutCredit(out, stats)

    def state_dict(self) -> dict[str, Any]:
        return self.corpus.state_dict()


class AgentXrpoDriver(AgentExplorer):
    """XRPO on an agent env: the ICL corpus and the per-step hooks (see the module docstring)."""

    def __init__(
        self, cfg: XrpoConfig, model: PreTrainedModel, tok: PreTrainedTokenizerBase, run: TrainConfig,
        state: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.cfg, self.corpus = cfg, xrpo_corpus(cfg, run, state)
        self.model, self.tok, self.run = model, tok, run
        self.agent: AgentConfig = run.agent
        self._stats: dict[str, Any] = {}

    def _collect(self, step: int, seeds: list[int], budget: Budget, *, seed: int) -> list[Episode]:
        """Play the step's episodes phase by phase; returns them grouped by task (phase order within a task)."""
        model, tokenizer, env_id, run = self.model, self.tok, self.run.task, self.run
        max_new_tokens, temperature, record = run.max_new_tokens, run.temperature, run.agent.sero
        planner = XrpoPlanner(self.cfg, n_prompts=len(seeds), step=step, group_size=budget.group_size)
        clean = self.cfg.icl_loss_prompt == "clean"  # ICL episodes train on the env's first observation
        episodes: list[Episode] = []
        first_obs: dict[int, str] = {}
        augmented: dict[int, str | None] = {}
        played = np.zeros(len(seeds), dtype=int)
        phase = 0
        while (alloc := planner.next_phase()) is not None:
            seeded = planner.all_failed() if self.cfg.icl else np.zeros(len(seeds), dtype=bool)
            specs = []
            for g in range(len(seeds)):
                text = None
                if seeded[g] and alloc[g] > 0 and g in first_obs:
                    if g not in augmented:
                        aug, used = self.corpus.augment(first_obs[g], exclude=str(seeds[g]))
                        augmented[g] = aug if used else None
                    text = augmented[g]
                specs += [
                    EpisodeSpec(g, int(played[g]) + k, int(seeds[g]), text, clean_loss_prompt=clean)
                    for k in range(int(alloc[g]))
                ]
                played[g] += int(alloc[g])
            new = play_specs(
                model, tokenizer, env_id, specs, self.agent, max_new_tokens=max_new_tokens, temperature=temperature,
                seed=seed * 7 + phase, record=record, env_offset=len(episodes), return_logprobs=self.cfg.sharpen,
            )  # fmt: skip
            for e in new:
                first_obs.setdefault(e.group, e.initial_observation)
            planner.observe([[float(e.success) for e in new if e.group == g] for g in range(len(seeds))])
            episodes += new
            phase += 1
        episodes.sort(key=lambda e: (e.group, e.index))
        self._stats = {**planner.stats(), "xrpo_rollout_counts": planner.counts.tolist()}
        return episodes

    def postprocess(self, episodes: list[Episode], turn_advantages: list[np.ndarray]) -> EpisodeCredit:
        """Sharpening (episode-level estimators), corpus growth and the step's ``xrpo_*`` metrics."""
        out = list(turn_advantages)
        success = np.array([e.success for e in episodes], dtype=bool)
        if self.cfg.sharpen and self.agent.estimator in ESTIMATORS and len(episodes):
            row = np.array([float(a[0]) if len(a) else 0.0 for a in turn_advantages])
            mean_lp = [float(np.mean(e.logprobs)) if e.logprobs else 0.0 for e in episodes]
            sharp = sharpen(row, success, mean_lp, [e.group for e in episodes], self.cfg.lambda_n, self.cfg.kappa)
            out = [np.full(len(a), sharp[i]) for i, a in enumerate(turn_advantages)]
        added = 0
        for e in episodes:
            if e.success and e.actions:
                added += int(self.corpus.add(str(e.seed), e.initial_observation, "\n".join(e.actions)))
        icl = [e.icl for e in episodes]
        stats = {
            **self._stats,
            "xrpo_icl_share": float(np.mean(icl)) if icl else 0.0,
            "xrpo_icl_success_rate": float(np.mean([e.success for e in episodes if e.icl])) if any(icl) else 0.0,
            "xrpo_corpus_size": len(self.corpus),
            "xrpo_corpus_added": added,
        }
        return EpisodeCredit(tuple(out), stats)

    def state_dict(self) -> dict[str, Any]:
        return self.corpus.state_dict()
