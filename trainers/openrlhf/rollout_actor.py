"""The vLLM rollout-actor subclass: per-rollout plans and EDEN's noisy rollouts from prompt embeddings.

`EnvkitRolloutActor` subclasses OpenRLHF 0.11.2's ``RolloutRayActor.__ray_actor_class__`` (the class under its
``@ray.remote``) and is wrapped again with `ray.remote` by `remote_rollout_actor`:

- the run's explorer sets its engine options (`engine_kwargs`; EDEN: ``enable_prompt_embeds=True``, vLLM >= 0.11,
  V1 engine);
- ``generate_planned(specs=...)`` runs one agent-executor episode per `RolloutSpec` (temperature, XRPO prefix)
  and tags each response with its record;
- a noisy spec's FIRST generation goes through prompt embeddings: the prompt's rows plus ONE extra row
  ``e~ = e_b + rho * ||e_b|| * eps / sqrt(d)`` (`envkit.trainers.explorers.eden.perturb`) where ``e_b`` is the anchor
  token's row read from the engine's live weights (cached per weight version: every weight update bumps it);
  the executor still records the CLEAN prompt tokens, so the update never sees the extra position;
- `EnvkitWorkerWrap` (the engines' worker extension) adds ``envkit_embedding_rows`` to read embedding rows and
  ``envkit_load_weights`` to load named tensors sent through the RPC itself (`EnvkitRolloutActor.load_weights`: a
  weight sync that needs no NCCL group or CUDA IPC, for small models and CPU engines; OpenRLHF's own
  ``update_weight`` / ``update_weight_cuda_ipc`` stay the GPU path, and all three bump the weight version).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from copy import deepcopy
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import ray
import torch
from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
from openrlhf.trainer.ray.vllm_worker_wrap import WorkerWrap

from envkit.trainers.openrlhf.config import BackendConfig
from envkit.trainers.openrlhf.executor_contract import GenerationContext, TokenEngine
from envkit.trainers.openrlhf.explorers.base import Explorer
from envkit.trainers.openrlhf.explorers.registry import make_explorer
from envkit.trainers.openrlhf.rollout_records import RESPONSE_KEY, RolloutRecord, RolloutSpec

if TYPE_CHECKING:
    from openrlhf.utils.agent import AgentExecutorBase
    from transformers import PreTrainedTokenizerBase
    from vllm import RequestOutput, SamplingParams

WORKER_EXTENSION = "envkit.trainers.openrlhf.rollout_actor.EnvkitWorkerWrap"
#: The CPU mode's worker extension (`envkit.trainers.openrlhf.cpu_engine`; only with ``--cpu``).
CPU_WORKER_EXTENSION = "envkit.trainers.openrlhf.cpu_engine.CpuWorkerWrap"


def embedding_rows(model: Any, token_ids: list[int]) -> torch.Tensor:
    """(L, d) input-embedding rows of ``token_ids`` from a vLLM or transformers model, on the CPU.

    vLLM >= 0.11 models expose ``embed_input_ids(input_ids)`` (0.29 has no ``get_input_embeddings``: found by the
    real-engine test), older vLLM models ``get_input_embeddings(input_ids)``; transformers models
    ``get_input_embeddings()`` returning the embedding module.
    """
    fn = getattr(model, "embed_input_ids", None) or model.get_input_embeddings
    device = next(model.parameters()).device
    ids = torch.tensor(token_ids, dtype=torch.long, device=device)
    takes_ids = len(inspect.signature(fn).parameters) >= 1
    with torch.no_grad():
        rows = fn(ids) if takes_ids else fn()(ids)
    return rows.detach().to("cpu")


class EnvkitWorkerWrap(WorkerWrap):
    """OpenRLHF's vLLM worker extension plus an embedding-row reader for EDEN."""

    def envkit_embedding_rows(self, token_ids: list[int]) -> torch.Tensor:
        """(L, d) embedding rows of ``token_ids`` from this worker's live model (tensor-parallel safe)."""
        return embedding_rows(self.model_runner.model, token_ids)  # type: ignore[attr-defined]

    def envkit_weight_checksums(self, specs: dict[str, tuple[str, list[int]]]) -> dict[str, Any]:
        """Checksums of this worker's live copy of the actor's tensors ``{name: (dtype, shape)}``
        (`envkit.trainers.openrlhf.weight_check.engine_checksums`)."""
        from envkit.trainers.openrlhf.weight_check import engine_checksums

        tp = int(getattr(getattr(self, "parallel_config", None), "tensor_parallel_size", 1) or 1)
        return engine_checksums(self.model_runner.model, specs, tp)  # type: ignore[attr-defined]

    def envkit_load_weights(self, packed: list[tuple[str, str, list[int], bytes]]) -> int:
        """Load tensors packed by `pack_weights` (Hugging Face parameter names) into this worker's live model.

        The tensors travel inside the RPC as raw bytes (no process group; vLLM's RPC serialiser does not carry
        tensors nested in lists): meant for small models and CPU engines. Returns the number loaded.
        """
        model = self.model_runner.model  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        model.load_weights(weights=[(name, t.to(device)) for name, t in unpack_weights(packed)])
        return len(packed)


def pack_weights(weights: list[tuple[str, torch.Tensor]]) -> list[tuple[str, str, list[int], bytes]]:
    """``(name, tensor)`` pairs as ``(name, dtype name, shape, raw bytes)``: plain values every RPC carries."""
    out = []
    for name, t in weights:
        t = t.detach().to("cpu").contiguous()
        out.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), t.view(torch.uint8).numpy().tobytes()))
    return out


def unpack_weights(packed: list[tuple[str, str, list[int], bytes]]) -> list[tuple[str, torch.Tensor]]:
    """The inverse of `pack_weights`."""
    out = []
    for name, dtype, shape, raw in packed:
        if not raw:  # an empty tensor: frombuffer refuses empty buffers
            out.append((name, torch.empty(shape, dtype=getattr(torch, dtype))))
            continue
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        out.append((name, flat.view(getattr(torch, dtype)).reshape(shape)))
    return out


def engine_kwargs(kwargs: dict[str, Any], config: BackendConfig, explorer: Explorer | None = None) -> dict[str, Any]:
    """The engine kwargs envkit changes: its worker extension (the CPU mode's with ``--cpu``; it reads embedding
    rows for EDEN and checksums for the weight check), then the run's explorer's (EDEN: prompt embeddings;
    None: built from ``config``)."""
    out = dict(kwargs)
    out["worker_extension_cls"] = CPU_WORKER_EXTENSION if config.cpu else WORKER_EXTENSION
    return (explorer if explorer is not None else make_explorer(config)).engine_kwargs(out)


@runtime_checkable
class NoisyGenerator(Protocol):
    """A rollout actor that generates EDEN's noisy first turn (`EnvkitRolloutActor.generate_noisy`)."""

    async def generate_noisy(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams, spec: RolloutSpec
    ) -> RequestOutput: ...


class SpecEngine:
    """What the agent executor sees as ``llm_engine`` for one planned rollout.

    The first ``generate`` of a noisy spec goes through prompt embeddings with EDEN's extra row; every later
    turn (and every clean spec) is a plain token-prompt generation on the actor.
    """

    def __init__(self, actor: TokenEngine, spec: RolloutSpec) -> None:
        self.actor = actor
        self.spec = spec
        self.calls = 0

    async def generate(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams, multi_modal_data: object = None
    ) -> RequestOutput:
        self.calls += 1
        if self.spec.noisy and self.calls == 1:
            if not isinstance(self.actor, NoisyGenerator):
                raise TypeError(
                    f"rollout {self.spec.index} of group {self.spec.group} is noisy (EDEN) but "
                    f"{type(self.actor).__name__} has no generate_noisy: EDEN runs on envkit's rollout actor "
                    "(EnvkitRolloutActor, --explorer eden)"
                )
            return await self.actor.generate_noisy(prompt_token_ids, sampling_params, self.spec)
        return await self.actor.generate(prompt_token_ids, sampling_params, multi_modal_data=multi_modal_data)

    async def prompt_logprobs(self, prompt_token_ids: list[int]) -> list[float]:
        return await self.actor.prompt_logprobs(prompt_token_ids)


class EnvkitRolloutActor(RolloutRayActor.__ray_actor_class__):  # type: ignore[name-defined,misc]
    """OpenRLHF's rollout actor with per-rollout plans and EDEN's prompt-embedding generation."""

    async def __init__(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[misc]  # Ray's async actor init
        self.envkit_config = BackendConfig.from_env()
        self.envkit_explorer = make_explorer(self.envkit_config)
        self._weight_version = 0
        self._anchor_rows: dict[tuple[int, int], torch.Tensor] = {}
        self._prompt_rows: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}
        await super().__init__(*args, **engine_kwargs(kwargs, self.envkit_config, self.envkit_explorer))

    # ----- weight versions (the anchor rows come from the live weights) -------------------------------------
    def _bump(self) -> None:
        self._weight_version += 1
        self._anchor_rows.clear()
        self._prompt_rows.clear()

    async def update_weight(self, *args: Any, **kwargs: Any) -> Any:
        self._bump()
        return await super().update_weight(*args, **kwargs)

    async def update_weight_cuda_ipc(self, *args: Any, **kwargs: Any) -> Any:
        self._bump()
        return await super().update_weight_cuda_ipc(*args, **kwargs)

    async def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        """Load named tensors into every worker's model through the RPC (`EnvkitWorkerWrap.envkit_load_weights`),
        then drop the prefix cache (its KV entries came from the old weights). Bumps the weight version."""
        self._bump()
        done = await self.llm.collective_rpc("envkit_load_weights", args=(pack_weights(weights),))
        await self.llm.reset_prefix_cache()
        return int(done[0] if isinstance(done, list) else done)

    async def weight_checksums(self, specs: dict[str, tuple[str, list[int]]]) -> dict[str, Any]:
        """Rank 0's checksums of the live weights (`EnvkitWorkerWrap.envkit_weight_checksums`) and the weight
        version (``{"tensors": {...}, "version": n}``)."""
        got = await self.llm.collective_rpc("envkit_weight_checksums", args=(specs,))
        return {"tensors": got[0] if isinstance(got, list) else got, "version": self._weight_version}

    # ----- EDEN --------------------------------------------------------------------------------------------
    async def embedding_rows(self, token_ids: list[int]) -> torch.Tensor:
        """(L, d) rows from the engine's live weights (rank 0's copy)."""
        rows = await self.llm.collective_rpc("envkit_embedding_rows", args=(list(token_ids),))
        return rows[0] if isinstance(rows, list) else rows

    async def anchor_row(self, token_id: int) -> torch.Tensor:
        """The anchor's embedding row, cached per weight version."""
        key = (self._weight_version, int(token_id))
        if key not in self._anchor_rows:
            self._anchor_rows[key] = (await self.embedding_rows([int(token_id)]))[0]
        return self._anchor_rows[key]

    async def prompt_rows(self, prompt_token_ids: list[int]) -> torch.Tensor:
        """The prompt's embedding rows, cached per weight version (a group's noisy rollouts share the prompt)."""
        cache = self._prompt_rows
        key = (self._weight_version, tuple(prompt_token_ids))
        if key not in cache:
            if len(cache) >= 64 or any(k[0] != self._weight_version for k in cache):
                cache.clear()
            cache[key] = await self.embedding_rows(prompt_token_ids)
        return cache[key]

    async def noisy_prompt_embeds(self, prompt_token_ids: list[int], spec: RolloutSpec) -> torch.Tensor:
        """(L + 1, d) prompt embeddings: the prompt's rows and EDEN's perturbed anchor row."""
        from envkit.trainers.explorers.eden import perturb

        rows = await self.prompt_rows(prompt_token_ids)
        anchor = await self.anchor_row(spec.anchor)
        noisy = perturb(anchor.float().numpy(), 1, spec.rho, np.random.default_rng(spec.seed))[0]
        extra = torch.as_tensor(noisy, dtype=rows.dtype).unsqueeze(0)
        return torch.cat([rows, extra], dim=0)

    async def generate_noisy(
        self, prompt_token_ids: list[int], sampling_params: SamplingParams, spec: RolloutSpec
    ) -> RequestOutput:
        """Generate from the prompt embeddings with EDEN's extra row (one output, like `generate`)."""
        from vllm.utils import random_uuid

        embeds = await self.noisy_prompt_embeds(prompt_token_ids, spec)
        params = deepcopy(sampling_params)
        if params.max_tokens:
            params.max_tokens = max(1, params.max_tokens - 1)  # the extra position takes one slot of the context
        final = None
        async for out in self.llm.generate({"prompt_embeds": embeds}, params, request_id=random_uuid()):
            final = out
        if final is None:
            raise RuntimeError(f"vLLM gave no output for EDEN's noisy prompt (rollout {spec.index} of {spec.group})")
        return final

    async def prompt_logprobs(self, prompt_token_ids: list[int]) -> list[float]:
        """Log-prob of every prompt token after the first under the live policy (SERO reachability)."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        out = await self.generate(prompt_token_ids, params)
        values = []
        for tok, lp in zip(prompt_token_ids[1:], (out.prompt_logprobs or [None])[1:]):
            values.append(float(lp[tok].logprob) if lp and tok in lp else 0.0)
        return values

    # ----- plans -------------------------------------------------------------------------------------------
    async def generate_planned(
        self,
        prompt: str,
        label: str,
        sampling_params: SamplingParams,
        max_length: int,
        hf_tokenizer: PreTrainedTokenizerBase,
        specs: list[dict],
        images: object = None,
    ) -> list[dict]:
        """Run one executor episode per spec; each response carries its record under ``"envkit"``."""
        return await run_planned(
            self.executor, self, prompt, label, sampling_params, max_length, hf_tokenizer, specs, images
        )


def with_prefix(prompt: str, prefix: str) -> str:
    """The prompt with XRPO's ICL prefix: right before ``{obs}`` (inside a chat template's user turn), else first."""
    if not prefix:
        return prompt
    return prompt.replace("{obs}", prefix + "{obs}", 1) if "{obs}" in prompt else prefix + prompt


async def run_planned(
    executor: AgentExecutorBase,
    actor: TokenEngine,
    prompt: str,
    label: str,
    sampling_params: SamplingParams,
    max_length: int,
    hf_tokenizer: PreTrainedTokenizerBase,
    specs: list[dict],
    images: object = None,
) -> list[dict]:
    """`EnvkitRolloutActor.generate_planned` without the actor (the testable core).

    Each spec runs ``executor.execute`` with a `SpecEngine`, its temperature and its prefix (`with_prefix`). Responses keep the
    spec order. An executor that is not envkit's still works: its response gets a record with the spec only.
    After the group, an executor with ``finish_group`` (envkit's) may replace failed rollouts by SERO oracle rows,
    or fill branching's fork slots (the number of responses never changes).
    """
    parsed = [RolloutSpec.from_dict(s) for s in specs]

    async def one(spec: RolloutSpec) -> dict:
        params = deepcopy(sampling_params)
        if spec.temperature is not None:
            params.temperature = spec.temperature
        response: dict = await executor.execute(
            prompt=with_prefix(prompt, spec.prefix),
            label=label,
            sampling_params=params,
            max_length=max_length,
            hf_tokenizer=hf_tokenizer,
            llm_engine=SpecEngine(actor, spec),
            images=images,
        )
        rec = response.get(RESPONSE_KEY)
        record = RolloutRecord.from_dict(rec) if rec else RolloutRecord(spec=spec)
        response[RESPONSE_KEY] = dataclasses.replace(record, spec=spec).to_dict()
        return response

    responses = list(await asyncio.gather(*(one(s) for s in parsed)))
    finish = getattr(executor, "finish_group", None)
    if finish is not None:  # the group's context, built once: the actor generates and scores its extra rows
        responses = await finish(responses, GenerationContext(actor, hf_tokenizer, max_length, sampling_params))
    return responses


def remote_rollout_actor() -> Any:
    """The Ray actor class to put in place of OpenRLHF's ``RolloutRayActor``."""
    return ray.remote(EnvkitRolloutActor)
