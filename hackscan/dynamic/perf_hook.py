"""Worker side: the plug-in point of the performance stage (``hackscan.perf.worker_side.measure``).

The module is imported when the worker starts, before any untrusted import, so a candidate cannot
plant its own ``hackscan.perf`` in ``sys.modules``.  See PROTOCOL.md for the contract.
"""

from __future__ import annotations

import traceback
from typing import Any

from .values import clone_all


def load_measure() -> Any:
    try:
        from hackscan.perf import worker_side  # type: ignore[import-not-found]
    except ImportError:
        return None
    return getattr(worker_side, "measure", None)


def run_perf(worker: Any, msg: dict[str, Any], role: str) -> dict[str, Any]:
    measure = worker.perf_measure
    if measure is None:
        return {"perf": None, "reason": "the performance stage (hackscan.perf) is not installed"}
    input_sets = {key: [clone_all(worker.inputs[pid]) for pid in ids if pid in worker.inputs]
                  for key, ids in msg.get("sets", {}).items()}
    model = worker.perf_model()
    try:
        result = measure(model, input_sets, role=role, device=worker.device, timers=worker.timers,
                         options=dict(msg.get("options") or {}))
    except Exception as exc:  # a bug or a hostile candidate: the parent reports it, the scan goes on
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    return {"perf": result, "changes": worker.note_changes("perf")}
