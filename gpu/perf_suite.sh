#!/usr/bin/env bash
# The performance stage on a GPU: every fixture under fixtures/perf/, the figures, and the GPU tests.
#
#   bash gpu/perf_suite.sh            # suite + figures (about 5-7 minutes on one H200, builds included)
#   PERF_PYTEST=1 bash gpu/perf_suite.sh   # also run tests/test_perf_gpu.py (measures everything again)
#
# Needs torch with CUDA, nvcc and ninja; no network.  Prints everything needed to diagnose a failure;
# writes $OUT/perf_suite.json when $OUT is set.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# extension builds and measured ceilings go to a cache the runs share
export HACKSCAN_CACHE_DIR="${HACKSCAN_CACHE_DIR:-$HOME/.cache/hackscan}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$HACKSCAN_CACHE_DIR/torch_extensions}"
mkdir -p "$TORCH_EXTENSIONS_DIR"

echo "== nvidia-smi"
nvidia-smi || echo "(nvidia-smi failed)"
PY="${PYTHON:-python3}"
echo "== python: $(command -v "$PY")"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" || exit 2

status=0
"$PY" gpu/perf_suite.py "$@" || status=$?

if [ "${PERF_PYTEST:-0}" = "1" ]; then
  echo "== pytest tests/test_perf_gpu.py"
  "$PY" -m pytest -q -m gpu tests/test_perf_gpu.py -p no:cacheprovider || status=$?
fi
echo "== perf suite exit status: $status"
exit $status
