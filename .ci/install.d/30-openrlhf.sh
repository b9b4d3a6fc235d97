#!/usr/bin/env bash
# OpenRLHF backend (trainers/openrlhf) on a CPU machine, for its CPU tests. 'pip install openrlhf==0.11.2'
# fails here: it requires flash-attn 2.8.3 (source-only, needs CUDA) and vllm (CUDA wheels). So: openrlhf with
# --no-deps, plus the packages its modules import at load time, all at constraints.txt's versions (deepspeed
# 0.19.6 is an sdist that builds on a CPU; ray 2.55.0; transformers 5.15.0 is OpenRLHF's pin). The tests
# import-stub only vllm and flash_attn (tests/trainers/openrlhf/conftest.py). On a GPU machine use
# pip install -c constraints.txt -e '.[openrlhf]' instead.
# The openrlhf wheel installs a top-level 'tests' package; envkit's pytest runs with --import-mode=importlib and
# no tests/__init__.py, so it never imports that package (checked below).
source "$(dirname "$0")/lib.sh"
if ! have_modules openrlhf deepspeed ray peft torchdata pylatexenc einops optree aiohttp jsonlines; then
  pip_install --no-deps "openrlhf"
  pip_install wheel "torch" "deepspeed" "ray" "transformers" peft accelerate datasets torchdata pylatexenc \
    einops optree aiohttp jsonlines
fi
"$PY" - <<'PY'
import importlib.metadata as md

pins = {k: md.version(k) for k in ("openrlhf", "deepspeed", "ray", "transformers", "torch")}
print("openrlhf:", pins)
PY
cd "$REPO" && "$PY" -m pytest --collect-only -q tests/trainers/openrlhf >/dev/null
