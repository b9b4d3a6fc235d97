# Shared helpers of the set-up steps (sourced by each .ci/install.d/NN-*.sh; not a step itself).
# Every step is idempotent, installs with the repository's constraints.txt, and either succeeds, fails, or
# skips (exit 3) after printing what it skipped and why. Under CI=true a skip is a failure: CI installs all.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python}"
CONSTRAINTS="$REPO/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive

is_ci() { case "${CI:-}" in 1 | true | TRUE | True | yes) return 0 ;; *) return 1 ;; esac; }

# skip WHAT WHY: print the skip (and append it to $ENVKIT_SETUP_SKIPS), exit 3; under CI=true fail instead.
skip() {
  if is_ci; then
    echo "error: CI=true and $1 cannot be set up: $2" >&2
    exit 1
  fi
  echo "skipped: $1: $2"
  [ -n "${ENVKIT_SETUP_SKIPS:-}" ] && echo "$1: $2" >>"$ENVKIT_SETUP_SKIPS"
  exit 3
}

# pip_install ARGS...: pip with the constraints (-q; pip's own wheel cache is kept).
pip_install() { "$PY" -m pip install -q -c "$CONSTRAINTS" "$@"; }

# have_modules MOD...: all importable (found, not imported).
have_modules() {
  "$PY" - "$@" <<'PY'
import importlib.util, sys
sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)
PY
}

# apt_missing PKG...: prints the Debian packages among PKG that are not installed.
apt_missing() {
  local p out=""
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || out="$out $p"; done
  echo "$out"
}

# as_root CMD...: run as root (directly, or through non-interactive sudo); returns 97 when neither is possible.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo "$@"; else return 97; fi
}
