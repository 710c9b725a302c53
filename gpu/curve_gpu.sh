#!/usr/bin/env bash
# The curve's series (HS606 on sparse, shifted, repeat, half; docs/curve.md) on a GPU host:
#  1. their cost per candidate and what they find, the settings alternating (none / quick / full);
#  2. the performance fixtures (fixtures/perf/memo/hack_content_memo.py may now show HS606 on
#     `repeat`: if it does in every run, add HS606 to its `# expect:` on the forward line);
#  3. the in-process curve tests on the CPU of the same host, for the record.
# Usage: bash gpu/curve_gpu.sh
set -u
cd "$(dirname "$0")/.."
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-$PWD/.hackscan-cache}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | head -3
echo "== 1. curve cost on the GPU (3 rounds)"
"$PY" benchmarks/curve_cost.py --device cuda --rounds 3
echo "== 2. performance fixtures on the GPU"
"$PY" -m pytest -q tests/test_perf_gpu.py -p no:cacheprovider
echo "== 3. curve tests (CPU)"
"$PY" -m pytest -q tests/test_perf_curve.py tests/test_perf_worker.py -k "curve or collapse" -p no:cacheprovider
