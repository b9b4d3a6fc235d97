#!/usr/bin/env bash
# DeepSpeed's CPU ops for `envkit-train openrlhf --cpu` (the OpenRLHF end-to-end tests, docs/openrlhf.md "CPU
# mode"). On its CPU accelerator DeepSpeed JIT-compiles `deepspeed_shm_comm` (its shared-memory collectives,
# ~40 s on 2 cores) and `fused_adam` (~85 s) on first use into torch's extension cache
# (${TORCH_EXTENSIONS_DIR:-~/.cache/torch_extensions}); built here once so no test pays it. Idempotent (a built op
# loads in < 1 s). Needs a C++ compiler (00-apt.sh) and deepspeed (30-openrlhf.sh).
source "$(dirname "$0")/lib.sh"
have_modules deepspeed || skip "DeepSpeed CPU ops" "deepspeed is not installed (.ci/install.d/30-openrlhf.sh)"
DS_ACCELERATOR=cpu "$PY" - <<'PY'
import time

from deepspeed.ops.op_builder.cpu import FusedAdamBuilder, ShareMemCommBuilder

for builder in (ShareMemCommBuilder(), FusedAdamBuilder()):
    t = time.perf_counter()
    builder.load(verbose=False)
    print(f"deepspeed cpu op {builder.NAME}: ready in {time.perf_counter() - t:.0f} s")
PY
