"""Worker side: what must be captured before untrusted code is imported, and checked after.

A candidate can replace ``torch.cuda.synchronize``, ``time.perf_counter`` or ``torch.allclose`` so
that a harness in the same process measures or compares nothing.  The worker therefore captures
the functions it uses itself (``Timers``) and a fingerprint of every such function and every
backend flag (``GlobalState``) before the first untrusted import, and diffs the fingerprint after
the import, after construction and after each call.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (label, dotted path); the object's identity is what is compared
WATCHED_FUNCTIONS: tuple[tuple[str, str], ...] = (
    ("time.perf_counter", "time.perf_counter"),
    ("time.perf_counter_ns", "time.perf_counter_ns"),
    ("time.time", "time.time"),
    ("time.monotonic", "time.monotonic"),
    ("time.process_time", "time.process_time"),
    ("torch.cuda.synchronize", "torch.cuda.synchronize"),
    ("torch.cuda.Event", "torch.cuda.Event"),
    ("torch.cuda.Event.record", "torch.cuda.Event.record"),
    ("torch.cuda.Event.elapsed_time", "torch.cuda.Event.elapsed_time"),
    ("torch.cuda.Event.synchronize", "torch.cuda.Event.synchronize"),
    ("torch.cuda.Event.query", "torch.cuda.Event.query"),
    ("torch.cuda.current_stream", "torch.cuda.current_stream"),
    ("torch.cuda.Stream.synchronize", "torch.cuda.Stream.synchronize"),
    ("torch.allclose", "torch.allclose"),
    ("torch.isclose", "torch.isclose"),
    ("torch.equal", "torch.equal"),
    ("torch.testing.assert_close", "torch.testing.assert_close"),
    ("torch.Tensor.allclose", "torch.Tensor.allclose"),
    ("torch.Tensor.equal", "torch.Tensor.equal"),
    ("torch.Tensor.__eq__", "torch.Tensor.__eq__"),
    ("torch.Tensor.__sub__", "torch.Tensor.__sub__"),
    ("torch.Tensor.abs", "torch.Tensor.abs"),
    ("torch.Tensor.max", "torch.Tensor.max"),
    ("torch.Tensor.cpu", "torch.Tensor.cpu"),
    ("torch.Tensor.item", "torch.Tensor.item"),
    ("torch.nn.Module.__call__", "torch.nn.Module.__call__"),
    ("torch.nn.Module._call_impl", "torch.nn.Module._call_impl"),
    ("torch.profiler.profile", "torch.profiler.profile"),
    ("torch.autograd.profiler.profile", "torch.autograd.profiler.profile"),
)

# flags that change numerics or the conditions of a measurement; value is a getter path
WATCHED_FLAGS: tuple[tuple[str, str], ...] = (
    ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cuda.matmul.allow_tf32"),
    ("torch.backends.cudnn.allow_tf32", "torch.backends.cudnn.allow_tf32"),
    ("torch.get_float32_matmul_precision()", "torch.get_float32_matmul_precision()"),
    ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
     "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"),
    ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
     "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction"),
    ("torch.backends.cudnn.enabled", "torch.backends.cudnn.enabled"),
    ("torch.backends.cudnn.benchmark", "torch.backends.cudnn.benchmark"),
    ("torch.backends.cudnn.deterministic", "torch.backends.cudnn.deterministic"),
    ("torch.backends.mkldnn.enabled", "torch.backends.mkldnn.enabled"),
    ("torch.are_deterministic_algorithms_enabled()", "torch.are_deterministic_algorithms_enabled()"),
    ("torch.get_num_threads()", "torch.get_num_threads()"),
    ("torch.get_default_dtype()", "torch.get_default_dtype()"),
    ("torch.is_grad_enabled()", "torch.is_grad_enabled()"),
)

THREADS = "torch.get_num_threads()"

# what kind of change each watched name is (severity is decided in the parent from this)
PRECISION_FLAGS = frozenset({
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
    "torch.get_float32_matmul_precision()", "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "torch.get_default_dtype()",
})


@dataclass(frozen=True)
class Timers:
    """Functions captured before any untrusted import; the performance stage measures with these."""

    perf_counter: Callable[[], float]
    perf_counter_ns: Callable[[], int]
    monotonic: Callable[[], float]
    time: Callable[[], float]
    sleep: Callable[[float], None]
    cuda_synchronize: Callable[..., None] | None
    cuda_Event: Any
    event_record: Callable[..., Any] | None
    event_synchronize: Callable[..., Any] | None
    event_elapsed_time: Callable[..., float] | None
    allclose: Callable[..., bool]
    torch: Any


def capture_timers() -> Timers:
    import torch

    ev = getattr(torch.cuda, "Event", None)
    return Timers(
        perf_counter=time.perf_counter,
        perf_counter_ns=time.perf_counter_ns,
        monotonic=time.monotonic,
        time=time.time,
        sleep=time.sleep,
        cuda_synchronize=getattr(torch.cuda, "synchronize", None),
        cuda_Event=ev,
        event_record=getattr(ev, "record", None),
        event_synchronize=getattr(ev, "synchronize", None),
        event_elapsed_time=getattr(ev, "elapsed_time", None),
        allclose=torch.allclose,
        torch=torch,
    )


def _lookup(path: str) -> Any:
    import sys

    call = path.endswith("()")
    if call:
        path = path[:-2]
    parts = path.split(".")
    obj: Any = sys.modules.get(parts[0])
    if obj is None:
        return "<missing module>"
    for p in parts[1:]:
        try:
            obj = getattr(obj, p)
        except Exception:
            return "<missing>"
    if call:
        try:
            obj = obj()
        except Exception as exc:  # a flag getter that raises is itself a change worth reporting
            return f"<raises {type(exc).__name__}>"
    return obj


class GlobalState:
    """A fingerprint of the watched functions and flags, taken with functions captured at birth."""

    def __init__(self) -> None:
        import torch

        self._id = id
        self._repr = repr
        # captured with the rest: the canary below must set the count back even where the
        # candidate replaced the setter
        self._get_threads, self._set_threads = torch.get_num_threads, torch.set_num_threads
        self._functions = {label: self._ident(path) for label, path in WATCHED_FUNCTIONS}
        self._flags = {label: self._value(path) for label, path in WATCHED_FLAGS}
        self._modules = self._module_ids()
        self._harness: dict[str, tuple[Any, str, int]] = {}

    def watch_harness(self, package: str) -> None:
        """The worker's own code: every method of the classes and every function of the modules of
        ``package`` (whatever name it runs under) that are loaded now.  A candidate that rewrites
        them (found through sys.modules, gc or its frames) to run a stand-in model or skip a check
        is reported like one that replaces a timer, and so is one that assigns a function's
        ``__code__`` in place.  In-process code can still go deeper (this fingerprint itself, the
        reply): the parent never takes the worker's word for a result; this only adds findings
        when the cheap rewrites are used."""
        import sys

        prefix = package + "."
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not mod_name.startswith(prefix):
                continue
            owners: list[Any] = [mod]
            owners += [v for v in vars(mod).values()
                       if isinstance(v, type) and getattr(v, "__module__", "") == mod_name]
            for owner in owners:
                for name, value in list(vars(owner).items()):
                    if isinstance(value, (staticmethod, classmethod)) or (
                            callable(value) and not isinstance(value, type)
                            and getattr(value, "__module__", None) == mod_name):
                        label = f"{getattr(owner, '__qualname__', mod_name)}.{name}"
                        self._harness[label] = (owner, name, self._id(value), self._code_id(value))

    def canary_threads(self) -> int:
        """Set the intra-op thread count to one more than the worker's own, as the fingerprint's
        value, and return the worker's own.  A candidate that sets the count at import or
        construction (``torch.set_num_threads(1)``, starving a baseline timed in its process) then
        changes the fingerprint even where the worker itself runs one thread, which is the value
        such a candidate sets.  ``end_canary`` puts the worker's count back."""
        own = self._get_threads()
        self._set_threads(own + 1)
        self._flags[THREADS] = self._value(THREADS)
        return own

    def end_canary(self, own: int) -> None:
        """The worker's own count again, where the candidate left the canary alone (a changed
        count stays as the candidate set it: it is reported, and the fingerprint keeps the canary
        so that it stays reported)."""
        if self._value(THREADS) == self._flags[THREADS]:
            self._set_threads(own)
            self._flags[THREADS] = self._value(THREADS)

    def _code_id(self, value: Any) -> int | None:
        inner = getattr(value, "__func__", value)
        code = getattr(inner, "__code__", None)
        return None if code is None else self._id(code)

    def _ident(self, path: str) -> str:
        obj = _lookup(path)
        # a bound descriptor is re-created on each access; compare what it wraps
        inner = getattr(obj, "__func__", obj)
        return f"{type(inner).__name__}@{self._id(inner):x}"

    def _value(self, path: str) -> str:
        return self._repr(_lookup(path))

    @staticmethod
    def _module_ids() -> dict[str, int]:
        import sys

        return {name: id(sys.modules.get(name)) for name in ("time", "torch", "torch.cuda", "torch.testing")}

    def changes(self) -> list[dict[str, str]]:
        """What differs from the fingerprint taken at construction."""
        out: list[dict[str, str]] = []
        for label, path in WATCHED_FUNCTIONS:
            now = self._ident(path)
            if now != self._functions[label]:
                out.append({"name": label, "kind": "function", "before": self._functions[label], "after": now})
        for label, path in WATCHED_FLAGS:
            now = self._value(path)
            if now != self._flags[label]:
                kind = "precision-flag" if label in PRECISION_FLAGS else "flag"
                out.append({"name": label, "kind": kind, "before": self._flags[label], "after": now})
        for label, (owner, name, ident, code) in self._harness.items():
            now = vars(owner).get(name)
            if self._id(now) != ident:
                out.append({"name": f"harness code {label}", "kind": "function", "before": "original",
                            "after": "replaced"})
            elif self._code_id(now) != code:
                # the same function object running other code (``__code__`` assigned in place)
                out.append({"name": f"harness code {label}", "kind": "function", "before": "original",
                            "after": "code rewritten in place"})
        for name, ident in self._module_ids().items():
            if ident != self._modules[name]:
                out.append({"name": f"sys.modules[{name!r}]", "kind": "function", "before": "original",
                            "after": "replaced"})
        return out


class Hasher:
    """Content hashes of tensors with functions captured before untrusted imports."""

    def __init__(self) -> None:
        import torch

        self._blake = hashlib.blake2b
        self._uint8 = torch.uint8
        self._int16 = torch.int16
        self._bf16 = torch.bfloat16
        self._is_tensor = torch.is_tensor

    def digest(self, t: Any) -> str:
        if not self._is_tensor(t):
            return f"value:{t!r}"
        x = t.detach()
        if x.device.type != "cpu":
            x = x.to("cpu")
        x = x.contiguous()
        h = self._blake(digest_size=16)
        h.update(f"{x.dtype}:{tuple(x.shape)}".encode())
        if x.numel():
            if x.dtype == self._bf16:
                x = x.view(self._int16)
            h.update(memoryview(x.reshape(-1).view(self._uint8).numpy()))
        return h.hexdigest()
