#!/usr/bin/env bash
# OpenRLHF backend (trainers/openrlhf) on a CPU machine, for its CPU tests.
# 'pip install openrlhf==0.11.2' fails here: it requires flash-attn 2.8.3 (source-only, needs CUDA) and vllm
# (CUDA wheels). So: openrlhf with --no-deps, plus the packages its modules import at load time. The tests
# import-stub only vllm and flash_attn (tests/trainers/openrlhf/conftest.py). torch stays the CPU 2.13.0 wheel.
# Note: the openrlhf wheel installs a top-level 'tests' package into site-packages; envkit's pytest runs with
# --import-mode=importlib and no tests/__init__.py, so it never imports that package (checked below).
set -euo pipefail
want_ok() {
  python - <<'PY'
import importlib.metadata as md, sys
pins = {"openrlhf": "0.11.2", "deepspeed": "0.19.6", "ray": "2.55.0", "transformers": "5.15.0", "torch": "2.13.0"}
need = ["peft", "accelerate", "datasets", "torchdata", "pylatexenc", "einops", "optree", "aiohttp", "jsonlines"]
try:
    ok = all(md.version(k).split("+")[0] == v for k, v in pins.items()) and all(md.version(k) for k in need)
except md.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}
if ! want_ok; then
  python -m pip install -q --no-deps "openrlhf==0.11.2"
  # deepspeed 0.19.6 is an sdist: it builds on a CPU (no ops are compiled ahead of time).
  python -m pip install -q "torch==2.13.0" "deepspeed==0.19.6" "ray==2.55.0" "transformers==5.15.0" \
    peft accelerate datasets torchdata pylatexenc einops optree aiohttp jsonlines
fi
# envkit's tests still collect with openrlhf's stray top-level 'tests' package installed.
python -m pytest --collect-only -q tests/trainers/openrlhf >/dev/null
