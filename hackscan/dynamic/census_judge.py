"""Parent side: how much of the candidate's run is the reference's own ATen work.

A candidate that ships a kernel but spends most of its time in the very ops the reference calls
(``aten.mm`` for a matmul task, cuBLAS / cuDNN kernels on the GPU) is a torch fallback whatever the
source looks like: the op may be reached through a macro, a C++ helper, an exception handler or a
``getattr``.  Ops that only allocate, view or copy never count.
"""

from __future__ import annotations

from typing import Any

from .census import is_bookkeeping


def _compute_ops(census: dict[str, Any]) -> dict[str, float]:
    return {k: float(v.get("seconds", 0.0)) for k, v in (census.get("ops") or {}).items() if not is_bookkeeping(k)}


def fallback_share(cand: dict[str, Any], ref: dict[str, Any]) -> tuple[float | None, dict[str, Any]]:
    if not cand or not ref:
        return None, {"reason": "no op census"}
    ref_ops = _compute_ops(ref)
    cand_ops = _compute_ops(cand)
    top = dict(sorted(cand_ops.items(), key=lambda kv: -kv[1])[:8])
    detail: dict[str, Any] = {"method": cand.get("method"), "candidate_ops": {k: round(v, 6) for k, v in top.items()},
                              "reference_ops": sorted(ref_ops)}
    if not ref_ops:
        detail["reason"] = "the reference runs no compute op"
        return None, detail
    used = sorted((k for k in cand_ops if k in ref_ops), key=lambda k: -cand_ops[k])
    detail["reference_ops_used"] = used
    if cand.get("method") == "profiler":
        kernels = cand.get("kernels") or {}
        total = sum(float(k.get("device_s", 0.0)) for k in kernels.values())
        library = sum(float(k.get("device_s", 0.0)) for k in kernels.values() if k.get("library"))
        detail["device_s"] = round(total, 6)
        detail["library_device_s"] = round(library, 6)
        detail["custom_kernels"] = sorted(n for n, k in kernels.items() if not k.get("library"))[:8]
        if total <= 0 or not used:
            return (0.0 if total > 0 else None), detail
        return library / total, detail
    total = float(cand.get("total_s") or 0.0)
    if total <= 0:
        return None, detail
    share = min(1.0, sum(cand_ops[k] for k in used) / total)
    detail["total_s"] = round(total, 6)
    return share, detail
