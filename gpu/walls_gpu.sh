#!/usr/bin/env bash
# The parent's walls on the GPU machine (docs/walls.md): the sandbox has its syscall filter there
# (--sandbox required now fails closed without it), a CUDA candidate's build is harvested into the
# build cache and found again by a second run (the harvest copies regular files only, with their
# times: the second run must compile nothing), and the parent-walls benchmark.
# The machine has no bubblewrap, pyseccomp or tree-sitter: they travel in .whl/ (GPU_NOTES.md,
# "Reproduce").
#
#   bash gpu/walls_gpu.sh
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/debs
for d in .whl/*.deb; do [ -e "$d" ] && dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
if ! ldconfig -p | grep -q libseccomp.so.2; then
  export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
export HACKSCAN_CACHE_DIR=/tmp/hackscan-walls-cache
rm -rf "$HACKSCAN_CACHE_DIR"
python3 - <<'PY'
from hackscan.dynamic import sandbox
print("sandbox.check():", sandbox.check())
print("seccomp problem:", sandbox.seccomp_problem())
PY
f=kernels/relu/clean_cuda_relu_vec4.py
for run in first second; do
  t0=$(date +%s)
  python3 -m hackscan "$f" --device cuda --no-perf -f json -o /tmp/walls-$run.json >/dev/null 2>/tmp/walls-$run.err
  echo "== $run run: exit $? in $(( $(date +%s) - t0 )) s"
  python3 - "$run" <<'PY'
import json, sys
r = json.load(open(f"/tmp/walls-{sys.argv[1]}.json"))
r = r["results"][0]
d = r.get("dynamic") or {}
print("verdict", r.get("verdict"), "| sandbox", (d.get("sandbox") or {}).get("mode"), "seccomp",
      (d.get("sandbox") or {}).get("seccomp"), "| compiled", (d.get("compile") or {}).get("compiled"),
      "| farm", [(b.get("compiled")) for b in (d.get("build_farm") or {}).get("builds", [])])
PY
  tail -3 /tmp/walls-$run.err
done
echo "== cache after two runs (regular files only, no links)"
find "$HACKSCAN_CACHE_DIR/sandboxed" -maxdepth 4 | head -20
find "$HACKSCAN_CACHE_DIR/sandboxed" -type l | head
echo "== the parent's walls benchmark"
python3 benchmarks/parent_walls.py
