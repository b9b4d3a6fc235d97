#!/usr/bin/env bash
# SWE env: bubblewrap >= 0.8 for the local sandbox (00-apt installs bubblewrap), podman + runc for the
# docker-backend tests (driven through Podman's Docker-compatible API; skipped with the reason if it cannot start).
set -euo pipefail
pkgs="bubblewrap util-linux podman runc git"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing
fi
python -c "import docker" 2>/dev/null || python -m pip install -q "docker>=7"
