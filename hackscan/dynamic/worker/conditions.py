"""Worker side: one call of the model under each of several process conditions a harness may or may
not set, on fresh copies of the same input.

An honest kernel computes the same function however it is observed.  Harnesses differ from one
another and from hackscan's probes in global torch state (grad mode, inference mode, deterministic
algorithms, thread count, the RNG state their seeding leaves), in what is on the call stack and on
which thread the call runs, and in what the allocator did just before (KernelBench's timing loop
writes a large block between calls to flush the cache).  A candidate that keys its work on any of
these computes correctly under one and not under another; the parent compares each output with the
reference's on that input and names the condition that differs (``judge.py``).

Every condition is undone after its call.  Parameters (thread count, seed, the caller's dress, the
order) come from the parent, drawn from the run's seed, so ``--seed`` replays them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from .base import make_caller


def call_under(cond: dict[str, Any], call: Callable[[Any, list[Any]], Any], model: Any, args: list[Any],
               device: str) -> Any:
    """``call(model, args)`` under ``cond`` (``{"name": ..., params}``); raises what the call raises."""
    name = cond["name"]
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
