#!/usr/bin/env bash
# Device checks for the lent GPU machine (one H200, Python 3.12, torch 2.11 CUDA 13, transformers 5.17, NO vllm,
# ray, deepspeed or openrlhf, no network, <= 64 MiB carried). What scripts/gpu_smoke.sh (vllm + openrlhf) cannot
# run there, this can: the local trainer's CUDA path (GRPO, EDEN, XRPO, GraphGPO + SERO on Toy/WebShop) with a
# random ~0.5B Qwen2-shaped model, scripts/bench_explorers.py at 16 x 8 with 256-token responses, and EDEN's
# generate(inputs_embeds=...) on CUDA. Results: ONE JSON file, $OUT/device_check.json (partial on a timeout).
#
#   bash scripts/device_wheels.sh                       # here, with a registry: .device_wheels/ (~40 MB)
#   run: bash scripts/device_check.sh   (carry .device_wheels; timeout_s 540)
#   bash scripts/device_check.sh --tiny --device cpu    # this script itself on a CPU, minutes
#
# Budget: the whole run stays under 8 minutes on an H200 (each check is also bounded; see device_check.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./device_check_out}"
mkdir -p "$OUT"
WHEELS="${WHEELS:-.device_wheels}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
PY="${PYTHON:-python3}"
"$PY" -c "import torch, transformers, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), 'transformers', transformers.__version__)" | tee "$OUT/env.txt" \
  || { echo "device_check: torch/transformers do not import" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$OUT/env.txt"
# envkit's light dependencies: installed from carried wheels when missing (no network on the device machine).
missing=$("$PY" - <<'PY'
import importlib.util
mods = {"gymnasium": "gymnasium", "rapidfuzz": "rapidfuzz", "bm25s": "bm25s", "Stemmer": "PyStemmer",
        "cloudpickle": "cloudpickle", "farama_notifications": "farama-notifications", "scipy": "scipy"}
print(" ".join(dist for mod, dist in mods.items() if importlib.util.find_spec(mod) is None))
PY
)
if [ -n "$missing" ]; then
  echo "device_check: installing from $WHEELS: $missing"
  [ -d "$WHEELS" ] || { echo "device_check: $WHEELS missing; run scripts/device_wheels.sh and carry it" >&2; exit 2; }
  "$PY" -m pip install -q --no-deps --no-index --find-links "$WHEELS" --target "$OUT/.site" $missing 2>&1 | tail -3
  export PYTHONPATH="$PYTHONPATH:$OUT/.site"
fi
timeout "${DEVICE_CHECK_TIMEOUT:-470}" "$PY" scripts/device_check.py --out "$OUT/device_check.json" "$@"
rc=$?
# OpenRLHF end to end on CUDA (scripts/openrlhf_e2e.py --device cuda, the GRPO arm with its resume): only where
# vllm, openrlhf, deepspeed and ray import (not on the lent machine as described above; then it says so).
# EXPECTED (written before any GPU run): rc 0, >= 2 "Global step" lines, every envkit_weight_sync.jsonl line
# "engine_equal": true (see scripts/gpu_smoke.sh, step 2b).
if "$PY" -c "import vllm, openrlhf, deepspeed, ray" >/dev/null 2>&1; then
  timeout "${E2E_TIMEOUT:-900}" "$PY" scripts/openrlhf_e2e.py --device cuda --arm grpo_math --out "$OUT/e2e" \
    --timeout 420 > "$OUT/e2e.jsonl" 2> "$OUT/e2e.err"
  echo "openrlhf_e2e (cuda) rc=$?; $(tail -1 "$OUT/e2e.err")"
else
  echo "openrlhf_e2e (cuda): not run, vllm/openrlhf/deepspeed/ray do not import here" | tee "$OUT/e2e.err"
fi
rm -rf "$OUT/.site"
echo "device_check rc=$rc; results in $OUT/device_check.json"
exit $rc
