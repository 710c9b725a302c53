"""Builders of raw worker measurements (the JSON ``hackscan.perf.worker.measure`` returns), so the
parent-side tests can state each situation in a few numbers.  The shapes here mirror
``measure.measure_candidate`` / ``measure_reference``; ``test_raw_builders_match_the_worker``
checks that they stay in step with the real thing."""

from __future__ import annotations

import copy
from typing import Any

from hackscan.perf import SCHEMA

FP_OK = [{"shape": [4, 4], "dtype": "float32", "numel": 16, "sum": 8.0, "abs_sum": 8.0, "nonfinite": 0,
          "samples": [0.5] * 16}]


def fp_scaled(factor: float) -> list[dict[str, Any]]:
    fp = copy.deepcopy(FP_OK)
    fp[0]["samples"] = [0.5 * factor] * 16
    fp[0]["sum"] = 8.0 * factor
    fp[0]["abs_sum"] = abs(8.0 * factor)
    return fp


def series(ms: float, n: int = 20, wall_ms: float | None = None, start: int = 0, warmup: int = 2,
           fingerprints: dict[str, Any] | None = None, error: str | None = None, jitter: float = 0.02) -> dict[str, Any]:
    wall = ms if wall_ms is None else wall_ms
    ev = [ms * (1 + jitter * ((i % 5) - 2) / 2) for i in range(n)]
    wl = [wall * (1 + jitter * ((i % 5) - 2) / 2) for i in range(n)]
    idx = list(range(start + warmup, start + warmup + n))
    fps = fingerprints if fingerprints is not None else {str(j): FP_OK for j in range(start, start + warmup + n)}
    return {"warmup": list(range(start, start + warmup)), "indices": idx, "event_ms": ev, "wall_ms": wl,
            "fingerprints": fps, "error": error, "off_default_stream": False, "threads_before": 1,
            "threads_after": 1, "new_threads": []}


def hidden_series(hidden_ms: float, main_ms: float) -> dict[str, Any]:
    """A hidden series with its interleaved main-distribution calls."""
    s = series(hidden_ms, n=8, start=100_000, warmup=1, fingerprints={})
    paired = series(main_ms, n=8)
    s["paired_event_ms"], s["paired_wall_ms"] = paired["event_ms"], paired["wall_ms"]
    return s


def memory(resident: float = 0, call_peak: float = 64 << 20, outside: float = 0, growth: float = 0.0,
           known: bool = True) -> dict[str, Any]:
    held = [1e9 + growth * i for i in range(4)]
    return {"kind": "cuda", "resident": resident, "state": resident, "call_peak": call_peak, "outside": outside,
            "outside_during_call": 0, "peak": resident + call_peak + outside, "held_after_calls": held,
            "growth_per_call": growth, "baseline_known": known, "outside_method": "nvml-process", "harness_bytes": 0}


def common(role: str, device: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "role": role,
        "device": {"type": device, "name": "NVIDIA H200" if device == "cuda" else "cpu"},
        "method": {"warmup": 2, "iterations": 20},
        "inputs_digest": [[1.0, 2.0], [3.0, 4.0]],
        "calibration": {"gap_ms": 0.005, "wall_ms": 0.01, "calls": 10},
        "timers": {"watched": 40, "changed": []},
        "precision_flags": {"before": {"matmul_allow_tf32": False}, "after": {"matmul_allow_tf32": False}},
    }


def candidate(ms: float = 1.0, device: str = "cuda", wall_ms: float | None = None, **kw: Any) -> dict[str, Any]:
    raw = common("candidate", device)
    main = kw.pop("main", None) or series(ms, wall_ms=wall_ms)
    raw["series"] = {"main": main}
    for name, hidden_ms in kw.pop("hidden", {}).items():
        raw["series"][f"hidden:{name}"] = hidden_series(hidden_ms, ms)
    raw["memory"] = kw.pop("memory", None) or memory()
    raw.update(kw)
    return raw


def reference(strict_ms: float = 2.0, tf32_ms: float | None = 1.0, device: str = "cuda", compile_ms: float | None = None,
              hidden: dict[str, float] | None = None, work: dict[str, Any] | None = None,
              ceilings: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    raw = common("reference", device)
    headline = "eager_tf32" if device == "cuda" else "eager_fp32"
    base: dict[str, Any] = {"eager_fp32": {"tf32": False, "series": {"main": series(strict_ms, fingerprints={})}}}
    if tf32_ms is not None and device == "cuda":
        base["eager_tf32"] = {"tf32": True, "series": {"main": series(tf32_ms, fingerprints={})}}
    if compile_ms is not None:
        base["compile"] = {"tf32": device == "cuda", "compile_s": 5.5, "series": {"main": series(compile_ms, fingerprints={})}}
    for name, hidden_ms in (hidden or {}).items():
        main_ms = tf32_ms if headline == "eager_tf32" and tf32_ms is not None else strict_ms
        base[headline]["series"][f"hidden:{name}"] = hidden_series(hidden_ms, main_ms)
    raw["baselines"] = base
    raw["headline"] = headline
    raw["fingerprints"] = {"main": {str(j): FP_OK for j in range(40)}}
    raw["work"] = work or {"flops": 0, "flops_by_op": {}, "bytes_read": 4 << 20, "bytes_written": 4 << 20,
                           "aliased_outputs": 0}
    raw["ceilings"] = ceilings or {"version": 1, "bandwidth_Bps": 4.0e12, "peak_flops": 7.0e14,
                                   "flops": {"fp16": 7.0e14}, "source": "cache"}
    raw["memory"] = kw.pop("memory", None) or memory()
    raw.update(kw)
    return raw


def test_builders_produce_the_schema() -> None:
    assert candidate()["schema"] == reference()["schema"] == SCHEMA
    assert set(reference()["baselines"]) == {"eager_fp32", "eager_tf32"}
    assert set(reference(device="cpu")["baselines"]) == {"eager_fp32"}
