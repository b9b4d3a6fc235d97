#!/usr/bin/env bash
# Download the few pure-Python / cp312 wheels that scripts/device_check.sh needs beyond what the lent GPU machine
# has (Python 3.12, torch, transformers, numpy; no network there). Run it on a machine WITH a package registry,
# then carry the folder with the device run (~40 MB with scipy; the carry limit is 64 MiB):
#   bash scripts/device_wheels.sh            # -> .device_wheels/ (git-ignored)
set -euo pipefail
dest="${1:-.device_wheels}"
mkdir -p "$dest"
# gymnasium (envkit's env API) and its small deps; WebShop: rapidfuzz, bm25s, PyStemmer; XRPO: scipy (its
# t-quantiles; ~35 MB, carried only if the device lacks it). Binary wheels for 3.12.
python -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --implementation cp --abi cp312 \
  --no-deps -d "$dest" "gymnasium>=1.0,<2" cloudpickle farama-notifications "rapidfuzz>=3" "bm25s>=0.2" \
  "PyStemmer>=2.2" typing-extensions "scipy>=1.11"
du -sh "$dest"; ls "$dest"
