"""Shared fixtures of the trainer tests."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

#: The one SWE tool call the `file_writing_policy` makes: it writes a file, so every snapshot after it freezes a
#: new overlay layer (what an agent that edits code does on every turn).
WRITE_ACTION = '{"tool": "create", "path": "notes.txt", "file_text": "edited\\n"}'


@pytest.fixture()
def swe_sandbox() -> None:
    """Skip, with the reason, where the SWE env's sandbox cannot run."""
    if os.geteuid() != 0:
        pytest.skip("the SWE env's local backend needs root (overlayfs mounts + bubblewrap)")
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap missing: apt-get install bubblewrap")


@pytest.fixture(scope="session")
def file_writing_policy() -> tuple[Any, Any, str]:
    """(model, tokenizer, action): a real Qwen2 causal LM whose every answer is `action` (`WRITE_ACTION`), then EOS.

    The byte tokenizer of the local trainer gets `WRITE_ACTION` as one added token. The weights are set by hand:
    attention and MLP outputs are zero, so the last position's hidden state is its token's embedding; every
    token embeds along e0 except `WRITE_ACTION` (e1), and the untied output layer maps e0 to `WRITE_ACTION` and e1
    to EOS (a margin of ~57 nats). It runs through transformers and the trainer's own sampling like any model;
    only its policy is fixed, so a test can make an agent that edits files on every turn without training one.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from envkit.runtime.models import byte_tokenizer

    tok = byte_tokenizer()
    tok.add_tokens([WRITE_ACTION])
    act = tok.convert_tokens_to_ids(WRITE_ACTION)
    d = 32
    config = transformers.Qwen2Config(
        vocab_size=len(tok), hidden_size=d, intermediate_size=d, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    model = transformers.Qwen2ForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
        emb = model.get_input_embeddings().weight
        emb[:, 0] = 1.0
        emb[act, 0], emb[act, 1] = 0.0, 1.0
        head = model.get_output_embeddings().weight
        head[act, 0] = 10.0
        head[tok.eos_token_id, 1] = 10.0
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.eval()
    return model, tok, WRITE_ACTION
