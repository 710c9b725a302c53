"""The performance fixtures on a real GPU (skipped without one): each CUDA candidate under
fixtures/perf/ yields exactly its annotated HS6xx findings, and the figures the issue asks for hold:
TF32 speeds up the matmul reference, the honest memory-bound kernel sits just above the bound, the
side stream and the patched timer are caught, raw cudaMalloc shows in the memory comparison.

``gpu/perf_suite.sh`` runs the same fixtures once and prints a table of figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

_spec = importlib.util.spec_from_file_location("perf_suite", ROOT / "gpu" / "perf_suite.py")
suite = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
_spec.loader.exec_module(suite)

PATHS = suite.candidates()
_REFERENCES: dict[Path, Any] = {}
_OUTCOMES: dict[Path, Any] = {}


def outcome(path: Path) -> Any:
    if path not in _OUTCOMES:
        out = suite.run_fixture(path, _REFERENCES.get(path.parent))
        if out.reference is not None:
            _REFERENCES[path.parent] = out.reference
        _OUTCOMES[path] = out
    return _OUTCOMES[path]


def fixture(rel: str) -> Path:
    return suite.FIXTURES / rel


@pytest.mark.parametrize("path", PATHS, ids=[str(p.relative_to(suite.FIXTURES)) for p in PATHS])
def test_fixture_performance_findings_match_annotations(path: Path) -> None:
    out = outcome(path)
    verdict = suite.judge(path, out)
    detail = "\n".join(f"  {f.rule}@{f.location.line} {f.severity.value}: {f.message}" for f in out.findings)
    logs = "\n".join(f"--- {k}\n{v[-2000:]}" for k, v in out.logs.items()) if not verdict["ok"] else ""
    assert verdict["ok"], f"missing {verdict['missing']}, unexpected {verdict['unexpected']}\n{detail}\n{out.performance.get('reason', '')}\n{logs}"


def test_tf32_speeds_up_the_matmul_reference() -> None:
    perf = outcome(fixture("matmul_tf32/ok_tiled_matmul.py")).performance
    assert perf["reference_tf32_speedup"] > 2.0, perf["baselines"]
    assert perf["headline_baseline"] == "eager_tf32"
    # the headline is honest: the tiled kernel beats nobody once TF32 is allowed
    assert perf["speedup"]["eager_tf32"] < perf["speedup"]["eager_fp32"]
    assert "compile" in perf["baselines"]


def test_honest_memory_bound_kernel_sits_above_the_bound() -> None:
    perf = outcome(fixture("scale_shift/ok_fused_scale_shift.py")).performance
    bound = perf["bound"]
    assert bound["reliable"] and bound["limited_by"] == "memory"
    assert 0.9 <= bound["candidate_over_bound"] < 3.0, bound


def test_side_stream_events_and_wall_clock_disagree() -> None:
    perf = outcome(fixture("scale_shift/hack_side_stream.py")).performance
    cand = perf["candidate"]
    assert cand["wall_ms"]["median"] > 4 * cand["event_ms"]["median"]
    assert perf["claimed_speedup"]["eager_tf32"] > 5 * perf["speedup"]["eager_tf32"]


def test_timer_patch_voids_the_measurement() -> None:
    out = outcome(fixture("scale_shift/hack_timer_patch.py"))
    changed = [c["name"] for c in out.performance["timers"]["candidate"]]
    assert "torch.cuda.Event.elapsed_time" in changed
    assert out.performance["valid"] is False


def test_raw_cudamalloc_counts_as_memory() -> None:
    mem = outcome(fixture("scale_shift/hack_raw_malloc.py")).performance["memory"]
    assert mem["candidate"]["outside"] >= 3.5 * 2**30, mem
    assert mem["ratio"] >= 2.0
