#!/usr/bin/env bash
# Issue 22's GPU measurements in one command, for a machine with a GPU (16 cores):
#   1. the loader alone and ViT-B/16 bf16 fed from shards, workers' decoding against
#      decoding on the GPU (data.decode: device), against resident tensors;
#   2. our training step against timm's, the four models, eager and compiled;
#   3. the trainer's speeds appended to slurm/profiles/calibration.csv (GPU-hour budgets).
# Everything lands in bench/ (JSON + the printed tables). Without CUDA it says so, exits 2.
#
#   benchmarks/gpu_feed.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
if ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_feed: no CUDA device here: nothing measured" >&2
  exit 2
fi
mkdir -p bench
"$PYTHON" benchmarks/loader_throughput.py --device cuda --train-step --workers 8 --out bench/loader_gpu.json | tee bench/loader_gpu.txt
"$PYTHON" benchmarks/timm_side_by_side.py --out bench/timm_side_by_side.json | tee bench/timm_side_by_side.txt
benchmarks/gpu_smoke.sh --models ViT-B/16,ViT-S/16,BiT-R50x1,R50x1+ViT-B/16 --steps 100 --calibrate --out bench/gpu_smoke.json | tee bench/gpu_smoke.txt
