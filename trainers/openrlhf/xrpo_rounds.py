"""XRPO's phased rollouts on OpenRLHF: one training step's prompts, budget ``batch x n`` kept exactly.

`XrpoRounds.run` drives `envkit.trainers.explorers.xrpo.XrpoPlanner` with envkit's samples generator: phase 1 sends
every prompt n0 planned rollouts; each later phase hands out its share of the budget by XRPO's priority
(``planner.next_phase``), and prompts whose rollouts all failed so far are sampled with an ICL prefix of the most
similar solved problems (`envkit.trainers.explorers.xrpo.icl_prompts`; the prefix is part of the trained prompt). After
the step, verified successes (the shortest per problem) enter the corpus. Groups keep one id per prompt across
phases, so the experience maker normalises over each prompt's variable-size group.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import ray

from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord, RolloutSpec


def _record(response: dict) -> RolloutRecord | None:
    rec = response.get(RESPONSE_KEY)
    return RolloutRecord.from_dict(rec) if rec else None


class XrpoRounds:
    """Per-trainer XRPO state (the ICL corpus) and the phased dispatch of one step."""

    def __init__(self, config: BackendConfig) -> None:
        from envkit.trainers.explorers.xrpo import IclCorpus

        self.config = config
        self.xcfg = config.xrpo_config()
        self.corpus = IclCorpus(k=self.xcfg.icl_k, backend=self.xcfg.icl_backend, model_path=self.xcfg.icl_model_path)
        self.last_stats: dict[str, float] = {}

    def _success(self, response: dict) -> bool:
        rec = _record(response)
        return (
            bool(rec.success) if rec is not None else float(response.get("reward") or 0.0) > self.xcfg.success_threshold
        )

    def run(
        self,
        gen: Any,
        prompts: list[str],
        labels: list[str],
        images: list,
        step: int,
        fetch: Any = ray.get,
        **generate_kwargs: Any,
    ) -> list[dict]:
        """Generate the step's rollouts phase by phase; returns the responses, grouped per prompt.

        Args:
            gen: The samples generator (``new_group``, ``dispatch_plans``).
            prompts: The step's prompts.
            labels: Their labels (task ids).
            images: Their images (or an empty list).
            step: Training step (exploration bonus).
            fetch: Resolves what ``dispatch_plans`` returned (``ray.get``).
            **generate_kwargs: Passed to ``dispatch_plans``.
        """
        from envkit.trainers.explorers.xrpo import XrpoPlanner, icl_prompts

        n_prompts = len(prompts)
        planner = XrpoPlanner(self.xcfg, n_prompts, step, group_size=self.config.n_samples_per_prompt)
        groups = [gen.new_group() for _ in prompts]
        ids = [str(label) if label not in (None, "") else prompt for prompt, label in zip(prompts, labels)]
        per_prompt: list[list[dict]] = [[] for _ in prompts]
        queries = list(prompts)
        phase, icl_rollouts = 0, 0
        while (alloc := planner.next_phase()) is not None:
            phase += 1
            prefixes = [""] * n_prompts
            if self.xcfg.icl and len(self.corpus):
                texts, used = icl_prompts(prompts, ids, planner.all_failed(), self.corpus, queries=queries)
                prefixes = [t[: len(t) - len(p)] if u else "" for t, p, u in zip(texts, prompts, used)]
            which = [p for p in range(n_prompts) if alloc[p] > 0]
            plans = [
                [
                    RolloutSpec(groups[p], index=len(per_prompt[p]) + j, phase=phase, prefix=prefixes[p])
                    for j in range(int(alloc[p]))
                ]
                for p in which
            ]
            icl_rollouts += sum(len(plan) for plan, p in zip(plans, which) if prefixes[p])
            refs = gen.dispatch_plans(
                [prompts[p] for p in which],
                [labels[p] for p in which],
                plans,
                images=[images[p] for p in which] if images else None,
                **generate_kwargs,
            )
            observed: list[list[float]] = [[] for _ in prompts]
            for p, responses in zip(which, fetch(refs)):
                per_prompt[p].extend(responses)
                observed[p] = [float(r.get("reward") or 0.0) for r in responses]
                rec = _record(responses[0]) if responses else None
                if rec is not None and rec.steps:
                    queries[p] = rec.steps[0].observation  # retrieve by the problem itself, not the template
            planner.observe(observed)
        self._grow_corpus(ids, queries, per_prompt)
        total = sum(len(r) for r in per_prompt)
        self.last_stats = {**planner.stats(), "xrpo_icl_share": icl_rollouts / max(total, 1)}
        return [r for rs in per_prompt for r in rs]

    def _grow_corpus(self, ids: list[str], queries: list[str], per_prompt: list[list[dict]]) -> None:
        for pid, query, responses in zip(ids, queries, per_prompt):
            for response in responses:
                rec = _record(response)
                if rec is None or not self._success(response):
                    continue
                self.corpus.add(pid, query, "\n".join(s.action for s in rec.steps))

    @staticmethod
    def group_sizes(responses: list[dict]) -> np.ndarray:
        """Rollouts per group in a step's responses (for checks and logs)."""
        groups = [RolloutRecord.from_dict(r[RESPONSE_KEY]).spec.group for r in responses]
        return np.unique(groups, return_counts=True)[1]
