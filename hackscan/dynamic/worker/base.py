"""Worker side: what both roles share (the captured functions, the global-state fingerprint, the
untrusted import, the model's construction and call), for ``reference.py`` and ``candidate.py``.

A worker serves commands from the parent over its socket until ``exit`` (the loop is ``serve.py``).
Everything a command raises, including ``SystemExit`` from untrusted code, is answered as an error
reply; only a crash of the process itself ends the conversation, and the parent then reports it
with the exit status the sandbox (or the zygote) saw.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import socket
import sys
import traceback
import types
from collections.abc import Iterator
from typing import Any

import torch

from ..shared.probes import derive
from . import perf
from .guard import GlobalState, Hasher, Timers, capture_timers

_CUDA_MISSING = re.compile(
    r"Torch not compiled with CUDA|Found no NVIDIA driver|no CUDA GPUs are available|CUDA driver version is "
    r"insufficient|CUDA_HOME environment variable is not set|No CUDA runtime is found|"
    r"Cannot access accelerator device when none is available|nvcc: not found|nvcc.*No such file|"
    r"Tried to instantiate dummy base class",
    re.I)
_TRITON_MISSING = re.compile(r"No module named 'triton'|triton.*(requires|needs).*(GPU|CUDA)|0 active drivers", re.I)


def describe_error(exc: BaseException, filename: str | None = None) -> dict[str, Any]:
    """A JSON description of an exception, with the deepest line of ``filename`` it passed through."""
    tb = traceback.extract_tb(exc.__traceback__)
    line = None
    if filename:
        for fr in tb:
            if fr.filename == filename:
                line = fr.lineno
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    need = None
    if _CUDA_MISSING.search(full) and not torch.cuda.is_available():
        need = "cuda"
    elif _TRITON_MISSING.search(full):
        need = "triton"
    return {
        "type": type(exc).__name__,
        "message": text[-2000:],
        "line": line,
        "traceback": full[-4000:],
        "needs": need,
        "compile_error": "Error building extension" in full or "ninja" in text.lower() and "error" in text.lower(),
    }


def import_source(code: str, path: str, name: str, file: str | None = None,
                  register: bool = True) -> types.ModuleType:
    """Execute untrusted source as a fresh module (never as ``__main__``).

    ``file`` is the ``__file__`` the harness profile shows (the source is compiled under it, so
    ``co_filename`` and tracebacks seen from inside agree with it); without it, ``__file__`` points
    into the worker's private working directory and the code is compiled under ``path``.
    ``register``: whether the module goes into ``sys.modules`` (KernelBench's
    ``module_from_spec`` + ``exec_module`` leaves it out).
    """
    import importlib.machinery

    if file is None:
        # ``__file__`` points into the worker's private working directory (see zygote._child), so a
        # candidate that builds or writes "next to itself" writes there, never into the user's tree.
        # Tracebacks still name the real path (the code is compiled under it).
        file = os.path.join(os.getcwd(), os.path.basename(path).replace(":", "_") or "candidate.py")
        compiled_as = path
    else:
        compiled_as = file
    mod = types.ModuleType(name)
    mod.__file__ = file
    # what ``spec_from_file_location`` gives a module: a spec, a loader, no package
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=file)
    mod.__spec__.has_location = True
    mod.__package__ = ""
    mod.__cached__ = None  # type: ignore[attr-defined]
    if register:
        sys.modules[name] = mod
    # the worker runs in its private directory, so ``path`` (often relative) names no file there;
    # ``inspect.getsource`` must still find the code: ``@triton.jit`` reads its function's source
    # and otherwise refuses with "@jit functions should be defined in a Python file" (seen on an
    # H200).  An entry with no mtime is never evicted by ``linecache.checkcache``.
    linecache.cache[compiled_as] = (len(code), None, code.splitlines(True), compiled_as)
    exec(compile(code, compiled_as, "exec"), mod.__dict__)  # noqa: S102 - the worker exists to run it
    return mod


def make_caller(name: str = "evaluate", module: str = "__main__", filename: str = "eval.py") -> Any:
    """The one function that calls the model, dressed as the harness's own (``name`` in ``module``,
    defined in ``filename``).

    A candidate can walk its caller frames (``sys._getframe``, ``inspect.stack``,
    ``sys._current_frames``): the frame right above ``forward`` is this one, with the names and
    locals a harness has (``model_new``, ``inputs``, ``output_new``), never a probe's name or seed,
    and no name of ours in its code object or its globals.
    """
    import builtins

    def caller(model_new: Any, inputs: Any) -> Any:
        output_new = model_new(*inputs)
        return output_new

    code = caller.__code__.replace(co_name=name, co_qualname=name, co_filename=filename)
    glb = {"__name__": module, "__builtins__": builtins}
    return types.FunctionType(code, glb, name)


@contextlib.contextmanager
def perturbed_init(seed: int, mask: set[int] | None = None,
                   events: list[tuple[int, int, bool]] | None = None) -> Iterator[None]:
    """Parameters whose default init is an identity (ones, zeros, a constant) get random values.

    Applied while *constructing* both models under the same seed, so that a model that folds its
    parameters in ``__init__`` folds the perturbed values, and one that ignores a parameter whose
    default is the identity (scale 1, bias 0) no longer agrees with the reference.  Every init call
    and every float ``nn.Parameter`` is an event with an index and its own noise draw, applied or
    not, so that ``mask`` (the events to apply) leaves the others' values and indices unchanged;
    ``events`` receives ``(index, data_ptr, applied)``.  Buffers are left alone: a buffer is as
    often a derived constant as a parameter.
    """
    # the noise has a seed of its own, derived one-way from the construction seed
    gen = torch.Generator().manual_seed(derive(seed, "perturb"))
    init = torch.nn.init
    saved = {n: getattr(init, n) for n in ("ones_", "zeros_", "constant_")}
    param_new = torch.nn.Parameter.__new__
    counter = [0]

    def event(t: torch.Tensor) -> tuple[int, torch.Tensor, bool]:
        idx = counter[0]
        counter[0] += 1
        noise = torch.rand(t.shape, generator=gen, dtype=torch.float32).to(t.dtype)
        return idx, noise, mask is None or idx in mask

    def note(idx: int, t: torch.Tensor, applied: bool) -> None:
        if events is not None:
            events.append((idx, t.data_ptr() if t.numel() else 0, applied))

    def filler(kind: str) -> Any:
        original = saved[kind]

        def fill(t: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            idx, noise, apply = event(t)
            if not apply:
                out = original(t, *args, **kwargs)
            else:
                with torch.no_grad():
                    if kind == "ones_":
                        out = t.copy_(0.5 + noise)
                    elif kind == "zeros_":
                        out = t.copy_(noise - 0.5)
                    else:
                        val = float(args[0] if args else kwargs.get("val", 0.0))
                        out = t.copy_(val + (noise - 0.5) * max(1.0, abs(val)))
            note(idx, t, apply)
            return out

        return fill

    def new(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        if not (torch.is_tensor(data) and data.is_floating_point() and data.numel() > 0 and data.device.type != "meta"):
            return param_new(cls, data, requires_grad)
        idx, noise, apply = event(data)
        applied = False
        if apply:
            with torch.no_grad():
                flat = data.reshape(-1)
                if bool((flat == flat[0]).all()):
                    data = data + (noise.to(data.device) - 0.5) * max(1.0, abs(float(flat[0])))
                    applied = True
        param = param_new(cls, data, requires_grad)
        note(idx, param, applied)
        return param

    init.ones_, init.zeros_, init.constant_ = filler("ones_"), filler("zeros_"), filler("constant_")
    torch.nn.Parameter.__new__ = new  # type: ignore[method-assign]
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(init, n, f)
        torch.nn.Parameter.__new__ = param_new  # type: ignore[method-assign]


def construct(cls: type, init_inputs: list[Any], seed: int, perturb: bool, device: str,
              mask: set[int] | None = None, record: dict[str, Any] | None = None,
              eval_mode: bool = False) -> torch.nn.Module:
    """Build a model under ``seed`` (and the identity perturbation); ``record`` receives which
    perturbation events were applied and the parameter or buffer each one ended up in.
    ``eval_mode``: the harness calls ``.eval()`` on both models (its profile says so)."""
    torch.manual_seed(seed)
    events: list[tuple[int, int, bool]] = []
    if perturb:
        with perturbed_init(seed, mask, events):
            model = cls(*init_inputs)
    else:
        model = cls(*init_inputs)
    if record is not None and isinstance(model, torch.nn.Module):
        by_ptr = {t.data_ptr(): name for name, t in list(model.named_parameters()) + list(model.named_buffers())
                  if torch.is_tensor(t) and t.numel()}
        record["applied"] = {idx for idx, _, applied in events if applied}
        record["names"] = {idx: by_ptr[ptr] for idx, ptr, applied in events if applied and ptr in by_ptr}
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if eval_mode:
            model.eval()
    return model


def storages(values: list[Any]) -> list[tuple[int, int]]:
    """(start, end) byte ranges of the storages behind tensors."""
    out = []
    for v in values:
        if torch.is_tensor(v) and v.device.type != "meta":
            st = v.untyped_storage()
            if st.nbytes():
                out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    return out


def overlaps(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


class Worker:
    """State both roles share: captured functions, the global-state fingerprint, the device."""

    def __init__(self, spec: dict[str, Any]):
        # captured before any untrusted import: these are what the worker itself uses
        self.timers: Timers = capture_timers()
        self.state = GlobalState()
        self.hasher = Hasher()
        self.device: str = spec.get("device", "cpu")
        self.spec = spec
        self.changes: list[dict[str, str]] = []
        self._seen_changes: set[tuple[str, str]] = set()
        self.channel: socket.socket | None = None
        self.perf_prepared: Any = None
        self.perf_prepare_error: str | None = None
        self.perf_inputs: dict[str, list[list[Any]]] = {}
        self.perf_spin_inputs: list[Any] | None = None
        self.perf_setup: Any = None  # the timing setup the paired blocks reuse (worker/perf.py)
        # clocks and the memory baseline, before anything untrusted is imported or built
        perf.prepare(self)
        # the worker's own classes and functions, fingerprinted before the untrusted import: a
        # candidate that rewrites them is reported as tampering (HS5xx), whatever it achieves
        self.state.watch_harness(__name__.split(".")[0])

    def note_changes(self, phase: str) -> list[dict[str, str]]:
        return self._note(self.state.changes(), phase)

    def _note(self, changes: list[dict[str, str]], phase: str) -> list[dict[str, str]]:
        """The changes not reported yet, stamped with ``phase`` and added to ``changes``."""
        fresh = []
        for c in changes:
            key = (c["name"], c["after"])
            if key not in self._seen_changes:
                self._seen_changes.add(key)
                c = dict(c, phase=phase)
                fresh.append(c)
                self.changes.append(c)
        return fresh

    def sync(self) -> None:
        if self.device == "cuda" and self.timers.cuda_synchronize is not None:
            self.timers.cuda_synchronize()

    def timed_call(self, fn: Any, args: list[Any]) -> tuple[Any, float]:
        self.sync()
        start = self.timers.perf_counter()
        with torch.no_grad():
            out = fn(*args)
        self.sync()
        return out, self.timers.perf_counter() - start

    def handle(self, cmd: str, msg: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

