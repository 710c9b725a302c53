#!/usr/bin/env bash
# The dynamic stage on a CUDA GPU: CUDA fixtures (stale memory through the caching allocator, the
# profiler-based fallback census, a clean kernel), the CPU fixtures on the GPU, and the cost table.
# Runs once on a bare GPU host with torch, nvcc and the repo installed; no network needed.
# Usage: bash gpu/run_dynamic_gpu.sh [extra pytest args]
set -u
cd "$(dirname "$0")/.."
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-$PWD/.hackscan-cache}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -5
"$PY" - <<'PY'
import sys, shutil, torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
print("nvcc", shutil.which("nvcc"), "c++", shutil.which("c++"))
try:
    import triton; print("triton", triton.__version__)
except Exception as exc:
    print("triton: not importable:", exc)
PY
status=0
echo "== GPU tests (each CUDA fixture compiles once, about a minute)"
"$PY" -m pytest -q -m gpu tests/test_dynamic_gpu.py -rA -p no:cacheprovider "$@" || status=$?
echo "== CPU fixtures on this host (device cpu; must match the annotations as on any machine)"
"$PY" -m pytest -q tests/test_dynamic_fixtures.py -x -p no:cacheprovider || status=$?
echo "== a CUDA candidate end to end through the command line"
"$PY" -m hackscan fixtures/dynamic/gpu/hack_stale_output.py --ref fixtures/dynamic/gpu/reference.py --device cuda \
    --seed 7 --no-perf -f json -o /tmp/hs_dynamic_gpu.json || true
"$PY" - <<'PY'
import json
d = json.load(open("/tmp/hs_dynamic_gpu.json"))
for r in d["results"]:
    dyn = r.get("dynamic") or {}
    print(r["path"], r["verdict"], "ran:", dyn.get("ran"), "device:", dyn.get("device"), dyn.get("reason", ""))
    print("  timings:", dyn.get("timings"))
    for f in r["findings"]:
        print("  ", f["rule"], f["severity"], f["stage"], f["message"][:160])
PY
echo "== cost per probe on the GPU"
"$PY" benchmarks/dynamic_cost.py --task relu --task softmax --repeat 1 || status=$?
exit $status
