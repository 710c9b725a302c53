#!/usr/bin/env bash
# Issue 16's throughput figure on the GPU machine: benchmarks/throughput.py on the GPU sample
# (benchmarks/throughput_sample_gpu.txt), with the tree given as $1 (the current checkout by default;
# an older tree to measure "before"), and hackscan's --jobs as $2.  Needs .whl/ (bwrap, pyseccomp,
# tree-sitter; see docs/measured.md, "On the GPU", "Reproduce") and the corpus at $CORPUS.
#
#   CORPUS=.gl/corpus.jsonl bash gpu/throughput_gpu.sh [TREE] [JOBS] [extra throughput.py args]
set -u
cd "$(dirname "$0")/.."
tree="${1:-.}"; jobs="${2:-1}"; shift 2 2>/dev/null || true
dest="${OUT:-/tmp}"
mkdir -p /tmp/debs
for d in .whl/*.deb; do dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
if ! ldconfig -p | grep -q libseccomp.so.2; then
  export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site" PYTHONUNBUFFERED=1
corpus="$(realpath "${CORPUS:-.gl/corpus.jsonl}")"
cd "$tree"
echo "== $(git log -1 --format=%h 2>/dev/null || echo "$tree"): jobs $jobs, $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)"
python3 benchmarks/throughput.py --device cuda --jobs "$jobs" --sample benchmarks/throughput_sample_gpu.txt \
  --corpus "$corpus" --json "$dest/throughput_$(basename "$(realpath .)")_j$jobs.json" "$@"
