"""A small JSON summary of an output, enough to tell whether two outputs agree.

The candidate child and the reference child each fingerprint the outputs of the same calls; the
parent compares the fingerprints (``compare`` in ``hackscan.perf.compare``).  No tensor crosses a
process boundary and nothing is unpickled.  A fingerprint holds the shape, dtype, a float64 sum and
absolute sum, the count of non-finite values and the values at a fixed pseudo-random set of
positions (the same positions in both children, since they depend only on the element count).
"""

from __future__ import annotations

import math
from typing import Any

import torch

_INDEX_SEED = 0x5EED


def flatten_outputs(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)):
        return [x for item in out for x in flatten_outputs(item)]
    if isinstance(out, dict):
        return [x for key in sorted(out, key=str) for x in flatten_outputs(out[key])]
    return [out]


def _positions(n: int, samples: int, device: torch.device) -> torch.Tensor:
    if n <= samples:
        return torch.arange(n, device=device)
    gen = torch.Generator().manual_seed(_INDEX_SEED + n)
    idx = torch.randint(0, n, (samples - 2,), generator=gen)
    idx = torch.cat([torch.tensor([0, n - 1]), idx])
    return idx.to(device)


def _float(v: float) -> float | str:
    # JSON has no NaN/inf: keep them as strings the parent understands
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def fingerprint_tensor(t: torch.Tensor, samples: int) -> dict[str, Any]:
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    flat = t.reshape(-1)
    n = flat.numel()
    fp: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "numel": n}
    if n == 0:
        fp.update(sum=0.0, abs_sum=0.0, nonfinite=0, samples=[])
        return fp
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    idx = _positions(n, samples, flat.device)
    vals = flat.index_select(0, idx).to(torch.float64).cpu().tolist()
    total = float(torch.sum(flat, dtype=torch.float64).item())
    nonfinite = 0
    clean = flat
    if flat.is_floating_point() and not math.isfinite(total):
        # the slow path only when something is not finite (torch.isfinite is slow on the CPU)
        finite = torch.isfinite(flat)
        nonfinite = int(n - int(finite.sum().item()))
        clean = torch.where(finite, flat, torch.zeros((), dtype=flat.dtype, device=flat.device))
        total = float(torch.sum(clean, dtype=torch.float64).item())
    fp["sum"] = _float(total)
    fp["abs_sum"] = _float(float(torch.sum(clean.abs(), dtype=torch.float64).item()))
    fp["nonfinite"] = nonfinite
    fp["samples"] = [_float(v) for v in vals]
    return fp


def fingerprint(out: Any, samples: int = 256) -> list[dict[str, Any]]:
    """Fingerprints of every tensor in ``out`` (nested tuples, lists and dicts are flattened)."""
    result: list[dict[str, Any]] = []
    for item in flatten_outputs(out):
        if isinstance(item, torch.Tensor):
            result.append(fingerprint_tensor(item, samples))
        elif isinstance(item, (int, float, bool)):
            result.append({"value": _float(float(item))})
        elif item is None:
            result.append({"value": None})
        else:
            result.append({"type": type(item).__name__})
    return result
