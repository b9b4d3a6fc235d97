"""Checkpoints of the local trainer: model folder + optimizer, step and explorer state; resume from the latest.

Layout: ``<run_dir>/checkpoints/step_<N>/`` holds the model and tokenizer (``save_pretrained``) and
``trainer_state.pt`` (step, optimizer state, explorer state, torch RNG state, the config as a dict).
``<run_dir>/checkpoints/latest`` names the newest complete one; older ones beyond `keep` are deleted.
A checkpoint folder is also a plain Hugging Face model folder (``--init-from`` and ``ModelConfig.path`` load it).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch


def checkpoint_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(
    run_dir: Path | str, step: int, model: Any, tokenizer: Any, state: dict[str, Any], keep: int = 1
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
    torch.save({**state, "step": step, "torch_rng": torch.get_rng_state()}, tmp / "trainer_state.pt")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    (root / "latest").write_text(final.name)
    done = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in done[: max(0, len(done) - keep)]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(run_dir: Path | str) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    root = checkpoint_dir(run_dir)
    pointer = root / "latest"
    if pointer.exists() and (root / pointer.read_text().strip() / "trainer_state.pt").exists():
        return root / pointer.read_text().strip()
    done = sorted(p for p in root.glob("step_*") if (p / "trainer_state.pt").exists())
    return done[-1] if done else None


def load_state(ckpt: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint (optimizer, step, explorer state, RNG)."""
    return torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=False)


def load_weights(model: Any, ckpt: Path) -> None:
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
