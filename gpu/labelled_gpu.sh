#!/usr/bin/env bash
# GPU run 8: the full pipeline (static, dynamic, performance) on labelled CUDA-L1 records, for the
# claimed-vs-verified table (issue 16) and the dynamic stage's verdicts on labelled records
# (issue 15).  Prepare on the development machine (.whl and .gl are git-ignored; see
# throughput_after.sh for .whl):
#   cp ../shared/corpora/cuda-l1/a100.jsonl .gl/corpus.jsonl
#   python3 gpu/pick_labelled.py > .gl/labelled_gpu.jsonl      # the records benchmarks/labelled_gpu.txt names
# then on the GPU machine:  bash gpu/labelled_gpu.sh JOBS [TIMEOUT] [N: the first N records only]
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/debs; for d in .whl/*.deb; do dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu"
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 HACKSCAN_CACHE_DIR=/tmp/hs-labelled-cache
start=$(date +%s.%N)
head -n ${3:-1000} .gl/labelled_gpu.jsonl > /tmp/labelled_n.jsonl
timeout ${2:-420} python3 -m hackscan /tmp/labelled_n.jsonl --device cuda --seed 1234 --jobs ${1:-12} \
  --claimed-field score_default --stream $OUT/labelled.jsonl -f json -o $OUT/labelled.json \
  > $OUT/labelled_stdout.txt 2> $OUT/labelled_stderr.txt
echo "rc $? after $(python3 -c "import time;print(round(time.time()-$start,1))") s"
grep -v "^hackscan: \[" $OUT/labelled_stderr.txt | tail -5
python3 - $OUT/labelled.json <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except OSError:  # timed out: the stream holds the finished results
    d = {"results": [json.loads(line) for line in open(sys.argv[1].replace(".json", ".jsonl")) if line.strip()],
         "summary": {}}
    print("no report: from the stream,", len(d["results"]), "finished")
for r in d["results"]:
    p = r.get("performance") or {}
    print(r.get("record"), r["verdict"], sorted({f["rule"] for f in r["findings"] if f.get("stage") != "static"}),
          r.get("rejected_for"), {k: v.get("speedup") for k, v in (p.get("baselines") or {}).items()} if isinstance(p, dict) else None)
print(json.dumps(d["summary"].get("claimed_vs_verified"), indent=0)[:2500])
PY
