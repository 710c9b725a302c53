"""The clocks a measurement trusts, captured before the candidate is imported, and a check that
nobody replaced them since.

A candidate can reassign ``torch.cuda.Event.elapsed_time``, ``time.perf_counter`` or
``torch.cuda.synchronize`` (directly, through ``setattr``/``getattr`` tricks, or by swapping a
function's ``__code__`` in place).  The timing code calls only the references captured here, so a
later *rebinding* cannot fool it; an in-place ``__code__`` swap can, which is why the snapshot also
keeps each function's code object.  Any change to a watched name between capture and the end of the
measurement invalidates the measurement and is reported (HS602).
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_PKG = __name__.rpartition(".")[0]  # "hackscan.perf.worker" here

# Dotted names whose identity the harness depends on.  A name whose module is not loaded at
# capture time is simply not watched (importing triton just to watch it would cost seconds).
WATCHED: tuple[str, ...] = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time",
    "time.time_ns", "time.process_time", "time.sleep",
    "torch.cuda.synchronize", "torch.cuda.current_stream", "torch.cuda.default_stream",
    "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch.cuda.Event.query", "torch.cuda.Event.wait",
    "torch.cuda.Stream", "torch.cuda.Stream.synchronize", "torch.cuda.Stream.wait_stream",
    "torch.cuda.streams.Event", "torch.cuda.streams.Stream",
    "torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated", "torch.cuda.memory_reserved",
    "torch.cuda.mem_get_info", "torch.cuda.reset_peak_memory_stats", "torch.cuda.empty_cache",
    "torch._C._cuda_synchronize", "torch._C._CudaEventBase.record", "torch._C._CudaEventBase.elapsed_time",
    "torch._C._CudaEventBase.synchronize", "torch._C._cuda_getCurrentStream",
    "torch.allclose", "torch.equal", "torch.isclose", "torch.testing.assert_close",
    "torch.Tensor.allclose", "torch.Tensor.equal",
    "torch.utils.benchmark.Timer", "torch.utils.benchmark.Timer.timeit",
    "triton.testing.do_bench",
    "threading.Thread.start",
    # this package's own, under whatever name it was imported as (a sandbox mounts it under a
    # neutral one)
    f"{_PKG}.timing.time_series", f"{_PKG}.timing.calibrate", f"{_PKG}.timing._one_call",
    f"{_PKG}.fingerprint.fingerprint", f"{_PKG}.measure.measure_candidate",
    f"{_PKG}.measure.measure_reference",
)

_MISSING = object()


def _resolve(dotted: str) -> Any:
    """The raw object behind a dotted name, without importing anything and without descriptors."""
    parts = dotted.split(".")
    obj: Any = None
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj = mod
            rest = parts[i:]
            break
    else:
        return _MISSING
    for name in rest:
        try:
            obj = inspect.getattr_static(obj, name)
        except AttributeError:
            return _MISSING
    return obj


def _code_of(obj: Any) -> Any:
    for candidate in (obj, getattr(obj, "__func__", None)):
        code = getattr(candidate, "__code__", None)
        if code is not None:
            return code
    return None


@dataclass
class Snapshot:
    """Identities of the watched names (objects kept alive, so an id can never be recycled)."""

    objects: dict[str, Any] = field(default_factory=dict)
    codes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def take(cls, names: tuple[str, ...] = WATCHED) -> Snapshot:
        snap = cls()
        for name in names:
            obj = _resolve(name)
            if obj is _MISSING:
                continue
            snap.objects[name] = obj
            snap.codes[name] = _code_of(obj)
        return snap

    def changes(self) -> list[dict[str, str]]:
        """What differs now from the snapshot: replaced objects, swapped code, deleted names."""
        out: list[dict[str, str]] = []
        for name, obj in self.objects.items():
            now = _resolve(name)
            if now is _MISSING:
                out.append({"name": name, "change": "deleted"})
            elif now is not obj:
                out.append({"name": name, "change": "replaced", "now": _describe(now)})
            elif _code_of(now) is not self.codes[name]:
                out.append({"name": name, "change": "code replaced", "now": _describe(_code_of(now))})
        return out


def _describe(obj: Any) -> str:
    code = getattr(obj, "__code__", None) if not hasattr(obj, "co_filename") else obj
    if code is not None and hasattr(code, "co_filename"):
        return f"{getattr(code, 'co_name', '?')} at {code.co_filename}:{code.co_firstlineno}"
    return type(obj).__name__


@dataclass
class Clock:
    """The timer functions the measurement uses, bound before the candidate could touch them."""

    now: Callable[[], float]
    snapshot: Snapshot
    threads_at_capture: int
    captured_before_import: bool
    cuda: bool = False
    sync: Callable[[], None] = lambda: None
    event_cls: Any = None
    record: Callable[..., Any] | None = None
    elapsed: Callable[[Any, Any], float] | None = None
    current_stream: Callable[[], Any] | None = None
    default_stream: Callable[[], Any] | None = None

    def new_event(self) -> Any:
        return self.event_cls(enable_timing=True)

    def tampering(self) -> list[dict[str, str]]:
        return self.snapshot.changes()


def capture(device: str = "cpu", before_import: bool = True) -> Clock:
    """Bind the clocks now.  Call this in the child before the candidate module is imported."""
    import torch  # the worker side runs where torch is installed

    snap = Snapshot.take()
    clock = Clock(now=time.perf_counter, snapshot=snap, threads_at_capture=threading.active_count(),
                  captured_before_import=before_import)
    if device.startswith("cuda") and torch.cuda.is_available():
        sync_raw = torch._C._cuda_synchronize  # the C function itself, not the Python wrapper
        index = torch.device(device).index
        if index is None:
            index = torch.cuda.current_device()

        def sync(_raw: Callable[[], None] = sync_raw, _index: int = index) -> None:
            # device-wide: waits for every stream of the device, not only the current one
            prev = torch.cuda.current_device()
            if prev != _index:
                torch.cuda.set_device(_index)
            _raw()
            if prev != _index:
                torch.cuda.set_device(prev)

        clock.cuda = True
        clock.sync = sync
        clock.event_cls = torch.cuda.Event
        clock.record = torch.cuda.Event.record
        clock.elapsed = torch.cuda.Event.elapsed_time
        clock.current_stream = torch.cuda.current_stream
        clock.default_stream = torch.cuda.default_stream
    return clock
