#!/usr/bin/env bash
# envkit-serve and the TRL / GEM / SkyRL-gym / verl adapters (serve/, interop/), for their CPU tests.
# Their declared dependencies cannot all install here: openenv-core pulls gradio and the OpenAI client for its web UI
# and hub features, verl pins transformers < 5.11 (envkit trains on 5.15) and pulls CUDA-only extras. So each is
# installed with --no-deps plus the packages its imported modules need, under the pins in constraints.txt (torch
# 2.13.0 CPU, transformers 5.15.0, tensordict 0.10.0). omegaconf and hydra-core (verl, skyrl-gym) need
# antlr4-python3-runtime 4.9.* (their generated grammar does not load under 4.13: "Could not deserialize ATN with
# version 3"), while the math extra installs math-verify[antlr4-13-2]; math-verify's latex parser also ships a
# 4.9.3 build (latex2sympy2_extended/gen/antlr4_9_3), so this step moves the runtime to 4.9.3 for both.
# Idempotent: does nothing when everything is in place.
set -euo pipefail
want_ok() {
  python - <<'PY'
import importlib, importlib.metadata as md, sys
pins = {"antlr4-python3-runtime": "4.9.3", "openenv-core": "0.3.0", "trl": "1.16.0", "gem-llm": "0.1.0", "skyrl-gym": "0.4.0", "verl": "0.9.1",
        "tensordict": "0.10.0"}
mods = ["omegaconf", "hydra", "openenv.core.env_server", "fastapi", "uvicorn", "websockets.sync.client", "trl", "gem", "skyrl_gym",
        "verl.experimental.agent_loop"]
try:
    ok = all(md.version(k) == v for k, v in pins.items())
    for m in mods:
        importlib.import_module(m)
except Exception:
    ok = False
sys.exit(0 if ok else 1)
PY
}
if ! want_ok; then
  python -m pip install -q --no-deps -c constraints.txt openenv-core trl gem-llm skyrl-gym verl omegaconf hydra-core \
    "antlr4-python3-runtime==4.9.3"
  python -m pip install -q -c constraints.txt "torch==2.13.0" "transformers==5.15.0" \
    fastapi uvicorn websockets fastmcp tomli tomli-w httpx pyyaml \
    accelerate datasets jinja2 pandas psutil \
    msgspec nltk math-verify reasoning-gym \
    func_timeout requests packaging \
    codetiming dill peft pybind11 pylatexenc ray tensorboard "tensordict==0.10.0" torchdata wandb
fi
want_ok
