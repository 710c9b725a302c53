#!/usr/bin/env bash
# The sandbox on the GPU machine: its walls (tests/test_sandbox.py), a CUDA and a Triton candidate run
# inside it through the whole pipeline, and the per-candidate cost of a sandboxed worker against the
# unsandboxed forkserver (benchmarks/dynamic_cost.py).  The machine has no bubblewrap, pyseccomp or
# tree-sitter: they travel in .whl/ (see docs/measured.md, "On the GPU", "Reproduce").
#
#   bash gpu/sandbox_gpu.sh [quick]
set -u
cd "$(dirname "$0")/.."
dest="${OUT:-/tmp}"
mkdir -p /tmp/debs
for d in .whl/*.deb; do dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
if ! ldconfig -p | grep -q libseccomp.so.2; then
  export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-/tmp/hackscan-cache}"
echo "== host: $(uname -r), $(nproc) cores; bwrap $(bwrap --version 2>&1)"
python3 - <<'PY'
from hackscan.dynamic import sandbox
print("sandbox.check():", sandbox.check())
PY
echo "== the walls, from inside (tests/test_sandbox.py)"
python3 -m pytest -q -p no:cacheprovider tests/test_sandbox.py 2>&1 | tail -15
echo "== a CUDA candidate and a Triton candidate inside the sandbox (--device cuda)"
# the first with the performance stage (CUDA events, NVML and the parent's clock from inside the sandbox)
for f in kernels/relu/clean_cuda_relu_vec4.py kernels/relu/hack_side_stream.py kernels/softmax/clean_triton_softmax.py; do
  t0=$(date +%s)
  perf="--no-perf"; [ "$f" = kernels/relu/hack_side_stream.py ] && perf=""
  python3 -m hackscan "$f" --device cuda --seed 7 $perf -f json -o "$dest/sbx_$(basename "$f" .py).json"
  echo "   $f: exit $? in $(( $(date +%s) - t0 )) s"
  python3 - "$dest/sbx_$(basename "$f" .py).json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
d = r.get("dynamic") or {}
print("   verdict", r["verdict"], "| ran", d.get("ran"), "| device", d.get("device"), "|", d.get("reason", ""))
print("   sandbox", (d.get("sandbox") or {}), "| timings", d.get("timings"))
p = r.get("performance") or {}
if p:
    print("   performance: measured", p.get("measured"), "| headline", p.get("headline"))
for f in r["findings"]:
    print(f"     {f['rule']} {f['severity']} {f['stage']}: {f['message'][:140]}")
PY
done
[ "${1:-}" = quick ] && exit 0
echo "== the hostile candidates and the fail-closed tests (CPU candidates, on this machine's kernel)"
python3 -m pytest -q -p no:cacheprovider tests/test_hostile.py tests/test_dynamic_failclosed.py 2>&1 | tail -8
echo "== per-candidate cost, sandboxed vs forkserver (benchmarks/dynamic_cost.py)"
python3 benchmarks/dynamic_cost.py --task relu --repeat 2 --startup 3 > "$dest/dynamic_cost.txt" 2>&1
grep -E "^(==|worker|sandboxed|forked|run |cold|warm)" "$dest/dynamic_cost.txt"
