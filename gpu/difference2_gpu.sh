#!/usr/bin/env bash
# The seeded input search (HS415) and its cost on a GPU host, with the sandbox on:
#  1. the differential checks' cost per candidate (the +25 % bound), the search's time beside it;
#  2. the CPU dynamic fixtures with the search on (every one must yield its annotations);
#  3. the GPU dynamic fixtures (CUDA candidates: the search runs on each that passes the rest);
#  4. the red-team sets, every case, to see whether the search finds anything the fixed probes miss.
# Usage: bash gpu/difference2_gpu.sh [REDTEAM_DIR]
set -u
cd "$(dirname "$0")/.."
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-$PWD/.hackscan-cache}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DIR="${1:-$PWD/../shared/redteam}"
nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | head -3
echo "== 1. differential cost (sandbox on, CPU fixtures, 3 rounds)"
"$PY" benchmarks/differential_cost.py --rounds 3
echo "== 2. CPU dynamic fixtures"
"$PY" -m pytest -q tests/test_dynamic_fixtures.py tests/test_search.py -p no:cacheprovider
echo "== 3. GPU dynamic fixtures"
"$PY" -m pytest -q tests/test_dynamic_gpu.py -p no:cacheprovider
echo "== 4. red-team sets, every case (HS415 lines)"
"$PY" benchmarks/redteam.py --device auto --jobs 4 --redteam "$DIR" 2>&1 | tee /tmp/difference2_redteam.txt
grep -c HS415 /tmp/difference2_redteam.txt || true
