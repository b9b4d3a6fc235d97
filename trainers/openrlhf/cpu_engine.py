"""The vLLM-engine half of the CPU mode (``envkit-train openrlhf --cpu``): a worker extension for vLLM CPU engines.

vLLM resolves the worker extension (``worker_extension_cls``) in its engine-core process before it loads the
model, so importing this module there is where the engine-side replacements happen (one ``[envkit cpu-shim]``
line). Used only when `BackendConfig.cpu` is set (`envkit.trainers.openrlhf.rollout_actor.engine_kwargs`).

Replaced (engine side):

- ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`` -> `keep_unpacked_weights` for 2-D weights:
  vLLM CPU prepacks every linear weight after loading (oneDNN / SGL kernels) and, for linear layers, replaces
  ``layer.weight`` by an empty tensor, so a later ``load_weights`` fails (``'Parameter' object has no attribute
  'weight_loader'``) and, for ``lm_head`` (kept but computed from the packed copy), changes nothing. Here the
  weight stays in place and the layer computes ``torch.nn.functional.linear`` on it: an update takes effect
  (slower than the packed kernels; fine for the small models a CPU trains);
- ``WorkerWrap.init_process_group`` -> a stateless gloo group (`envkit.trainers.openrlhf.cpu_shim.gloo_group`),
  the other end of the trainer's;
- ``WorkerWrap.update_weight``: receives into a CPU tensor (OpenRLHF allocates on ``"cuda"``) over that group,
  then ``load_weights`` as OpenRLHF does.
"""

from __future__ import annotations

from typing import Any

from envkit.trainers.openrlhf.cpu_shim import gloo_group, log, stub_flash_attn

stub_flash_attn()  # the worker extension's base class imports openrlhf, which imports flash_attn

import torch  # noqa: E402
import vllm.model_executor.layers.utils as vllm_layer_utils  # noqa: E402

from envkit.trainers.openrlhf.rollout_actor import EnvkitWorkerWrap  # noqa: E402

_original_dispatch = vllm_layer_utils.dispatch_cpu_unquantized_gemm


def keep_unpacked_weights(layer: torch.nn.Module, remove_weight: bool) -> None:
    """vLLM CPU's GEMM dispatch for 2-D weights without prepacking (see the module doc); others unchanged."""
    weight = getattr(layer, "weight", None)
    if weight is None or weight.is_meta or weight.ndim != 2:
        _original_dispatch(layer, remove_weight)
        return
    setattr(layer, "cpu_linear", torch.nn.functional.linear)  # noqa: B010  (a plain attribute vLLM reads)


vllm_layer_utils.dispatch_cpu_unquantized_gemm = keep_unpacked_weights
log("vLLM engine side ACTIVE: linear weights kept unpacked (updatable), weight sync over gloo into CPU tensors")


class CpuWorkerWrap(EnvkitWorkerWrap):
    """envkit's worker extension with OpenRLHF's weight-sync receive side on CPU tensors over gloo."""

    def init_process_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str,
        backend: str = "gloo",
        use_ray: bool = False,
    ) -> None:
        if use_ray or backend != "gloo":
            raise RuntimeError(f"the CPU engines sync over a stateless gloo group, got backend={backend!r}")
        rank = torch.distributed.get_rank() + rank_offset
        self._model_update_with_ray = False
        self._model_update_group = gloo_group(master_address, master_port, rank, world_size)

    def update_weight(self, name: str, dtype: Any, shape: Any, empty_cache: bool = False) -> None:
        want = self.model_config.dtype  # type: ignore[attr-defined]
        if dtype != want:
            raise RuntimeError(
                f"weight {name}: actor sends {dtype}, the engine holds {want}; use --ds.param_dtype bf16"
            )
        weight = torch.empty(shape, dtype=dtype, device="cpu")
        self._model_update_group.broadcast(weight, src=0)
        self.model_runner.model.load_weights(weights=[(name, weight)])  # type: ignore[attr-defined]
