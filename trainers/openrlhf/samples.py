"""The samples-generator subclass: per-prompt rollout plans on OpenRLHF 0.11.2's ``SamplesGenerator``.

OpenRLHF sends every prompt to a vLLM rollout actor with ``generate_responses(num_samples=n)``: n identical
rollouts. `EnvkitSamplesGenerator` sends a list of `RolloutSpec`s instead (``generate_planned`` on envkit's rollout
actor), one per rollout, and the total budget stays ``batch x n``:

- ``none``: n plain rollouts per prompt, each tagged with its group;
- ``eden``: K_r standard rollouts + K_n noisy ones sharing ONE anchor per prompt (drawn uniformly from the bank),
  each with its own noise seed, at the cosine-warmed temperature ``tau_n(step)``;
- ``xrpo``: phase 1 gives every prompt n0 rollouts, later phases hand out the rest of the budget by XRPO's
  priority, and prompts whose rollouts all failed get an ICL prefix of solved problems (`envkit.trainers.explorers.xrpo`);
- ``branch``: ``backbones`` rollouts from reset and ``points x branches`` fork slots that the rollout actor fills
  from restored high-entropy backbone states (`envkit.trainers.openrlhf.branch_rows`).

Evaluation (``n_samples_per_prompt`` in the generate kwargs) always uses plain rollouts.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import numpy as np
import ray
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
from vllm import SamplingParams

from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.rollout_records import INFO_KEY, RESPONSE_KEY, RolloutSpec


def plain_specs(group: str, n: int) -> list[RolloutSpec]:
    """n plain rollouts of one group."""
    return [RolloutSpec(group=group, index=i) for i in range(n)]


def branch_specs(group: str, n: int, config: BackendConfig) -> list[RolloutSpec]:
    """Branching rollouts' plan for one prompt: the backbones, then ``points x branches`` fork slots (filled from
    restored backbone states by the group's branch step, `envkit.trainers.openrlhf.branch_rows`); n in all."""
    backbones = config.branch_config().resolve(n, config.max_turns)[0]
    return [RolloutSpec(group=group, index=i, fork=i >= backbones) for i in range(n)]


def eden_specs(group: str, n: int, config: BackendConfig, step: int, rng: np.random.Generator) -> list[RolloutSpec]:
    """EDEN's plan for one prompt: K_r standard + K_n noisy rollouts (docs/methods.md section 5).

    The noisy rollouts share one anchor drawn uniformly from the bank (``fixed_anchor``: the configured one;
    ``random_anchor_per_rollout``: one per rollout), each with its own noise seed.
    """
    from envkit.trainers.explorers.eden import noisy_temperature

    ecfg = config.eden_config()
    bank = config.eden_anchors
    k_n = ecfg.n_noisy
    tau_n = noisy_temperature(step, ecfg.tau_n_start, ecfg.tau_n_end, ecfg.warmup_steps)
    if ecfg.ablation == "fixed_anchor":
        anchors = [bank[ecfg.fixed_anchor_index]] * k_n
    elif ecfg.ablation == "random_anchor_per_rollout":
        anchors = [bank[int(i)] for i in rng.integers(0, len(bank), size=k_n)]
    else:
        anchors = [bank[int(rng.integers(0, len(bank)))]] * k_n
    seeds = rng.integers(0, 2**31 - 1, size=k_n)
    specs = [RolloutSpec(group=group, index=i, temperature=ecfg.tau_r) for i in range(n - k_n)]
    for j in range(k_n):
        specs.append(
            RolloutSpec(
                group=group,
                index=n - k_n + j,
                temperature=tau_n,
                noisy=True,
                anchor=int(anchors[j]),
                rho=float(ecfg.effective_rho),
                seed=int(seeds[j]),
            )
        )
    return specs


class EnvkitSamplesGenerator(SamplesGenerator):
    """``SamplesGenerator`` that dispatches per-rollout plans (see the module docstring).

    Args:
        config: The backend config.
        **kwargs: ``SamplesGenerator``'s keyword arguments.
    """

    def __init__(self, *, config: BackendConfig, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config
        self.step = 0
        self.rng = np.random.default_rng(config.seed)
        self._groups = itertools.count()
        self.xrpo: Any = None
        if config.explorer == "xrpo":
            from envkit.trainers.openrlhf.xrpo_rounds import XrpoRounds

            self.xrpo = XrpoRounds(config)

    # ----- OpenRLHF hooks -----------------------------------------------------------------------------------
    def generate_samples(self, **generate_kwargs: Any) -> Any:
        out = super().generate_samples(**generate_kwargs)
        self.step += 1
        return out

    def _generate_vllm(
        self, dataloader_iter: Any, num_prompts: int, dynamic_filtering: Any, **generate_kwargs: Any
    ) -> Any:
        if self.xrpo is None or "n_samples_per_prompt" in generate_kwargs:
            return super()._generate_vllm(dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)
        prompts, labels, images, exhausted = _collect_prompt_batch(dataloader_iter, num_prompts)
        if not prompts:
            return [], 0, True
        responses = self.xrpo.run(self, prompts, labels, images, self.step, **generate_kwargs)
        experiences = [self._process_response_into_experience(r, **generate_kwargs) for r in responses]
        return experiences, len(prompts), exhausted

    def _dispatch_prompts_to_vllm(
        self, prompts: list[str], labels: list[str], *, images: list | None = None, **generate_kwargs: Any
    ) -> list:
        if "n_samples_per_prompt" in generate_kwargs:  # evaluation: unchanged sampling
            n = int(generate_kwargs["n_samples_per_prompt"])
            plans = [plain_specs(self.new_group(), n) for _ in prompts]
        elif self.config.explorer == "eden":
            n = self.config.n_samples_per_prompt
            plans = [eden_specs(self.new_group(), n, self.config, self.step, self.rng) for _ in prompts]
        elif self.config.explorer == "branch":
            n = self.config.n_samples_per_prompt
            plans = [branch_specs(self.new_group(), n, self.config) for _ in prompts]
        else:
            n = self.config.n_samples_per_prompt
            plans = [plain_specs(self.new_group(), n) for _ in prompts]
        return self.dispatch_plans(prompts, labels, plans, images=images, **generate_kwargs)

    def _process_response_into_experience(self, response: dict, **generate_kwargs: Any) -> Experience:
        experience = super()._process_response_into_experience(response, **generate_kwargs)
        experience.info[INFO_KEY] = [response.get(RESPONSE_KEY) or {}]
        return experience

    # ----- envkit ---------------------------------------------------------------------------------------------
    def new_group(self) -> str:
        """A fresh group id (unique within this trainer)."""
        return f"g{next(self._groups)}"

    def sampling_params(self, **generate_kwargs: Any) -> SamplingParams:
        """The run's sampling parameters (as OpenRLHF builds them)."""
        return SamplingParams(
            temperature=generate_kwargs.get("temperature", 1.0),
            top_p=generate_kwargs.get("top_p", 1.0),
            top_k=generate_kwargs.get("top_k", -1),
            max_tokens=generate_kwargs.get("max_new_tokens"),
            min_tokens=generate_kwargs.get("min_new_tokens", 1),
            skip_special_tokens=generate_kwargs.get("skip_special_tokens", False),
            logprobs=1 if self.args.algo.advantage.is_correction_level != "off" else None,
        )

    def dispatch_plans(
        self,
        prompts: list[str],
        labels: list[str],
        plans: list[list[RolloutSpec]],
        *,
        images: list | None = None,
        **generate_kwargs: Any,
    ) -> list:
        """Send each prompt's plan to the least-loaded rollout actor; returns one Ray ref per prompt."""
        sampling_params = self.sampling_params(**generate_kwargs)
        truncate_length = generate_kwargs.get("max_len", 2048)
        pending = ray.get([engine.get_num_unfinished_requests.remote() for engine in self.vllm_engines])
        heap = [(count, idx) for idx, count in enumerate(pending)]
        heapq.heapify(heap)
        images = images if images is not None else [None] * len(prompts)
        refs = []
        for prompt, label, img, specs in zip(prompts, labels, images, plans):
            load, idx = heapq.heappop(heap)
            heapq.heappush(heap, (load + len(specs), idx))
            refs.append(
                self.vllm_engines[idx].generate_planned.remote(
                    prompt=prompt,
                    label=label,
                    sampling_params=sampling_params,
                    max_length=truncate_length,
                    hf_tokenizer=self.tokenizer,
                    specs=[s.to_dict() for s in specs],
                    images=img,
                )
            )
        return refs
