#!/usr/bin/env bash
# The project with every extra that installs on a CPU machine (torch from the CPU wheel on disk).
set -euo pipefail
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[all]"
