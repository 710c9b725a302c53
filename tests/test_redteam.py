"""The red-team sets (``../shared/redteam``) as a regression suite; skipped when ``../shared`` is absent.

Static verdicts of every case are cheap (one ``hackscan --static`` batch per set): every
look-alike stays without a hack verdict and every hack the static stage catches now stays caught.
The dynamic stage runs the CPU cases of both sets in ONE hackscan batch (``--jobs 2 --perf quick``;
marked slow: about 10 minutes on two cores, most of it compiling the cases' C++ extensions the
first time; a warm build cache takes it to about 4) and each must reach its label: ``hack`` a hack
verdict, ``flag`` at least a warning, ``clean`` no hack.  The GPU cases: ``gpu/redteam_gpu.sh``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import ROOT, SHARED

REDTEAM = SHARED / "redteam"
pytestmark = pytest.mark.skipif(not REDTEAM.is_dir(), reason="needs ../shared/redteam")

SETS = ("set1", "set2")

# hacks the static stage alone catches (a floor: more is welcome, fewer is a regression)
STATIC_CAUGHT = {
    "set1": {"relu_cuda_guard", "relu_py_guard", "softmax_range_fastpath", "matmul_py_fallback", "matmul_cpp_aten",
             "matmul_try_fallback", "softmax_hardcoded_launch", "relu_ptr_cache", "gemm_static_cache",
             "layernorm_sync_patch", "matmul_half_downcast", "softmax_inherits_reference", "relu_harness_detect",
             "mse_subsample_cpu", "mean_constant_cpu", "relu_seed_replay", "relu_inplace_input_cpu",
             "cumsum_hardcoded_cpu", "layernorm_triton_fallback", "relu_triton_nomask", "softmax_timer_patch",
             "gemm_python_fallback_cpu"},
    "set2": {"cumsum_template_rowlen_cpu", "matmul_ops_panels_cpu", "softmax_head_checksum_cache_cpu",
             "gemm_frame_reuse_triton", "matmul_fp16_operands_triton", "gelu_deferred_result_triton",
             "matmul_resident_module_triton", "gemm_default_dot_triton", "leaky_relu_index_probe_cuda",
             "layernorm_reduced_dispatch_fallback_cuda", "gemm_persistent_output_cuda"},
}


def _bench():
    spec = importlib.util.spec_from_file_location("redteam_bench", ROOT / "benchmarks" / "redteam.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("set_name", SETS)
def test_static_verdicts_hold(set_name: str) -> None:
    bench = _bench()
    set_dir = REDTEAM / set_name
    chosen = bench.cases(set_dir)
    got = bench.verdicts(set_dir, chosen, ["--static"])
    labels = dict(chosen)
    false = sorted(n for n, m in labels.items() if m["label"] == "clean" and got[n]["verdict"] in ("hack", "error"))
    assert not false, f"look-alikes with a static hack verdict: {false}"
    lost = sorted(n for n in STATIC_CAUGHT[set_name]
                  if n in labels and not bench.caught(labels[n]["label"], got[n]["verdict"]))
    assert not lost, f"hacks the static stage no longer catches: {lost}"


@pytest.mark.slow
def test_cpu_cases_reach_their_labels_with_the_dynamic_stage() -> None:
    bench = _bench()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.jsonl"
        with records.open("w") as out:
            for set_name in SETS:
                set_dir = REDTEAM / set_name
                for name, meta in bench.cases(set_dir):
                    if meta["runs"] != "cpu":
                        continue
                    code = (set_dir / "cases" / f"{name}.py").read_text()
                    ref = (set_dir / "problems" / f"{meta['problem']}.py").read_text()
                    out.write(json.dumps({"custom_code": code, "ref_code": ref}) + "\n")
                    rows.append((f"{set_name}/{name}", meta["label"]))
        proc = subprocess.run([sys.executable, "-m", "hackscan", str(records), "--device", "cpu", "--jobs", "2",
                               "--perf", "quick", "--seed", "20261206", "-f", "json"],
                              capture_output=True, text=True, cwd=ROOT)
    report = json.loads(proc.stdout)
    results = sorted(report["results"], key=lambda r: r.get("record", 0))
    assert len(results) == len(rows)
    wrong = []
    for (name, label), r in zip(rows, results, strict=True):
        verdict = r["verdict"]
        ok = verdict not in ("hack", "error") if label == "clean" else bench.caught(label, verdict)
        if not ok:
            wrong.append(f"{name} ({label}): {verdict} {(r.get('dynamic') or {}).get('reason') or ''}")
    assert not wrong, "\n".join(wrong)
