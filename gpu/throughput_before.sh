#!/usr/bin/env bash
# Throughput on the GPU (docs/measured.md, GPU runs 7 and 12). Prepare on the development machine, then run on the GPU machine carrying
# .whl and .gl (both git-ignored):
#   mkdir -p .gl/old && git archive 342cb3f | tar -x -C .gl/old && cp benchmarks/throughput*.{py,txt} .gl/old/benchmarks/
#   cp ../shared/corpora/cuda-l1/a100.jsonl .gl/corpus.jsonl
#   python3 -c "r=open('.gl/corpus.jsonl').read().splitlines(); print('\\n'.join(r[int(l[7:])] for l in open('benchmarks/throughput_sample_gpu.txt') if l.startswith('corpus:')))" > .gl/sample_gpu.jsonl
#   bash gpu/throughput_before.sh          # 342cb3f, one candidate at a time
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/debs; for d in .whl/*.deb; do dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site" PYTHONUNBUFFERED=1 HACKSCAN_CACHE_DIR=/tmp/hs-before-cache
python3 -c "import networkx, typer, tree_sitter; print('deps ok')" || exit 4
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
cd .gl/old
( while sleep 2; do echo "$(date +%s.%N) $(wc -l < $OUT/${TAG:-before}.jsonl 2>/dev/null || echo 0)"; done ) > $OUT/${TAG:-before}_progress.txt &
w=$!
start=$(date +%s.%N); echo "start $start" > $OUT/${TAG:-before}_start.txt
# SAMPLE (relative to .gl/old): ../sample_gpu_new8.jsonl for run 12 (the eight records the 16-record sample adds)
tag=${TAG:-before}
timeout ${LIMIT:-550} python3 -m hackscan ${SAMPLE:-../sample_gpu.jsonl} --device cuda --seed 1234 --stream $OUT/$tag.jsonl -f json -o $OUT/${tag}_report.json > $OUT/${tag}_stdout.txt 2> $OUT/${tag}_stderr.txt
echo "rc $? after $(python3 -c "import time;print(round(time.time()-$start,1))") s"
kill $w
wc -l $OUT/$tag.jsonl
tail -5 $OUT/${tag}_stderr.txt
python3 -c "import json,sys; [print(json.loads(l).get('record'), json.loads(l).get('verdict'), round((json.loads(l).get('dynamic') or {}).get('timings',{}).get('total_s') or 0,1)) for l in open(sys.argv[1])]" $OUT/$tag.jsonl
