#!/usr/bin/env bash
# The dynamic side of the mutation adequacy table for the mutants the development machine cannot run
# (issue 19): those that need CUDA or Triton (side streams, CUDA seeds, cuBLAS).  The CPU run there
# (`hackscan mutate --dynamic --per-class N -f json --readme docs/measured.md`) reports their classes as
# "not run here"; this runs exactly those mutants on the GPU, in parallel groups of classes, each
# group with a time budget so the whole fits in about 8 minutes, and writes one merged JSON (adequacy_gpu.json.gz) and a text summary.
# Merge with the CPU run's JSON on the development machine:
#   hackscan mutate --merge benchmarks/adequacy_cpu.json.gz OUT/adequacy_gpu.json.gz --readme docs/measured.md
# Runs once on a bare GPU host with torch and nvcc; the repo's .whl/ wheels (see
# throughput_after.sh) are installed here; no network needed.
# Usage: bash gpu/dynamic_adequacy_gpu.sh [PER_CLASS (6)] [BUDGET_S per group (240)] [COMPILES per group (8)]
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/debs; for d in .whl/*.deb; do [ -e "$d" ] && dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu"
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 HACKSCAN_CACHE_DIR=/tmp/hs-adequacy-cache
OUT="${OUT:-/tmp/adequacy-gpu}"; mkdir -p "$OUT"
# one JSON per group here; what comes back ($OUT) is one merged file and a text summary
WORK=/tmp/adequacy-gpu-work; rm -rf "$WORK"; mkdir -p "$WORK"
PER_CLASS=${1:-6} BUDGET=${2:-240} COMPILES=${3:-8}
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 | head -2
# groups of classes, one process each (two static-scan jobs each: 16 cores); classes whose static
# misses are mostly CUDA-only (9 side streams, 2 shapes, 3 and 5 fallbacks, 13 input mutation) get a
# group of their own so that their quota is not starved by a neighbour's compiles
groups=("9" "2" "3" "5" "13" "8 12" "6 7 15" "10 11 1" "4 14 16 17 18 19")
# side streams and timer tricks show in the timing (HS601, HS604), not in the values: those groups
# run the performance stage too
perf_groups=" 0 5 7 "
pids=()
for i in "${!groups[@]}"; do
  args=(); for c in ${groups[$i]}; do args+=(--class "$c"); done
  [[ "$perf_groups" == *" $i "* ]] && args+=(--perf)
  # the outer timeout leaves time after the budget for the static scan, the run in flight and the JSON
  timeout $((BUDGET + 210)) python3 -m hackscan mutate "${args[@]}" --dynamic --device cuda --per-class "$PER_CLASS" \
    --dynamic-limit 0 --compile-limit "$COMPILES" --budget "$BUDGET" --timeout 90 --jobs 2 -f json \
    > "$WORK/adequacy_gpu_$i.json" 2> "$WORK/adequacy_gpu_$i.log" &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "group ${groups[$i]}: rc $?"; tail -3 "$WORK/adequacy_gpu_$i.log"; status=1; }
done
echo "== all groups done after $(( $(date +%s) - start )) s"
# the groups hold disjoint classes: their mutants concatenate into one run's JSON
python3 - "$WORK" "$OUT/adequacy_gpu.json.gz" <<'PY'
import glob, gzip, json, sys
parts = []
for f in sorted(glob.glob(sys.argv[1] + "/adequacy_gpu_*.json")):
    try:
        parts.append(json.load(open(f)))
    except ValueError:
        print("no result (timed out or failed):", f)
if parts:
    out = {k: parts[0][k] for k in ("seeds", "options", "dynamic_unavailable")}
    out["seed_notes"] = {k: v for p in parts for k, v in p["seed_notes"].items()}
    out["mutants"] = [m for p in parts for m in p["mutants"]]
    out["options"]["classes"] = sorted({c for p in parts for c in p["options"]["classes"]})
    with gzip.open(sys.argv[2], "wt") as fh:
        fh.write(json.dumps(out))
    print(len(parts), "groups,", sum(m["dynamic_ran"] for m in out["mutants"]), "mutants ran")
PY
[ -e "$OUT/adequacy_gpu.json.gz" ] && python3 -m hackscan mutate --merge "$OUT/adequacy_gpu.json.gz" --show-missed -f text \
  > "$OUT/adequacy_gpu.txt" && head -25 "$OUT/adequacy_gpu.txt"
tail -n 5 "$WORK"/adequacy_gpu_*.log > "$OUT/adequacy_gpu_logs.txt"
exit $status
