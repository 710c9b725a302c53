"""Worker side: the plug-in point of the performance stage (``hackscan.perf.worker_side``).

The module is imported when the worker starts, before any untrusted import, so a candidate cannot
plant its own ``hackscan.perf`` in ``sys.modules``.  ``prepare`` runs in ``Worker.__init__``, also
before the untrusted import (and before any extension build): it binds the clocks and takes the
memory baseline, so a raw ``cudaMalloc`` made at import or on the first call still counts.  See
PROTOCOL.md for the contract.
"""

from __future__ import annotations

import gc
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from .values import clone_all


@dataclass(frozen=True)
class PerfApi:
    """The entry points of ``hackscan.perf.worker_side`` this worker found at start-up."""

    measure: Any
    prepare: Any = None
    spin: Any = None
    measure_compile: Any = None


def load_api() -> PerfApi | None:
    try:
        # relative: the worker side is importable under any package name (the sandbox mounts it
        # under a neutral one, so the candidate's process has no module named after hackscan)
        from ...perf.worker import measure as worker_side  # type: ignore[import-not-found]
    except ImportError:
        return None
    measure = getattr(worker_side, "measure", None)
    if measure is None:
        return None
    return PerfApi(measure, getattr(worker_side, "prepare", None), getattr(worker_side, "spin", None),
                   getattr(worker_side, "measure_compile", None))


def prepare(worker: Any) -> None:
    """Clocks and memory baseline before the untrusted import (only when the run will time)."""
    worker.perf_prepared = None
    worker.perf_prepare_error = None
    api = worker.perf_api
    if api is None or api.prepare is None or not worker.spec.get("perf"):
        return
    try:
        worker.perf_prepared = api.prepare(worker.device)
    except Exception as exc:  # CUDA that does not initialise: the candidate's own load says why
        worker.perf_prepare_error = f"{type(exc).__name__}: {exc}"[:500]


def _sets(worker: Any, msg: dict[str, Any]) -> dict[str, list[list[Any]]]:
    # taken over, not copied: the stored inputs were never handed to the model (every probe called
    # it on clones), and timing works on fresh working copies of them (the perf input plan's slots)
    return {key: [worker.inputs[pid] for pid in ids if pid in worker.inputs]
            for key, ids in (msg.get("sets") or {}).items()}


def _release(worker: Any) -> None:
    """Drop what the correctness probes left (every probe's inputs, the other setups' models, the
    float64 copies): timing comes last, and the memory measurement must see the model's own
    tensors, not the harness's."""
    worker.inputs.clear()
    release = getattr(worker, "perf_release", None)
    if release is not None:
        release()
    _collect(worker)


def _collect(worker: Any) -> None:
    gc.collect()
    if worker.device == "cuda" and torch.cuda.is_initialized():
        if worker.timers.cuda_synchronize is not None:  # bound before the untrusted import
            worker.timers.cuda_synchronize()
        torch.cuda.empty_cache()


def run_perf(worker: Any, msg: dict[str, Any], role: str) -> dict[str, Any]:
    api = worker.perf_api
    if api is None:
        return {"perf": None, "reason": "the performance stage (hackscan.perf) is not installed"}
    input_sets = _sets(worker, msg)
    model = worker.perf_model()
    _release(worker)
    if role == "reference":  # kept for the torch.compile baseline, asked for later
        worker.perf_inputs = input_sets
    options = dict(msg.get("options") or {})
    try:
        result = api.measure(model, input_sets, role=role, device=worker.device, timers=worker.timers,
                             options=options, prepared=worker.perf_prepared)
    except Exception as exc:  # a bug or a hostile candidate: the parent reports it, the scan goes on
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    if isinstance(result, dict) and worker.perf_prepare_error:
        result.setdefault("prepare_error", worker.perf_prepare_error)
    if input_sets.get("original"):
        # a working copy for ``spin``, made now: the parent's clock must not time a copy
        worker.perf_spin_inputs = clone_all(input_sets["original"][0])
    _collect(worker)
    return {"perf": result, "changes": worker.note_changes("perf")}


def run_spin(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """Back-to-back calls for the parent's own clock (HS609): the parent times this request."""
    api = worker.perf_api
    inputs = getattr(worker, "perf_spin_inputs", None)
    if api is None or api.spin is None or inputs is None:
        return {"spin": None, "reason": "nothing to time (no perf request before, or no hackscan.perf)"}
    result = api.spin(worker.perf_model(), [inputs], int(msg.get("calls", 1)), worker.perf_prepared)
    return {"spin": result}


def run_compile(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """The torch.compile baseline, in a request of its own (its first call may take a minute)."""
    api = worker.perf_api
    sets = getattr(worker, "perf_inputs", None) or {}
    if api is None or api.measure_compile is None:
        return {"compile": None, "reason": "this hackscan.perf has no torch.compile measurement"}
    if not sets.get("original"):
        return {"compile": None, "reason": "no input sets (the perf request did not run first)"}
    try:
        result = api.measure_compile(worker.perf_model(), {"original": sets["original"]}, device=worker.device,
                                     timers=worker.timers, options=dict(msg.get("options") or {}),
                                     prepared=worker.perf_prepared)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    return {"compile": result, "changes": worker.note_changes("torch.compile baseline")}

