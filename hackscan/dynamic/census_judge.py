"""Parent side: how much of the candidate's run is the reference's own ATen work.

A candidate that ships a kernel but spends most of its time in the very ops the reference calls
(``aten.mm`` for a matmul task, cuBLAS / cuDNN kernels on the GPU) is a torch fallback whatever the
source looks like: the op may be reached through a macro, a C++ helper, an exception handler or a
``getattr``.  Ops that only allocate, view or copy never count.
"""

from __future__ import annotations

import re
from typing import Any

from ..python.catalog import op_family
from ..python.equivalents import reference_work

# ops that move or allocate but compute nothing: never counted as the main work (the worker's
# census, ``worker/census.py``, records every op; which ones count is decided here)
BOOKKEEPING = re.compile(
    r"^aten\.(empty|empty_like|empty_strided|zeros|zeros_like|ones|ones_like|full|full_like|new_empty|new_zeros|"
    r"new_ones|new_full|detach|alias|view|_unsafe_view|reshape|as_strided|t|transpose|permute|expand|squeeze|"
    r"unsqueeze|slice|select|split|split_with_sizes|chunk|unbind|contiguous|clone|copy_|_to_copy|to|lift_fresh|"
    r"resize_|set_|fill_|zero_|item|_local_scalar_dense|is_nonzero|sym_size|sym_stride|sym_numel|size|stride|"
    r"dim|numel|resolve_conj|resolve_neg|_reshape_alias|unfold|flatten|view_as|expand_as|narrow|"
    r"_has_compatible_shallow_copy_type|record_stream|_pin_memory|lift|_conj|conj|_neg_view|"
    r"detach_|new_empty_strided|scalar_tensor|arange|randn|rand|normal_|uniform_)\b")


def _aten_base(name: str) -> str:
    """``aten.addmm.default`` -> ``addmm``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "aten" else parts[-1]


def is_bookkeeping(name: str) -> bool:
    return bool(BOOKKEEPING.match(name))


def _compute_ops(census: dict[str, Any], key: str = "seconds") -> dict[str, float]:
    return {k: float(v.get(key, 0.0)) for k, v in (census.get("ops") or {}).items() if not is_bookkeeping(k)}


def fallback_share(cand: dict[str, Any], ref: dict[str, Any]) -> tuple[float | None, dict[str, Any]]:
    """How much of the reference's own compute the candidate re-runs through ATen (0..1).

    Measured against the reference's time in those ops, not against the candidate's total: a small
    task's total is mostly call overhead, which says nothing about who did the work.
    """
    if not cand or not ref or "error" in cand or "error" in ref:
        return None, {"reason": "no op census"}
    ref_ops = _compute_ops(ref)
    cand_ops = _compute_ops(cand)
    top = dict(sorted(cand_ops.items(), key=lambda kv: -kv[1])[:8])
    detail: dict[str, Any] = {"method": cand.get("method"), "candidate_ops": {k: round(v, 6) for k, v in top.items()},
                              "reference_ops": sorted(ref_ops)}
    if not ref_ops:
        detail["reason"] = "the reference runs no compute op"
        return None, detail
    # the reference's op under another ATen name counts too (``aten.addmm`` for ``aten.mm``): the one
    # table of equivalent ops decides, as it does for the static rules
    work = reference_work(frozenset(op_family(_aten_base(k)) for k in ref_ops))
    used = sorted((k for k in cand_ops if k in ref_ops or op_family(_aten_base(k)) in work),
                  key=lambda k: -cand_ops[k])
    detail["reference_ops_used"] = used
    total = float(cand.get("total_s") or 0.0)
    if total > 0:
        detail["share_of_candidate_time"] = round(min(1.0, sum(cand_ops[k] for k in used) / total), 3)
    if cand.get("method") == "profiler":
        kernels = cand.get("kernels") or {}
        library = sum(float(k.get("device_s", 0.0)) for k in kernels.values() if k.get("library"))
        ref_device = sum(float(k.get("device_s", 0.0)) for k in (ref.get("kernels") or {}).values())
        detail["library_device_s"] = round(library, 6)
        detail["reference_device_s"] = round(ref_device, 6)
        detail["custom_kernels"] = sorted(n for n, k in kernels.items() if not k.get("library"))[:8]
        if ref_device <= 0 or not used:
            return (0.0 if ref_device > 0 else None), detail
        return min(1.0, library / ref_device), detail
    # on the CPU, sizes of work rather than times: two processes on a busy machine time differently
    ref_work = _compute_ops(ref, "work")
    cand_work = _compute_ops(cand, "work")
    total_work = sum(ref_work.values())
    if total_work <= 0:
        return None, detail
    detail["reference_work"] = int(total_work)
    detail["candidate_work_in_reference_ops"] = int(sum(cand_work.get(k, 0.0) for k in used))
    return min(1.0, sum(cand_work.get(k, 0.0) for k in used) / total_work), detail
