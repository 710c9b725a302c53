#!/usr/bin/env bash
# The red-team sets on a GPU host: every case (CUDA and Triton ones too) through static + dynamic,
# scored per set (hacks caught, false hacks, one line per case), with the CPU-only score beside it.
# The sets are not in the repo: copy ../shared/redteam next to the checkout (or pass its folder).
# Usage: bash gpu/redteam_gpu.sh [REDTEAM_DIR] [SEED]
set -u
cd "$(dirname "$0")/.."
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-$PWD/.hackscan-cache}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DIR="${1:-$PWD/../shared/redteam}"
SEED="${2:-20261206}"
nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | head -3
echo "== every case, --device auto (CUDA and Triton cases on the GPU), --jobs 4 --perf quick"
time "$PY" benchmarks/redteam.py --device auto --jobs 4 --seed "$SEED" --redteam "$DIR"
