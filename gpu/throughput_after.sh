#!/usr/bin/env bash
# Throughput on the GPU (docs/measured.md, GPU runs 7 and 12). Prepare on the development machine, then run on the GPU machine carrying
# .whl and .gl (both git-ignored):
#   mkdir -p .gl/old && git archive 342cb3f | tar -x -C .gl/old && cp benchmarks/throughput*.{py,txt} .gl/old/benchmarks/
#   cp ../shared/corpora/cuda-l1/a100.jsonl .gl/corpus.jsonl
#   python3 -c "r=open('.gl/corpus.jsonl').read().splitlines(); print('\\n'.join(r[int(l[7:])] for l in open('benchmarks/throughput_sample_gpu.txt') if l.startswith('corpus:')))" > .gl/sample_gpu.jsonl
#   bash gpu/throughput_after.sh TAG JOBS [TIMEOUT] [FARM] [PERF]   # this checkout; FARM: --build-farm auto|on|off, PERF: --perf
#   (auto, the default, compiles each candidate's extensions in the build farm while its reference
#   loads, when --jobs > 1; run once with FARM=off for the same run's baseline).  Issue 16's figure
#   after the farm2 branch, one device call (each run has its own cold build cache):
#   bash gpu/throughput_after.sh f2auto 8 230 auto; bash gpu/throughput_after.sh f2off 8 230 off
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/debs; for d in .whl/*.deb; do dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 HACKSCAN_CACHE_DIR=/tmp/hs-after-cache-$1
jobs=${2:-8}
start=$(date +%s.%N)
farm=${4:-auto}
perf=${5:-target}   # target (the default: several process pairs) or quick (RL gates: one pair)
sample=${SAMPLE:-.gl/sample_gpu.jsonl}   # SAMPLE=.gl/sample_gpu16.jsonl: the 16-record sample (run 12)
timeout ${3:-500} python3 -m hackscan $sample --device cuda --seed 1234 --jobs $jobs --build-farm $farm --perf $perf --claimed-field score_default \
  --stream $OUT/after_$1.jsonl -f json -o $OUT/after_$1.json > $OUT/after_$1_stdout.txt 2> $OUT/after_$1_stderr.txt
echo "rc $? after $(python3 -c "import time;print(round(time.time()-$start,1))") s (jobs $jobs, build farm $farm, perf $perf)"
grep "done in" $OUT/after_$1_stderr.txt | tail -16
grep -v "^hackscan: \[" $OUT/after_$1_stderr.txt | tail -5
python3 - $OUT/after_$1.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    print(r.get("record"), r["verdict"], sorted({f["rule"] for f in r["findings"]}), r.get("rejected_for"))
    dyn = r.get("dynamic") or {}
    t = dyn.get("timings") or {}
    # the build farm: its seconds, builds the worker still compiled under the gate, the wait for timing
    farm = dyn.get("build_farm") or {}
    print("   farm", t.get("farm_s"), "slot wait", t.get("farm_wait_s"), "waited for the farm (no gate)",
          t.get("farm_join_wait_s"), "worker compile_s", t.get("compile_s"),
          "compiled under the gate", (dyn.get("compile") or {}).get("compiled"), "timing_wait_s",
          t.get("timing_wait_s"), "total_s", t.get("total_s"), "farm error", farm.get("error"))
    print("   farm builds", [(b.get("name"), b.get("compiled"), b.get("failed")) for b in farm.get("builds") or []],
          "exercised", farm.get("exercised"), "later builds",
          [(b.get("name"), b.get("compiled")) for b in (dyn.get("compile") or {}).get("later_builds") or []])
print(json.dumps(d["summary"].get("claimed_vs_verified"), indent=0)[:1500])
PY
