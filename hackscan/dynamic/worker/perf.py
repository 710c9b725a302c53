"""Worker side: the performance stage's requests (``perf``, ``spin``, ``perf_compile``), answered with
``hackscan.perf.worker.measure``.

The module (and with it the perf worker side) is imported when the worker starts, before any
untrusted import, so a candidate cannot plant its own ``hackscan.perf`` in ``sys.modules``, and the
perf clock's snapshot of the timers is taken then.  ``prepare`` runs in ``Worker.__init__``, also
before the untrusted import (and before any extension build): it binds the clocks and takes the
memory baseline, so a raw ``cudaMalloc`` made at import or on the first call still counts.  See
PROTOCOL.md for the contract.
"""

from __future__ import annotations

import gc
import traceback
from typing import Any

import torch

from ...perf.worker import measure as perf_measure
from .values import clone_all

# bound when the worker starts, before any untrusted import: a candidate that later replaces these
# names in the measuring module does not change what this worker calls
_MEASURE, _PREPARE, _SPIN, _MEASURE_COMPILE = (perf_measure.measure, perf_measure.prepare, perf_measure.spin,
                                               perf_measure.measure_compile)
_BLOCK, _BLOCK_SETUP = perf_measure.time_block, perf_measure.block_setup


def prepare(worker: Any) -> None:
    """Clocks and memory baseline before the untrusted import (only when the run will time)."""
    worker.perf_prepared = None
    worker.perf_prepare_error = None
    if not worker.spec.get("perf"):
        return
    try:
        worker.perf_prepared = _PREPARE(worker.device)
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
    input_sets = _sets(worker, msg)
    model = worker.perf_model()
    _release(worker)
    if role == "reference":  # kept for the torch.compile baseline, asked for later
        worker.perf_inputs = input_sets
    options = dict(msg.get("options") or {})
    keep: dict[str, Any] = {}
    try:
        result = _MEASURE(model, input_sets, role=role, device=worker.device, timers=worker.timers,
                          options=options, prepared=worker.perf_prepared, keep=keep)
    except Exception as exc:  # a bug or a hostile candidate: the parent reports it, the scan goes on
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    if isinstance(result, dict) and worker.perf_prepare_error:
        result.setdefault("prepare_error", worker.perf_prepare_error)
    # the setup (input plan, flush buffer, clocks) the paired blocks time with, asked for next
    worker.perf_setup = keep.get("setup") if isinstance(result, dict) and not result.get("error") else None
    if input_sets.get("original"):
        # a working copy for ``spin``, made now: the parent's clock must not time a copy
        worker.perf_spin_inputs = clone_all(input_sets["original"][0])
    _collect(worker)
    return {"perf": result, "changes": worker.note_changes("perf")}


def run_spin(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """Back-to-back calls for the parent's own clock (HS609): the parent times this request."""
    inputs = getattr(worker, "perf_spin_inputs", None)
    if inputs is None:
        return {"spin": None, "reason": "nothing to time (no perf request before)"}
    result = _SPIN(worker.perf_model(), [inputs], int(msg.get("calls", 1)), worker.perf_prepared)
    return {"spin": result}


def run_setup(worker: Any, msg: dict[str, Any], role: str) -> dict[str, Any]:
    """Ready a fresh worker for ``perf_block`` without the ``perf`` request's measurements: the
    parent times the paired blocks in several pairs of processes, and only the first pair needs
    the main series, fingerprints, memory and bounds (PROTOCOL.md, ``perf_setup``)."""
    input_sets = _sets(worker, msg)
    model = worker.perf_model()
    _release(worker)
    try:
        worker.perf_setup = _BLOCK_SETUP(model, input_sets, device=worker.device, timers=worker.timers,
                                         options=dict(msg.get("options") or {}), prepared=worker.perf_prepared)
    except Exception as exc:
        worker.perf_setup = None
        return {"ready": False, "reason": f"{type(exc).__name__}: {exc}"[:500]}
    _collect(worker)
    return {"ready": True, "changes": worker.note_changes("perf_setup")}


def run_block(worker: Any, msg: dict[str, Any], role: str) -> dict[str, Any]:
    """One block of the paired measurement (the parent alternates these between the two workers)."""
    setup = getattr(worker, "perf_setup", None)
    if setup is None:
        return {"block": None, "reason": "nothing to time (no successful perf request before)"}
    baseline = msg.get("baseline") if role == "reference" else None
    try:
        result = _BLOCK(setup, int(msg.get("calls", 1)), int(msg.get("round", 0)),
                        str(baseline) if baseline is not None else None, bool(msg.get("relayout", True)),
                        int(msg["cpu"]) if isinstance(msg.get("cpu"), int) else None)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"block": result}


def run_compile(worker: Any, msg: dict[str, Any]) -> dict[str, Any]:
    """The torch.compile baseline, in a request of its own (its first call may take a minute)."""
    sets = getattr(worker, "perf_inputs", None) or {}
    if not sets.get("original"):
        return {"compile": None, "reason": "no input sets (the perf request did not run first)"}
    options = dict(msg.get("options") or {})
    # {"warm_only": true}: compile now (the parent shares the device meanwhile), time on the next request
    if not hasattr(worker, "compile_warm"):
        worker.compile_warm = {}
    try:
        result = _MEASURE_COMPILE(worker.perf_model(), {"original": sets["original"]}, device=worker.device,
                                   timers=worker.timers, options=options, prepared=worker.perf_prepared,
                                   warm=worker.compile_warm, warm_only=bool(msg.get("warm_only")))
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    return {"compile": result, "changes": worker.note_changes("torch.compile baseline")}

