#!/usr/bin/env bash
# ALFWorld (envkit/ALFWorld-v0): the `alfworld` extra, alfworld==0.4.2 + textworld==1.7.0. Installing compiles
# jericho (C) and fast-downward-textworld (C++) with the build tools of 00-apt.sh (~7 min on 2 cores). Never
# `alfworld[full]`: visdom's build fails on Python 3.11. Checks that the planner library loads.
source "$(dirname "$0")/lib.sh"
if ! have_modules alfworld textworld fast_downward; then
  if ! command -v g++ >/dev/null 2>&1 || ! command -v cmake >/dev/null 2>&1; then
    skip "ALFWorld (alfworld, textworld)" "its build needs g++ and cmake (apt-get install build-essential cmake)"
  fi
  pip_install -e "$REPO[alfworld]"
fi
"$PY" - <<'PY'
import fast_downward

lib = fast_downward.load_lib()
print("alfworld: libdownward loads:", bool(lib.get_state_id))
PY
