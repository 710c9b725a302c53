#!/usr/bin/env bash
# GPU run 7 (GPU_NOTES.md). Prepare on the development machine, then run on the GPU machine carrying
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
( while sleep 2; do echo "$(date +%s.%N) $(wc -l < $OUT/before.jsonl 2>/dev/null || echo 0)"; done ) > $OUT/before_progress.txt &
w=$!
start=$(date +%s.%N); echo "start $start" > $OUT/before_start.txt
timeout 550 python3 -m hackscan ../sample_gpu.jsonl --device cuda --seed 1234 --stream $OUT/before.jsonl -f json -o $OUT/before_report.json > $OUT/before_stdout.txt 2> $OUT/before_stderr.txt
echo "rc $? after $(python3 -c "import time;print(round(time.time()-$start,1))") s"
kill $w
wc -l $OUT/before.jsonl
tail -5 $OUT/before_stderr.txt
