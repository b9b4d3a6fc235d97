#!/usr/bin/env bash
# ALFWorld (envkit/ALFWorld-v0): alfworld==0.4.2 and textworld==1.7.0 (the `alfworld` extra, also pulled in by
# `.[all]` in 10-project.sh). Installing compiles jericho (C) and fast-downward-textworld (C++) with the build
# tools from 00-apt.sh (~7 min on 2 cores). Never `alfworld[full]`: visdom's build fails on Python 3.11.
# Idempotent: installs only what is missing, then checks that the planner library loads.
set -euo pipefail
if ! python -c "import alfworld, textworld, fast_downward" >/dev/null 2>&1; then
  python -m pip install -q "alfworld==0.4.2" "textworld==1.7.0"
fi
python - <<'PY'
import fast_downward

lib = fast_downward.load_lib()
print("alfworld: libdownward loads:", bool(lib.get_state_id))
PY
