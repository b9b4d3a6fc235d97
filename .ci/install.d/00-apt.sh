#!/usr/bin/env bash
# System packages: build tools for alfworld's C/C++ parts, Chromium for the browser env, sandboxing tools.
set -euo pipefail
pkgs="build-essential cmake chromium chromium-driver bubblewrap uidmap iproute2 git"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing
fi
