"""The samples-generator subclass: per-prompt rollout plans on OpenRLHF 0.11.2's ``SamplesGenerator``.

OpenRLHF sends every prompt to a vLLM rollout actor with ``generate_responses(num_samples=n)``: n identical
rollouts. `EnvkitSamplesGenerator` sends a list of `RolloutSpec`s instead (``generate_planned`` on envkit's rollout
actor), one per rollout, and the total budget stays ``batch x n``. The plan of a prompt is the run's explorer's
(`envkit.trainers.openrlhf.explorers`, built once here by `make_explorer`): ``none`` n plain rollouts, ``eden``
standard + noisy rollouts, ``branch`` backbones + fork slots; ``xrpo`` replaces the one dispatch by its phased
rounds (`Explorer.rounds`, `envkit.trainers.openrlhf.xrpo_rounds`).

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
from envkit.trainers.openrlhf.explorers.base import plain_specs
from envkit.trainers.openrlhf.explorers.registry import make_explorer
from envkit.trainers.openrlhf.rollout_records import INFO_KEY, RESPONSE_KEY, RolloutSpec


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
        self.explorer = make_explorer(config)  # chosen once: its plans and (XRPO) its phased rounds
        self.xrpo: Any = self.explorer.rounds()

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
        else:
            n = self.config.n_samples_per_prompt
            plans = [self.explorer.plan(self.new_group(), n, self.step, self.rng) for _ in prompts]
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
