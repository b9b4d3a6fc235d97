#!/usr/bin/env bash
# System packages (Debian/Ubuntu, as root or with sudo): build tools for alfworld's C/C++ parts (jericho,
# fast-downward), Chromium + chromedriver for envkit/WebShopBrowser-v0, bubblewrap (>= 0.8) for the
# SWE sandbox, podman + runc for the SWE docker-backend tests, git, iproute2 and uidmap for the sandboxes.
# Without root/sudo or apt-get it skips, naming what is missing; the tests that need it then skip with the reason.
source "$(dirname "$0")/lib.sh"
pkgs="build-essential cmake chromium chromium-driver bubblewrap util-linux uidmap iproute2 git podman runc"
if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  skip "system packages ($pkgs)" "no dpkg/apt-get here (not Debian/Ubuntu); install their equivalents by hand"
fi
missing="$(apt_missing $pkgs)"
if [ -z "${missing// /}" ]; then
  echo "apt: all of $pkgs already installed"
  exit 0
fi
rc=0
as_root apt-get update -qq || rc=$?
[ "$rc" = 97 ] && skip "system packages ($missing)" "not root and no passwordless sudo: run 'sudo apt-get install -y$missing' (ALFWorld's build, WebShopBrowser, the SWE and code sandboxes need them)"
[ "$rc" = 0 ] || exit "$rc"
as_root apt-get install -y -qq --no-install-recommends $missing
echo "apt: installed$missing"
