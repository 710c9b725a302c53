"""Worker side: one call of the model under each of several process conditions a harness may or may
not set, on fresh copies of the same input.

An honest kernel computes the same function however it is observed.  Harnesses differ from one
another and from hackscan's probes in global torch state (grad mode, inference mode, deterministic
algorithms, thread count, the RNG state their seeding leaves), in what is on the call stack and on
which thread the call runs, in what the allocator did just before (KernelBench's timing loop
writes a large block between calls to flush the cache), in whether the cyclic collector is on
(``timeit`` and many timing loops switch it off), in whether it is the model itself or a copy of
it that is called (a harness that deep-copies the model, or unpickles a replica), in the module's
train/eval mode (for a task whose reference does not depend on it), and on a GPU in when the inputs' values land
(a harness's copy into its buffers, or the op that produced them, is still queued on the current
stream when the call starts) and in whether the call is captured into a CUDA graph and replayed
(harnesses that time graph replays, and ``torch.compile(mode="reduce-overhead")``).  A candidate that keys its work on any of
these computes correctly under one and not under another; the parent compares each output with the
reference's on that input and names the condition that differs (``judge.py``).

Every condition is undone after its call.  Parameters (thread count, seed, the caller's dress, the
order) come from the parent, drawn from the run's seed, so ``--seed`` replays them.
"""

from __future__ import annotations

import copy
import gc
import threading
from collections.abc import Callable
from typing import Any

import torch

from .base import make_caller

# bound when the worker starts, before any candidate code: the "stream" condition's delay must be
# the device's, not a function the candidate replaced with one that returns at once
_CUDA_SLEEP = getattr(torch._C, "_cuda_sleep", None)
_CUDA_SYNC = getattr(torch._C, "_cuda_synchronize", None)


def call_under(cond: dict[str, Any], call: Callable[[Any, list[Any]], Any], model: Any, args: list[Any],
               device: str) -> Any:
    """``call(model, args)`` under ``cond`` (``{"name": ..., params}``); raises what the call raises."""
    name = cond["name"]
    if name == "stream":
        with torch.no_grad():
            return _behind_the_stream(cond, call, model, args, device)
    if name == "graph":
        with torch.no_grad():
            return _replayed(call, model, args, device)
    if name == "grad":
        with torch.enable_grad():
            return call(model, args)
    if name == "inference":
        with torch.inference_mode():
            return call(model, args)
    with torch.no_grad():
        if name == "deterministic":
            set_det = getattr(torch._C, "_set_deterministic_algorithms", None) or torch.use_deterministic_algorithms
            det = torch.are_deterministic_algorithms_enabled()
            warn = torch.is_deterministic_algorithms_warn_only_enabled()
            set_det(True, warn_only=True)
            try:
                return call(model, args)
            finally:
                set_det(det, warn_only=warn)
        if name == "threads":
            before = torch.get_num_threads()
            torch.set_num_threads(max(1, int(cond.get("n", 1))))
            try:
                return call(model, args)
            finally:
                torch.set_num_threads(before)
        if name == "rng":
            state = torch.get_rng_state()
            cuda_state = torch.cuda.get_rng_state_all() if device == "cuda" else None
            torch.manual_seed(int(cond.get("seed", 42)))
            try:
                return call(model, args)
            finally:
                torch.set_rng_state(state)
                if cuda_state is not None:
                    torch.cuda.set_rng_state_all(cuda_state)
        if name == "frames":
            other = make_caller(str(cond.get("function", "train_step")), str(cond.get("module", "trainer")),
                                str(cond.get("file", "train.py")))
            return other(model, args)
        if name == "gc":
            was = gc.isenabled()
            gc.disable()
            try:
                return call(model, args)
            finally:
                if was:
                    gc.enable()
        if name == "eval":
            # only asked for a reference whose result does not depend on the mode (the plan's test)
            was = bool(getattr(model, "training", False))
            model.eval()
            try:
                return call(model, args)
            finally:
                model.train(was)
        if name == "copy":
            # a replica: what a harness that copies the model (or unpickles it elsewhere) calls
            return call(copy.deepcopy(model), args)
        if name == "flush":
            block = torch.empty(int(cond.get("bytes", 32 << 20)) // 4, dtype=torch.float32, device=device)
            block.fill_(float(cond.get("value", 1.0)))
            del block
            return call(model, args)
        if name == "thread":
            box: dict[str, Any] = {}

            def run() -> None:
                try:
                    with torch.no_grad():
                        box["out"] = call(model, args)
                except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
                    box["error"] = exc

            t = threading.Thread(target=run, name=str(cond.get("thread_name", "Thread-1")))
            t.start()
            t.join()
            if "error" in box:
                raise box["error"]
            return box.get("out")
    raise ValueError(f"unknown condition {name!r}")


def _poison(t: torch.Tensor) -> None:
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    else:
        t.zero_()  # not a huge index: a stale read should be wrong, not an illegal address


def _behind_the_stream(cond: dict[str, Any], call: Callable[[Any, list[Any]], Any], model: Any,
                       args: list[Any], device: str) -> Any:
    """The call with its inputs' values still on their way: buffers holding NaN, then a sleep of the
    current stream, then the copy of the values, queued behind the sleep.  Work ordered on the current
    stream (or on a stream made to wait for it) reads the values; a kernel launched on a stream that
    does not wait for the current one reads the buffers before the values land.  The caller waits for
    the whole device before it reads the output.  Off a GPU it is the plain call."""
    tensors = [a for a in args if torch.is_tensor(a) and a.is_cuda]
    if device != "cuda" or not tensors or _CUDA_SLEEP is None or _CUDA_SYNC is None:
        return call(model, args)
    staged = []
    for a in args:
        if torch.is_tensor(a) and a.is_cuda:
            b = torch.empty_like(a)
            _poison(b)
            staged.append(b)
        else:
            staged.append(a)
    _CUDA_SYNC()  # the poison is in place before the sleep starts
    _CUDA_SLEEP(int(cond.get("cycles", 100_000_000)))
    for b, a in zip(staged, args, strict=True):
        if b is not a:
            b.copy_(a)
    return call(model, staged)


def _rolled(a: torch.Tensor) -> torch.Tensor:
    """Other values from the same distribution (index tensors stay in range): the elements shifted
    by one place in memory order, in a tensor of ``a``'s layout."""
    out = torch.empty_like(a)
    out.copy_(a.reshape(-1).roll(1).reshape(a.shape))
    return out


def _replayed(call: Callable[[Any, list[Any]], Any], model: Any, args: list[Any], device: str) -> Any:
    """The call captured into a CUDA graph on other values (after a warm-up on a side stream, as
    torch's documentation asks), then the graph replayed once ``args``' values are in its static
    inputs.  The graph's output holds what the replay computed: work done only while capturing, or
    skipped because a capture is under way, leaves the capture-time values (or none) in it.  A
    call that cannot be captured raises, which the check notes and does not report.  Off a GPU it
    is the plain call."""
    if device != "cuda" or not any(torch.is_tensor(a) and a.is_cuda for a in args):
        return call(model, args)
    static = [_rolled(a) if torch.is_tensor(a) and a.is_cuda else a for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(model, static)  # lazy initialisation and autotuning happen outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(model, static)
    for st, a in zip(static, args, strict=True):
        if st is not a:
            st.copy_(a)
    graph.replay()
    return out
