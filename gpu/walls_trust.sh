#!/usr/bin/env bash
# Issue 25 on the GPU machine (docs/walls-trust.md, docs/referee-signals.md): the referee signals
# read from inside a CUDA sandbox, and the parent's clock against forged and honest timings.
# Setup as gpu/sandbox_gpu.sh (bubblewrap, pyseccomp from .whl/).  About 5 minutes.
#
#   bash gpu/walls_trust.sh
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/debs
for d in .whl/*.deb; do [ -e "$d" ] && dpkg -x "$d" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH"
ldconfig -p | grep -q libseccomp.so.2 || export LD_LIBRARY_PATH="/tmp/debs/usr/lib/x86_64-linux-gnu"
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-/tmp/hackscan-cache}"
echo "== referee signals from inside a sandbox (CPU launcher) and the walls"
python3 -m pytest -q -p no:cacheprovider tests/test_referee_signals.py tests/test_sandbox.py 2>&1 | tail -5
echo "== the parent's clock against forged and honest timings (--device cuda)"
python3 gpu/walls_trust.py --device cuda 2>&1 | tail -20
