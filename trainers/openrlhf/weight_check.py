"""Checks that a weight broadcast really reached the vLLM engines: a checksum per tensor on both sides.

Silent corruption is the main risk of a weight sync: OpenRLHF's ``PyNcclCommunicator`` is disabled without CUDA
and ``broadcast`` returns early, so a run "completes" while the engines load uninitialised memory; vLLM CPU
prepacks linear weights after loading, so an update can change nothing. After every broadcast
(`EnvkitPPOTrainer.broadcast_to_vllm`) the actor's tensors and the engines' live copies are checksummed in the
synced dtype and compared name by name; any difference stops the run (`WeightSyncError`).

The checksum of a tensor is two integers over its raw bits (``int16`` for bf16/fp16, ``int32`` for fp32):
their sum and a position-weighted sum (weights ``1 + i mod 8191``), so a swapped, zeroed or NaN-filled value
changes it. It runs on the tensor's device in chunks.

Engine side (`engine_tensor`): a Hugging Face name is found in the vLLM model as itself, or as a slice of a
fused parameter named by the model's ``packed_modules_mapping`` (``q_proj`` -> rows of ``qkv_proj``,
``gate_proj`` -> rows of ``gate_up_proj``, sliced by the layer's ``output_sizes``); a padded vocabulary is cut to
the actor's rows. Tensor parallelism > 1 is not checked (the shards differ); the engine then raises.

Example:
    >>> import torch
    >>> t = torch.arange(6, dtype=torch.bfloat16)
    >>> checksum(t) == checksum(t.clone()), checksum(t) == checksum(t.flip(0))
    (True, False)
"""

from __future__ import annotations

from typing import Any

import torch

_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHUNK = 1 << 24


class WeightSyncError(RuntimeError):
    """The engines' weights differ from the actor's after a broadcast."""


def checksum(t: torch.Tensor) -> tuple[int, int]:
    """(sum, position-weighted sum) of the raw bits of ``t`` (exact integers; see the module doc)."""
    flat = t.detach().contiguous().reshape(-1)
    bits = flat.view(_BITS[flat.element_size()])
    total = weighted = 0
    for start in range(0, bits.numel(), _CHUNK):
        part = bits[start : start + _CHUNK].to(torch.int64)
        pos = (torch.arange(start, start + part.numel(), device=part.device, dtype=torch.int64) % 8191) + 1
        total += int(part.sum())
        weighted += int((part * pos).sum())
    return total, weighted


def engine_tensor(model: Any, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The engine's live tensor holding the actor's ``name`` (shape ``shape``); see the module doc.

    Raises:
        KeyError: the name is not found in the engine's model.
    """
    params = dict(model.named_parameters())
    if name in params:
        return _cut(params[name], shape, name)
    for fused, parts in (getattr(model, "packed_modules_mapping", None) or {}).items():
        for i, part in enumerate(parts):
            token = f".{part}."
            if token not in f".{name}":
                continue
            fused_name = f".{name}".replace(token, f".{fused}.", 1)[1:]
            if fused_name not in params:
                continue
            layer = model.get_submodule(fused_name.rsplit(".", 1)[0])
            sizes = list(getattr(layer, "output_sizes", []))
            if len(sizes) != len(parts):
                raise KeyError(f"{name}: {fused_name} has output sizes {sizes} for {parts}")
            return params[fused_name].narrow(0, sum(sizes[:i]), sizes[i])
    raise KeyError(name)


def _cut(t: torch.Tensor, shape: tuple[int, ...], name: str) -> torch.Tensor:
    if tuple(t.shape) == tuple(shape):
        return t
    if t.dim() == len(shape) and tuple(t.shape[1:]) == tuple(shape[1:]) and t.shape[0] > shape[0]:
        return t.narrow(0, 0, shape[0])  # a vocabulary padded by the engine
    raise KeyError(f"{name}: engine shape {tuple(t.shape)} vs actor shape {tuple(shape)}")


def engine_checksums(model: Any, specs: dict[str, tuple[str, list[int]]], tp_size: int) -> dict[str, Any]:
    """``{name: [sum, weighted] | "missing: why"}`` of the engine's live tensors for the actor's ``{name: (dtype,
    shape)}``, each in the actor's dtype."""
    if tp_size != 1:
        raise WeightSyncError(
            f"weight verification reads whole tensors; this engine has tensor_parallel_size {tp_size}. Use "
            "--vllm.tensor_parallel_size 1 or pass --no-verify-weights (at your own risk)"
        )
    out: dict[str, Any] = {}
    for name, (dtype, shape) in specs.items():
        try:
            t = engine_tensor(model, name, tuple(shape))
        except KeyError as exc:
            out[name] = f"missing: {exc}"
            continue
        out[name] = list(checksum(t.to(getattr(torch, dtype))))
    return out


def actor_checksums(model: torch.nn.Module, zero3: bool = False) -> dict[str, tuple[str, list[int], list[int]]]:
    """``{name: (dtype, shape, [sum, weighted])}`` of every parameter of the actor's module (gathered under ZeRO-3;
    then every rank must call it)."""
    import deepspeed

    out = {}
    for name, p in model.named_parameters():
        with deepspeed.zero.GatheredParameters([p], enabled=zero3):
            shape = list(getattr(p, "ds_shape", p.shape)) if zero3 else list(p.shape)
            out[name] = (str(p.dtype).removeprefix("torch."), shape, list(checksum(p.data)))
    return out


def compare(actor: dict[str, tuple[str, list[int], list[int]]], engine: dict[str, Any]) -> list[str]:
    """Names whose engine checksum differs from (or is missing for) the actor's, with the reason."""
    bad = []
    for name, (_, _, want) in actor.items():
        got = engine.get(name, "missing: not reported")
        if isinstance(got, str):
            bad.append(f"{name} ({got})")
        elif list(got) != list(want):
            bad.append(f"{name} (engine {list(got)} != actor {list(want)})")
    return bad


def changed(before: dict[str, tuple[str, list[int], list[int]]], after: dict[str, Any]) -> int:
    """How many tensors' checksums differ between two `actor_checksums` results."""
    return sum(1 for name, v in after.items() if name not in before or list(before[name][2]) != list(v[2]))
