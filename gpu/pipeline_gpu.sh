#!/usr/bin/env bash
# The main job on a GPU, through the command line (static -> dynamic -> performance in one run), as a
# user runs it: the bundled demo set and the performance fixtures.  Prints one line per finding and the
# performance table per candidate; writes the JSON reports to $OUT (or /tmp) for the notes.
#
#   bash gpu/pipeline_gpu.sh [TARGET...]     # default: kernels fixtures/perf
#   HACKSCAN_OPTS="--no-perf" bash gpu/pipeline_gpu.sh kernels/softmax
#
# Needs torch with CUDA, nvcc and ninja, and hackscan importable (PYTHONPATH=repo root is enough).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-$PWD/.hackscan-cache}"
dest="${OUT:-/tmp}"
PY="${PYTHON:-python3}"
status=0
[ "$#" -eq 0 ] && set -- kernels fixtures/perf
for target in "$@"; do
  name=$(echo "${target%.py}" | tr '/' '_')
  echo "== hackscan $target --device cuda"
  t0=$(date +%s)
  "$PY" -m hackscan "$target" --device cuda --seed 7 -f json -o "$dest/pipeline_$name.json" ${HACKSCAN_OPTS:-}
  rc=$?
  echo "   exit $rc in $(( $(date +%s) - t0 )) s"
  [ "$rc" -gt 1 ] && status=$rc
  "$PY" - "$dest/pipeline_$name.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    dyn = r.get("dynamic") or {}
    perf = r.get("performance") or {}
    sp = perf.get("speedup") or {}
    mem = (perf.get("memory") or {}).get("ratio")
    print(f"{r['path']}: {r['verdict']}  dynamic ran={dyn.get('ran')} device={dyn.get('device')} "
          f"{dyn.get('reason', '')}")
    if sp:
        print("   speedup " + ", ".join(f"{k} {v:.2f}x" for k, v in sp.items())
              + (f"; memory ratio {mem:.2f}" if isinstance(mem, (int, float)) else "")
              + ("" if perf.get("valid", True) else "; NOT CREDITED"))
    for key in ("performance_skipped", "performance_error"):
        if dyn.get(key):
            print(f"   {key}: {dyn[key]}")
    for f in r["findings"]:
        print(f"   {f['rule']} {f['severity']:<7} {f['stage']:<11} L{f['line']}: {f['message'][:150]}")
PY
done
exit $status
