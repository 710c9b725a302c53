"""A lower bound on how fast an operation can possibly run on this device.

Any correct implementation must read its inputs once and write its outputs once, and do the FLOPs
the operation needs.  At the device's measured copy bandwidth and its measured matmul peak that
takes at least ``max(bytes / bandwidth, flops / peak)``.  A candidate timed below that bound did not
do the work inside the timed window (side stream, deferred work, cached result, patched timer).

The two ceilings are measured once per device (and torch/CUDA version) and cached in
``~/.cache/hackscan/ceilings.json`` (``$HACKSCAN_CACHE_DIR`` or ``$XDG_CACHE_HOME`` move it).  The
FLOP ceiling is the best of fp32, TF32, fp16 and bf16 matmuls: a candidate may legally use any of
them, and the bound must stay a *lower* bound.  FLOPs are counted on the reference with
``torch.utils.flop_counter`` (matmuls, convolutions, attention; elementwise work counts as zero, so
for those operations the bandwidth term decides).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .fingerprint import flatten_outputs

CEILINGS_VERSION = 1
_BW_RANGE = (1e8, 1e14)  # bytes/s: anything outside is a broken measurement or a poisoned cache
_FLOP_RANGE = (1e8, 1e17)


def cache_dir() -> Path:
    env = os.environ.get("HACKSCAN_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "hackscan"


def device_key(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (f"cuda|{props.name}|cc{props.major}.{props.minor}|sm{props.multi_processor_count}"
                f"|torch{torch.__version__}|cuda{torch.version.cuda}")
    model = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu|{model}|threads{torch.get_num_threads()}|torch{torch.__version__}"


def _valid(entry: Any) -> bool:
    try:
        bw = float(entry["bandwidth_Bps"])
        peak = float(entry["peak_flops"])
    except (KeyError, TypeError, ValueError):
        return False
    return (entry.get("version") == CEILINGS_VERSION and _BW_RANGE[0] <= bw <= _BW_RANGE[1]
            and _FLOP_RANGE[0] <= peak <= _FLOP_RANGE[1])


def ceilings(device: torch.device, directory: Path | None = None, refresh: bool = False, clock: Any = None,
             write: bool = True, known: Any = None) -> dict[str, Any]:
    """The device's bandwidth and FLOP ceilings, from the cache or measured now (and cached).

    ``clock`` (a ``hackscan.perf.worker.clock.Clock``) times the measurement with functions bound before
    untrusted code ran; ``write=False`` keeps a measurement out of the shared cache."""
    directory = directory or cache_dir()
    path = directory / "ceilings.json"
    key = device_key(device)
    data: dict[str, Any] = {}
    try:
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict):
            data = loaded
    except (OSError, ValueError):
        pass
    entry = data.get(key)
    if not refresh and _valid(entry):
        return {**entry, "source": "cache", "key": key}
    # what the parent holds for this device (a sandboxed worker's own cache folder is private and
    # empty: without this, every reference worker measured the device again, 15-30 s each)
    given = known.get(key) if isinstance(known, dict) else None
    if not refresh and _valid(given):
        return {**given, "source": "cache", "key": key}
    entry = measure_ceilings(device, clock)
    if not write or not _valid(entry):
        return {**entry, "source": "measured (not cached)", "key": key}
    data[key] = entry
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ceilings.", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: measure again next time
    return {**entry, "source": "measured", "key": key}


def _best_seconds(fn: Callable[[], Any], reps: int, clock: Any, cuda: bool) -> float:
    fn()
    clock.sync()
    best = float("inf")
    for _ in range(reps):
        if cuda:
            start, end = clock.new_event(), clock.new_event()
            stream = clock.current_stream()
            clock.record(start, stream)
            fn()
            clock.record(end, stream)
            clock.sync()
            best = min(best, clock.elapsed(start, end) / 1e3)
        else:
            t0 = clock.now()
            fn()
            best = min(best, clock.now() - t0)
    return best


def measure_ceilings(device: torch.device, clock: Any = None) -> dict[str, Any]:
    cuda = device.type == "cuda"
    if clock is None:
        from .clock import capture

        clock = capture(str(device), before_import=False)
    t_start = time.perf_counter()
    if cuda:
        free, _ = torch.cuda.mem_get_info(device)
        copy_bytes = int(min(1 << 30, free // 8))
        mm_n = 8192 if free > (8 << 30) else 4096
        dtypes = [("fp32", torch.float32, False), ("tf32", torch.float32, True), ("fp16", torch.float16, False),
                  ("bf16", torch.bfloat16, False)]
        reps = 5
    else:
        copy_bytes = 128 << 20
        mm_n = 1024
        dtypes = [("fp32", torch.float32, False), ("bf16", torch.bfloat16, False)]
        reps = 3
    n = copy_bytes // 4
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    copy_s = _best_seconds(lambda s=src, d=dst: d.copy_(s), reps, clock, cuda)
    bandwidth = 2 * n * 4 / copy_s
    del src, dst
    flops: dict[str, float] = {}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, tf32 in dtypes:
            try:
                torch.backends.cuda.matmul.allow_tf32 = tf32
                a = torch.rand(mm_n, mm_n, device=device, dtype=dtype)
                b = torch.rand(mm_n, mm_n, device=device, dtype=dtype)
                sec = _best_seconds(lambda a=a, b=b: torch.mm(a, b), reps, clock, cuda)
                flops[name] = 2 * mm_n**3 / sec
                del a, b
            except RuntimeError:  # a dtype this device cannot multiply
                continue
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    if cuda:
        torch.cuda.empty_cache()
    return {
        "version": CEILINGS_VERSION,
        "bandwidth_Bps": bandwidth,
        "flops": flops,
        "peak_flops": max(flops.values()) if flops else 0.0,
        "copy_bytes": copy_bytes,
        "matmul_n": mm_n,
        "measured_in_s": time.perf_counter() - t_start,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _distinct(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[tuple[int, tuple[int, ...], tuple[int, ...]]] = set()
    out = []
    for t in tensors:
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()))
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def io_bytes(inputs: Sequence[Any], outputs: Any) -> dict[str, int]:
    """Bytes an implementation must read (every input tensor element once) and write (every output
    element once; an output that shares storage with an input needs no write)."""
    ins = _distinct([t for t in flatten_outputs(list(inputs)) if isinstance(t, torch.Tensor)])
    outs = _distinct([t for t in flatten_outputs(outputs) if isinstance(t, torch.Tensor)])
    in_storages = set()
    for t in ins:
        try:
            in_storages.add(t.untyped_storage().data_ptr())
        except RuntimeError:
            pass
    read = sum(t.numel() * t.element_size() for t in ins)
    written = 0
    aliased = 0
    for t in outs:
        try:
            shares = t.untyped_storage().data_ptr() in in_storages
        except RuntimeError:
            shares = False
        if shares:
            aliased += 1
        else:
            written += t.numel() * t.element_size()
    return {"read": read, "written": written, "aliased_outputs": aliased}


def count_flops(call: Callable[[], Any]) -> dict[str, Any]:
    """FLOPs of one call of the reference, by ATen op."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = call()
    by_op: dict[str, int] = {}
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        by_op[str(op)] = int(n)
    return {"total": int(counter.get_total_flops()), "by_op": by_op, "output": out}
