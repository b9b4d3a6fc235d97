"""Checkpoints of the local trainer: model folder + optimizer, step and explorer state; resume from the latest.

Layout: ``<run_dir>/checkpoints/step_<N>/`` holds the model and tokenizer (``save_pretrained``) and the trainer
state (step, optimizer state, explorer state, torch RNG state, the config as a dict) in two files that cannot
run code when read: ``trainer_state.tensors`` (safetensors format: every tensor and numpy array; not named
``*.safetensors``, which is the model's) and ``trainer_state.json``
(the structure, with references to those tensors; tuples, non-string dict keys and arrays are tagged; values
of other types are stored as their ``str``). ``<run_dir>/checkpoints/latest`` names the newest complete one
(a ``step_<N>`` name, resolved inside ``checkpoints/``: a pointer elsewhere is refused); older ones beyond
`keep` are deleted. A checkpoint folder is also a plain Hugging Face model folder (``--init-from`` and
``ModelConfig.path`` load it).

Checkpoints of older versions (``trainer_state.pt``, a pickle) load only through ``torch.load(weights_only=True)``
(tensors and plain containers, no code); one that needs more is refused with how to proceed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from envkit.errors import EnvkitError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

STATE_JSON, STATE_TENSORS, LEGACY_STATE = "trainer_state.json", "trainer_state.tensors", "trainer_state.pt"
_STEP_NAME = re.compile(r"step_\d{6,}")


class CheckpointError(EnvkitError, ValueError):
    """A checkpoint is missing, malformed, or points outside its run's ``checkpoints/`` folder."""


def _flatten(x: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """`x` as JSON data, its tensors and arrays moved into `tensors` (see the module docstring)."""
    if isinstance(x, torch.Tensor):
        key = f"t{len(tensors)}"
        tensors[key] = x.detach().cpu().contiguous().clone()
        return {"__tensor__": key}
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError("a checkpoint cannot hold numpy arrays of Python objects; store lists instead")
        key = f"t{len(tensors)}"
        tensors[key] = torch.from_numpy(np.ascontiguousarray(x).copy())
        return {"__ndarray__": key}
    if isinstance(x, dict):
        if all(type(k) is str and not k.startswith("__") for k in x):
            return {k: _flatten(v, tensors) for k, v in x.items()}
        return {"__dict__": [[_flatten(k, tensors), _flatten(v, tensors)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__tuple__": [_flatten(v, tensors) for v in x]}
    if isinstance(x, list):
        return [_flatten(v, tensors) for v in x]
    if x is None or type(x) in (bool, int, float, str):
        return x
    if isinstance(x, np.generic):
        return x.item()
    return str(x)


def _unflatten(x: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(x, list):
        return [_unflatten(v, tensors) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) == 1:
        ((tag, v),) = x.items()
        if tag in ("__tensor__", "__ndarray__"):
            if v not in tensors:
                raise CheckpointError(f"the trainer state refers to a tensor {v!r} that {STATE_TENSORS} lacks")
            return tensors[v] if tag == "__tensor__" else tensors[v].numpy()
        if tag == "__tuple__":
            return tuple(_unflatten(i, tensors) for i in v)
        if tag == "__dict__":
            return {_hashable(_unflatten(k, tensors)): _unflatten(w, tensors) for k, w in v}
    return {k: _unflatten(v, tensors) for k, v in x.items()}


def _hashable(k: Any) -> Any:
    if isinstance(k, (list, dict, torch.Tensor, np.ndarray)):
        raise CheckpointError("the trainer state has a dict key that is not a plain value")
    return k


def checkpoint_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(
    run_dir: Path | str,
    step: int,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    state: dict[str, Any],
    keep: int = 1,
) -> Path:
    """Write a checkpoint atomically (temporary folder, then rename), update ``latest``, keep the newest `keep`."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1 (the newest checkpoint is what --resume loads), got {keep}")
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_state(tmp, {**state, "step": step, "torch_rng": torch.get_rng_state()})
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    (root / "latest").write_text(final.name)
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[: max(0, len(done) - keep)]:
        shutil.rmtree(old)
    return final


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """Write `state` as ``trainer_state.safetensors`` + ``trainer_state.json`` into `folder`."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    data = _flatten(state, tensors)
    save_file(tensors, str(folder / STATE_TENSORS))
    (folder / STATE_JSON).write_text(json.dumps(data))


def _complete(p: Path) -> bool:
    return (p / STATE_JSON).is_file() or (p / LEGACY_STATE).is_file()


def _inside(root: Path, p: Path) -> bool:
    """Whether `p` (symlinks resolved) is a direct child of `root` (resolved)."""
    return p.resolve().parent == root.resolve()


def latest_checkpoint(run_dir: Path | str) -> Path | None:
    """The newest complete checkpoint of a run, or None.

    Raises:
        CheckpointError: ``latest`` does not name a ``step_<N>`` folder inside ``checkpoints/`` (a planted
            pointer, or a symlink leading out of the run).
    """
    root = checkpoint_dir(run_dir)
    pointer = root / "latest"
    if pointer.exists():
        if pointer.is_symlink() or not pointer.is_file():
            raise CheckpointError(f"{pointer} must be a plain file naming a step_<N> folder; delete it to resume")
        name = pointer.read_text()[:256].strip()
        if not _STEP_NAME.fullmatch(name) or not _inside(root, root / name):
            raise CheckpointError(
                f"{pointer} names {name!r}, which is not a step_<N> folder inside {root}; delete it (resume then "
                "takes the newest step_<N> folder there)"
            )
        if _complete(root / name):
            return root / name
    done = sorted(p for p in root.glob("step_*") if _STEP_NAME.fullmatch(p.name) and _inside(root, p) and _complete(p))
    return done[-1] if done else None


def load_state(ckpt: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint (optimizer, step, explorer state, RNG); reading it runs no code.

    Raises:
        CheckpointError: the state is missing or malformed, or (an old ``trainer_state.pt``) needs more than
            tensors and plain containers to load.
    """
    from safetensors.torch import load_file

    ckpt = Path(ckpt)
    if (ckpt / STATE_JSON).is_file():
        try:
            tensors = load_file(str(ckpt / STATE_TENSORS)) if (ckpt / STATE_TENSORS).is_file() else {}
            state = _unflatten(json.loads((ckpt / STATE_JSON).read_text()), tensors)
        except (OSError, ValueError, TypeError) as exc:
            raise CheckpointError(f"cannot read the trainer state of {ckpt}: {exc}") from exc
    elif (ckpt / LEGACY_STATE).is_file():
        try:
            state = torch.load(ckpt / LEGACY_STATE, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch's restricted unpickler refused a global (or the file is damaged)
            raise CheckpointError(
                f"{ckpt / LEGACY_STATE} is an old-format checkpoint that needs more than tensors and plain "
                f"containers to load ({type(exc).__name__}: {str(exc)[:300]}); envkit never unpickles code from a "
                "checkpoint. Resume from its weights instead: --init-from " + str(ckpt)
            ) from exc
    else:
        raise CheckpointError(f"{ckpt} has no trainer state ({STATE_JSON} or {LEGACY_STATE})")
    if not isinstance(state, dict) or "step" not in state:
        raise CheckpointError(f"the trainer state of {ckpt} is not a dict with a step")
    return state


def load_weights(model: PreTrainedModel, ckpt: Path) -> None:
    """Load a checkpoint's weights into an already built model of the same architecture."""
    from safetensors.torch import load_file

    files = sorted(ckpt.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors weights in {ckpt}")
    sd: dict[str, Any] = {}
    for f in files:
        sd.update(load_file(str(f)))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # Tied output embeddings are saved once; anything else missing is an error.
    bad = [k for k in missing if not k.endswith("lm_head.weight")]
    if bad or unexpected:
        raise ValueError(f"checkpoint {ckpt} does not match the model: missing {bad[:5]}, unexpected {unexpected[:5]}")
