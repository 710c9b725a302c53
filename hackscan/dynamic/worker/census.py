"""Worker side: which ATen / library work one forward call runs, and how long it takes.

On the CPU a ``TorchDispatchMode`` sees every ATen op that reaches the dispatcher, from Python and
from C++ extensions alike (``at::matmul`` inside an extension shows up as ``aten.mm``), and times
each one; time outside any op is the candidate's own code.  The profiler would see the same but
costs about 2 s to start on this machine.  On a GPU the profiler is the only way to see device
time per kernel, so it is used there: ATen, cuBLAS and cuDNN kernels are told from custom ones by
name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

_LIBRARY_KERNEL = re.compile(
    r"at::native|at::cuda|^void at::|cutlass|cublas|cudnn|^(ampere|sm\d+|volta|turing|hopper)_|gemm|gemv|"
    r"nchwToNhwc|nhwcToNchw|implicit_convolve|winograd|fft|elementwise_kernel|reduce_kernel|"
    r"vectorized_elementwise|unrolled_elementwise|CatArrayBatchedCopy|softmax_warp|cunn_|Memcpy|Memset", re.I)


def op_name(func: Any) -> str:
    name = str(func)
    # aten.mm.default -> aten.mm
    parts = name.split(".")
    if len(parts) >= 3:
        return ".".join(parts[:2])
    return name


def _numel(x: Any) -> int:
    if torch.is_tensor(x):
        return x.numel()
    if isinstance(x, (list, tuple)):
        return sum(_numel(v) for v in x)
    return 0


def work(name: str, args: tuple, out: Any) -> int:
    """A size of the work one op call does, comparable across processes (unlike its time on a
    busy machine): multiply-adds for matrix products and convolutions, output elements otherwise."""
    try:
        if name in ("aten.mm", "aten.addmm"):
            a, b = args[-2], args[-1]
            return int(a.shape[0] * a.shape[1] * b.shape[1])
        if name in ("aten.bmm", "aten.baddbmm"):
            a, b = args[-2], args[-1]
            return int(a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2])
        if "conv" in name and len(args) > 1 and torch.is_tensor(args[1]):
            return int(_numel(out) * max(1, args[1][0].numel()))
    except (AttributeError, IndexError, TypeError):
        pass
    return max(1, _numel(out))


def cpu_census(fn: Callable[..., Any], args: list[Any], clock: Callable[[], float]) -> dict[str, Any]:
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: dict[str, list[float]] = {}

    class Census(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            start = clock()
            out = func(*args, **(kwargs or {}))
            spent = clock() - start
            name = op_name(func)
            slot = ops.setdefault(name, [0, 0.0, 0])
            slot[0] += 1
            slot[1] += spent
            slot[2] += work(name, args, out)
            return out

    start = clock()
    with torch.no_grad(), Census():
        fn(*args)
    total = clock() - start
    return {
        "method": "dispatch",
        "total_s": total,
        "ops": {k: {"count": int(v[0]), "seconds": v[1], "work": int(v[2])} for k, v in ops.items()},
    }


def cuda_census(fn: Callable[..., Any], args: list[Any], clock: Callable[[], float],
                sync: Callable[[], None]) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    sync()
    start = clock()
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        sync()
    total = clock() - start
    ops: dict[str, dict[str, Any]] = {}
    kernels: dict[str, dict[str, Any]] = {}
    for ev in prof.key_averages():
        name = ev.key
        dev = float(getattr(ev, "self_device_time_total", 0.0) or getattr(ev, "self_cuda_time_total", 0.0) or 0.0)
        if name.startswith("aten::"):
            ops["aten." + name[6:]] = {"count": int(ev.count), "seconds": float(ev.self_cpu_time_total) / 1e6}
        elif dev > 0 and not name.startswith(("cuda", "Activity Buffer")):
            kernels[name] = {"count": int(ev.count), "device_s": dev / 1e6,
                             "library": bool(_LIBRARY_KERNEL.search(name))}
    return {"method": "profiler", "total_s": total, "ops": ops, "kernels": kernels}


def census(fn: Callable[..., Any], args: list[Any], device: str, clock: Callable[[], float],
           sync: Callable[[], None]) -> dict[str, Any]:
    """The census of the second of two calls: the first use of a dispatch mode (or of the profiler)
    for an op costs milliseconds of set-up that would otherwise count as the candidate's own work."""
    run = cuda_census if device == "cuda" else (lambda f, a, c, s: cpu_census(f, a, c))
    run(fn, [a.clone() if torch.is_tensor(a) else a for a in args], clock, sync)
    return run(fn, args, clock, sync)
