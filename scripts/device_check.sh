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
#
# SERO at paper scale (issue 32; NOT run by the default check, never run yet: no device was lent to that work):
#   bash scripts/device_check.sh --sero-headline alfworld   # or: webshop; SERO_MODEL=<folder> required
# runs, per headline, GraphGPO and GraphGPO + SERO (the paper's weighting, reach.first one, the default) with the
# local trainer on CUDA, seeds 0 1 2, from the same instruct model (0.5B-1.5B, e.g. Qwen2.5-1.5B-Instruct; its
# folder must already be on the device: it is far over the 64 MiB carry limit), real envs (ALFWORLD_DATA with
# alfworld + textworld installed; WEBSHOP_DATA with bm25s / rapidfuzz / PyStemmer). Outputs per run:
# $OUT/sero_headline/<env>/<arm>_seed<s>/metrics.jsonl (success_rate, sero_* counters, grad_norm per step) and
# curves.png; the comparison is the seed-paired final success (and for ALFWorld the unseen split, which this
# trainer does not evaluate yet: read train success only). Expected cost (estimated, not measured): ALFWorld 16
# games x 8 episodes x <= 50 turns per step with transformers generate, ~1-2 min a step on one H200 (TextWorld
# steps on the CPU dominate), 150 steps x 3 seeds x 2 arms ~ 15-30 GPU-hours; WebShop (horizon 15) ~20-40 s a
# step, ~5-10 GPU-hours. Neither fits a 15-minute device slot: each command is sized for a lent multi-hour
# machine, and --steps 5 makes a 10-minute smoke of the same path.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--sero-headline" ]; then
  env_name="${2:?--sero-headline needs alfworld or webshop}"
  case "$env_name" in
    alfworld) task=envkit/ALFWorld-v0; groups=16; turns=50 ;;
    webshop) task=envkit/WebShop-v0; groups=16; turns=15 ;;
    *) echo "device_check: --sero-headline alfworld|webshop, got $env_name" >&2; exit 2 ;;
  esac
  : "${SERO_MODEL:?set SERO_MODEL to a 0.5B-1.5B instruct model folder on the device}"
  out="${OUT:-./device_check_out}/sero_headline/$env_name"
  mkdir -p "$out"
  for seed in 0 1 2; do
    for arm in graphgpo sero; do
      sero=False; [ "$arm" = sero ] && sero=True
      PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m envkit.trainers.cli local --task "$task" \
        --model.path "$SERO_MODEL" --model.device cuda --model.dtype bfloat16 --steps "${SERO_STEPS:-150}" \
        --seed "$seed" --prompts-per-step "$groups" --group-size 8 --max-new-tokens 64 --lr 1e-6 \
        --agent.estimator graphgpo --agent.sero "$sero" --agent.max-turns "$turns" \
        --agent.max-context-tokens 8192 --run-dir "$out/${arm}_seed$seed" --tensorboard False --progress False \
        || echo "device_check: $env_name $arm seed $seed failed (rc $?)" >&2
    done
  done
  exit 0
fi
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
