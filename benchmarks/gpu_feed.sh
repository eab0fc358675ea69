#!/usr/bin/env bash
# The GPU measurements in one prepared command, under 8 minutes on one H100/H200,
# every result in OUT_DIR (JSON, tables, summary.md). The steps, each with its time cap and
# why: benchmarks/gpu_feed.py (STEPS); `--dry-run` prints them. Without CUDA it prints
# them too, each skipped, and exits 2.
#
#   benchmarks/gpu_feed.sh OUT_DIR [--dry-run]
#   PYTHON=.venv/bin/python benchmarks/gpu_feed.sh bench/gpu
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # OUT_DIR stays relative to the caller
if [[ -z ${PYTHON:-} ]]; then  # the project's environment (make install), else python3
  if [[ -x $root/.venv/bin/python ]]; then PYTHON=$root/.venv/bin/python; else PYTHON=python3; fi
fi
PYTHONPATH=$root exec "$PYTHON" "$root/benchmarks/gpu_feed.py" "$@"
