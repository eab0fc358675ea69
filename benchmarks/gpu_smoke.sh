#!/usr/bin/env bash
# The first thing to run on a machine with GPUs: trains ViT-B/16 and
# BiT-R50x1 in bf16 for a few hundred steps with the real trainer, one process per GPU,
# and prints images/s per GPU, MFU, peak memory against vitscale's estimate, and what
# the loader delivers. Numbers go into benchmarks/RESULTS.md ("GPU smoke").
#
#   benchmarks/gpu_smoke.sh                    # all visible GPUs, 300 steps per model
#   benchmarks/gpu_smoke.sh --steps 100 --gpus 1
#   PYTHON=.venv/bin/python benchmarks/gpu_smoke.sh
#
# Without a CUDA device it says so and exits 2.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -z ${PYTHON:-} ]]; then  # the project's environment (make install), else python3
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" benchmarks/gpu_smoke.py "$@"
