#!/usr/bin/env bash
# GPU smoke test of envkit's OpenRLHF backend (docs/openrlhf.md). Needs a CUDA machine with
#   pip install -e '.[openrlhf]'      # openrlhf==0.11.2 vllm==0.29.0 ray==2.55.0 deepspeed==0.19.6 (+ flash-attn)
# and a small local causal LM (no download happens here):
#   MODEL=/path/to/Qwen2.5-0.5B-Instruct bash scripts/gpu_smoke.sh [OUT_DIR]
#
# 1. prompt embeddings: a vLLM engine built with enable_prompt_embeds=True; greedy output from
#    [prompt rows + anchor row] (rho = 0, i.e. EDEN's noise switched off) must equal greedy output from the token
#    prompt + anchor token; with rho = 0.12 the output is reported (it usually differs).
# 2. one tiny training step per explorer (none, eden, xrpo) through 'envkit-train openrlhf' on envkit/Toy-v0
#    (1 GPU, everything colocated, 4 prompts x 4 rollouts), then GiGPO + SERO with no explorer.
# 2b. scripts/openrlhf_e2e.py --device cuda: 2+ real iterations per arm with the per-tensor weight check (below).
# 3. scripts/bench_explorers.py with the local trainer on CUDA (Math-v0, 256-token responses): XRPO's step
#    time relative to GRPO at a realistic length (reported in bench_explorers.json, not a pass/fail check).
# Prints one JSON summary line at the end; exit code 0 only if every check passed.
set -uo pipefail
OUT="${1:-${OUT:-./gpu_smoke_out}}"
MODEL="${MODEL:-}"
STEP_TIMEOUT="${STEP_TIMEOUT:-900}"
mkdir -p "$OUT"

fail() { echo "gpu_smoke: $*" >&2; exit 2; }
command -v nvidia-smi >/dev/null 2>&1 || fail "no nvidia-smi: this script needs a CUDA GPU"
python -c "import vllm, openrlhf, deepspeed, ray" 2>/dev/null \
  || fail "vllm/openrlhf/deepspeed/ray do not import: pip install -e '.[openrlhf]' on the GPU machine"
[ -n "$MODEL" ] && [ -d "$MODEL" ] || fail "set MODEL to a local model folder, e.g. MODEL=/models/Qwen2.5-0.5B-Instruct"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# ---- 1. prompt embeddings ------------------------------------------------------------------------------------
MODEL="$MODEL" OUT="$OUT" timeout "$STEP_TIMEOUT" python - <<'PY' > "$OUT/embeds.json"
import json, os
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from envkit.trainers.explorers.eden import perturb

model = os.environ["MODEL"]
tok = AutoTokenizer.from_pretrained(model)
table = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).get_input_embeddings().weight.detach()
llm = LLM(model=model, enable_prompt_embeds=True, dtype="bfloat16", gpu_memory_utilization=0.4, enforce_eager=True,
          max_model_len=1024)
greedy = SamplingParams(temperature=0.0, max_tokens=24)
prompts = ["What is 17 + 25? Answer:", "Name a color of the sky:", "The capital of France is"]
anchor = tok(" answer", add_special_tokens=False)["input_ids"][-1]
res = []
for text in prompts:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ref = llm.generate(TokensPrompt(prompt_token_ids=ids + [anchor]), greedy)[0].outputs[0].token_ids
    rows = table[ids].float()
    for rho in (0.0, 0.12):
        extra = torch.as_tensor(perturb(table[anchor].float().numpy(), 1, rho, np.random.default_rng(0))[0])
        emb = torch.cat([rows, extra[None]], 0).to(torch.bfloat16)
        got = llm.generate({"prompt_embeds": emb}, greedy)[0].outputs[0].token_ids
        res.append({"prompt": text, "rho": rho, "same_as_tokens": list(got) == list(ref),
                    "tokens": tok.decode(ref), "embeds": tok.decode(got)})
ok = all(r["same_as_tokens"] for r in res if r["rho"] == 0.0)
print(json.dumps({"ok": ok, "results": res}))
PY
emb_rc=$?
echo "prompt-embeds check rc=$emb_rc: $(head -c 400 "$OUT/embeds.json")"

# ---- 2. tiny training steps ------------------------------------------------------------------------------------
python - "$OUT/tasks.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for seed in range(8):
        f.write(json.dumps({"input": "Walk to the goal cell. Answer with one of: left, right, stay.\n{obs}\nAction:",
                            "label": json.dumps({"seed": seed, "options": {"length": 4}})}) + "\n")
PY
ANCHORS=$(MODEL="$MODEL" python -c "
import os; from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(os.environ['MODEL'])
print(','.join(str(t(w, add_special_tokens=False)['input_ids'][-1]) for w in [' the', ' answer', ' step', ' think']))")
COMMON=(--actor.model_name_or_path "$MODEL" --data.prompt_dataset "$OUT/tasks.jsonl" --data.label_key label
  --data.max_samples 4 --rollout.batch_size 4 --rollout.n_samples_per_prompt 4 --train.batch_size 16
  --train.micro_batch_size 2 --rollout.micro_batch_size 4 --data.max_len 768 --rollout.max_new_tokens 8
  --actor.num_nodes 1 --actor.num_gpus_per_node 1 --ref.num_gpus_per_node 1 --vllm.num_engines 1
  --vllm.gpu_memory_utilization 0.35 --vllm.enforce_eager --train.colocate_all --vllm.enable_sleep --ds.enable_sleep
  --algo.kl.init_coef 0 --train.num_episodes 1 --ds.zero_stage 2 --actor.adam.lr 1e-6 --ckpt.save_steps -1)
declare -A RC
run_step() {  # name, envkit options...
  local name=$1; shift
  timeout "$STEP_TIMEOUT" envkit-train openrlhf --env envkit/Toy-v0 --max-turns 4 "$@" -- "${COMMON[@]}" \
    --ckpt.output_dir "$OUT/ckpt-$name" > "$OUT/train-$name.log" 2>&1
  RC[$name]=$?
  echo "train $name rc=${RC[$name]} ($(grep -c 'Global step' "$OUT/train-$name.log") steps logged)"
  ray stop --force >/dev/null 2>&1 || true
}
run_step none --explorer none --advantage grpo
run_step eden --explorer eden --advantage grpo --eden-anchors "$ANCHORS"
run_step xrpo --explorer xrpo --advantage grpo --xrpo.n0 2 --xrpo.icl-backend tfidf
run_step gigpo_sero --explorer none --advantage gigpo --sero

# ---- 2b. real train_ppo_ray iterations with the weight check (the CPU end-to-end arms, on CUDA) -------------------
# scripts/openrlhf_e2e.py --device cuda: the same arms as tests/trainers/openrlhf/test_openrlhf_e2e.py without --cpu
# (NCCL / CUDA-IPC weight sync, DeepSpeed on the GPU), on the script's tiny random Llama. EXPECTED (written before
# any GPU run): every arm rc 0 with >= 2 "Global step" lines; every line of <arm>/ckpt/envkit_weight_sync.jsonl
# with "engine_equal": true, "changed_since_last" > 0 after a training step, engine_versions increasing, and
# engine_probe_logprob within 5% of actor_probe_logprob; grpo_math's resume run: its "start" actor_digest equal to
# the first run's last one and one more step (3). A WeightSyncError in a log means the broadcast corrupted weights.
timeout $((4 * STEP_TIMEOUT)) python scripts/openrlhf_e2e.py --device cuda --out "$OUT/e2e" --timeout "$STEP_TIMEOUT" \
  --arm grpo_math --arm gigpo_sero_toy --arm eden_math --arm branch_toy > "$OUT/e2e.jsonl" 2> "$OUT/e2e.err"
RC[e2e]=$?
echo "openrlhf_e2e (cuda) rc=${RC[e2e]}: $(python scripts/openrlhf_e2e.py --check "$OUT/e2e.jsonl" 2>&1 | tail -5)"
ray stop --force >/dev/null 2>&1 || true

# ---- 3. explorer step time on the GPU (local trainer, realistic response lengths; informative, not a check) ----
LOCAL_STEPS="${LOCAL_STEPS:-6}"
timeout "$STEP_TIMEOUT" python scripts/bench_explorers.py --model "$MODEL" --device cuda --task envkit/Math-v0 \
  --env-kwargs '{"rg_tasks": ["products", "basic_arithmetic"]}' --max-new-tokens 256 --prompts-per-step 16 \
  --group-size 8 --steps "$LOCAL_STEPS" --skip 1 --arms none xrpo xrpo_no_icl > "$OUT/bench_explorers.json" \
  2> "$OUT/bench_explorers.log"
echo "local bench_explorers rc=$?: $(head -c 300 "$OUT/bench_explorers.json")"

all_ok=1
[ "$emb_rc" = 0 ] && python -c "import json,sys; sys.exit(0 if json.load(open('$OUT/embeds.json'))['ok'] else 1)" || all_ok=0
for k in "${!RC[@]}"; do [ "$k" = e2e ] && continue; [ "${RC[$k]}" = 0 ] && grep -q "Global step" "$OUT/train-$k.log" || all_ok=0; done
python scripts/openrlhf_e2e.py --check "$OUT/e2e.jsonl" >/dev/null 2>&1 || all_ok=0
echo "{\"embeds_rc\": $emb_rc, \"train_rc\": {$(for k in "${!RC[@]}"; do printf '"%s": %s,' "$k" "${RC[$k]}"; done | sed 's/,$//')}, \"ok\": $all_ok}"
[ "$all_ok" = 1 ]
