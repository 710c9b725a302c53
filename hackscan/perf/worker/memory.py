"""Peak and retained memory of a model, counted by the caching allocator *and* by the device.

The caching allocator sees only torch tensors.  A candidate can ``cudaMalloc`` its own buffers or
make a library allocate workspaces outside it, so the device's free memory (``cudaMemGetInfo``) is
read too: whatever the device lost that the allocator did not reserve is memory held outside
torch.  The baseline is taken in the child *before* the candidate is imported, so buffers the
candidate allocated at import or on its first call (during correctness) still count.

Numbers, in bytes (GPU):

* ``resident``: tensors alive before a call, above the baseline, minus the harness's own input pool
  (parameters, buffers, caches in Python or in C++ ``static`` tensors);
* ``call_peak``: the allocator's peak during one call above what was allocated before it
  (temporaries, workspaces, the output);
* ``outside``: device memory held outside the allocator since the baseline (raw ``cudaMalloc``,
  library handles, loaded module code).  Read per process from NVML where the driver lists this
  process, else from the device's free memory (right only while no other process allocates);
* ``peak`` = resident + call_peak + outside: what the model needs to run once;
* ``growth_per_call``: bytes that stay allocated after each further call on new inputs (allocator
  and outside together): a cache that grows with every input.

On the CPU the same names are filled from the process's RSS and its reset-able high-water mark
(``/proc/self/clear_refs``); ``outside`` is 0 there because RSS already counts everything.
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .plan import InputPlan


def _proc_status() -> dict[str, int]:
    try:
        text = open("/proc/self/status").read()
    except OSError:
        return {}
    out = {}
    for key in ("VmRSS", "VmHWM"):
        m = re.search(key + r":\s+(\d+)\s+kB", text)
        if m:
            out[key] = int(m.group(1)) * 1024
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def _malloc_in_use() -> int | None:
    """Bytes the C heap has handed out and not had back (glibc's ``mallinfo2``), or None.

    RSS misses memory a model keeps when the heap reuses pages that earlier work freed but never
    returned to the system: in a long-lived process a growing cache can then leave RSS flat.  The
    heap's own in-use count moves with every kept tensor (torch's CPU allocator is malloc).
    """
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    info = fn()
    return int(info.uordblks + info.hblkhd)


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class MemoryBaseline:
    device: str
    allocated: int = 0
    reserved: int = 0
    free: int = 0
    total: int = 0
    rss: int = 0
    process: int | None = None  # NVML's count for this process (context included)
    # the process id NVML knows this process by: our own pid, or, in a PID namespace (a container),
    # the one process that appeared in NVML's list while this process created its CUDA context
    nvml_pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def baseline(device: torch.device) -> MemoryBaseline:
    """Memory in use before the candidate exists.  CUDA is initialised here (its context is not
    the candidate's cost)."""
    gc.collect()
    if device.type == "cuda":
        # NVML's process list before and after this process creates its context: where NVML lists
        # processes by their pid outside a PID namespace, the process that appeared is this one
        before = nvml_processes()
        torch.cuda.init()
        torch.empty(1, device=device)  # creates the context and the allocator's first segment
        torch.cuda.synchronize(device)
        free, total = torch.cuda.mem_get_info(device)
        after = nvml_processes()
        pid = own_nvml_pid(before, after)
        process = after.get(pid) if after is not None and pid is not None else None
        return MemoryBaseline(str(device), torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device),
                              free, total, _proc_status().get("VmRSS", 0), process, pid if process is not None else None)
    return MemoryBaseline(str(device), rss=_proc_status().get("VmRSS", 0))


def own_nvml_pid(before: dict[int, int] | None, after: dict[int, int] | None) -> int | None:
    """The pid NVML lists this process under: its own, else the single newcomer between the two
    lists (taken around this process's context creation; none when that is ambiguous)."""
    if after is None:
        return None
    if os.getpid() in after:
        return os.getpid()
    if before is None:
        return None
    new = [p for p in after if p not in before]
    return new[0] if len(new) == 1 else None


def _outside(device: torch.device, base: MemoryBaseline, exclusive: bool = True) -> tuple[int | None, str]:
    """Device memory held outside the allocator since the baseline, and how it was read; None when
    it cannot be read (no NVML entry for this process and the device is shared with another worker)."""
    grown = torch.cuda.memory_reserved(device) - base.reserved
    if base.process is not None:
        now = process_device_bytes(base.nvml_pid)
        if now is not None:
            return max(0, (now - base.process) - grown), "nvml-process"
    if not exclusive:
        return None, "unavailable"
    free, _ = torch.cuda.mem_get_info(device)
    # device-wide: only right when no other process allocates on this GPU meanwhile
    return max(0, (base.free - free) - grown), "device-free"


class _ProcInfo(ctypes.Structure):
    # nvmlProcessInfo_v2_t (the layout of the _v2 and _v3 queries)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


_NVML: Any = None


def _nvml() -> Any:
    global _NVML
    if _NVML is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit failed")
            _NVML = lib
        except (OSError, AttributeError):
            _NVML = False
    return _NVML


def nvml_processes() -> dict[int, int] | None:
    """pid -> device memory (all GPUs, CUDA context included) of every compute process NVML lists;
    None where NVML cannot be loaded.  Processes whose usage NVML cannot tell are left out."""
    lib = _nvml()
    if not lib:
        return None
    count = ctypes.c_uint()
    if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
        return None
    fn = getattr(lib, "nvmlDeviceGetComputeRunningProcesses_v2", None)
    if fn is None:
        return None
    out: dict[int, int] = {}
    for i in range(count.value):
        handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
            continue
        n = ctypes.c_uint(256)
        infos = (_ProcInfo * 256)()
        if fn(handle, ctypes.byref(n), infos) != 0:
            continue
        for k in range(min(n.value, 256)):
            used = infos[k].usedGpuMemory
            if used < (1 << 63):
                out[int(infos[k].pid)] = out.get(int(infos[k].pid), 0) + int(used)
    return out


def process_device_bytes(pid: int | None = None) -> int | None:
    """Device memory this process (or NVML's ``pid``) holds on all GPUs (CUDA context included),
    from NVML's list of compute processes.  Per process, so other processes using the GPU at the
    same time do not disturb it (``cudaMemGetInfo`` is device-wide).  None where NVML cannot be
    loaded or does not list the process (a PID namespace: see ``own_nvml_pid``)."""
    procs = nvml_processes()
    if procs is None:
        return None
    return procs.get(os.getpid() if pid is None else pid)


def model_tensor_bytes(model: Any, depth: int = 3) -> int:
    """Bytes of the distinct tensors a model holds: parameters, buffers, and tensors kept in
    attributes, lists and dicts of its modules (a Python-side output cache counts)."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def add(t: torch.Tensor) -> None:
        nonlocal total
        try:
            st = t.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
        except (RuntimeError, NotImplementedError):
            return
        if key[1] and key not in seen:
            seen.add(key)
            total += key[1]

    def walk(obj: Any, d: int) -> None:
        if isinstance(obj, torch.Tensor):
            add(obj)
        elif d > 0 and isinstance(obj, (list, tuple, set)):
            for x in list(obj)[:10_000]:
                walk(x, d - 1)
        elif d > 0 and isinstance(obj, dict):
            for x in list(obj.values())[:10_000]:
                walk(x, d - 1)

    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else [model]
    for m in modules:
        if isinstance(m, torch.nn.Module):
            for p in m.parameters(recurse=False):
                add(p)
            for b in m.buffers(recurse=False):
                add(b)
        for value in getattr(m, "__dict__", {}).values():
            if not isinstance(value, torch.nn.Module):
                walk(value, depth)
    return total


def measure(call: Callable[[list[Any]], Any], model: Any, plan: InputPlan, device: torch.device,
            base: MemoryBaseline | None, start: int, repeats: int, sync: Callable[[], None],
            harness_bytes: int = 0, exclusive: bool = True) -> dict[str, Any]:
    """Measure one call on inputs ``start`` and ``repeats`` more calls for growth (see module doc).

    ``harness_bytes`` are the measuring harness's own allocations made after the baseline (the
    input pool, the cache-flush buffer); they are not the model's.  ``exclusive`` says no other
    process of ours allocates on the device between the baseline and now; the dynamic stage keeps
    its other worker alive, so there the device's free memory is compared only within one call,
    and memory outside the allocator since the baseline comes from NVML's per-process count.
    """
    gc.collect()  # once: tensors in reference cycles must not count as the model's
    if device.type == "cuda":
        return _measure_cuda(call, model, plan, device, base, start, repeats, sync, harness_bytes, exclusive)
    return _measure_cpu(call, model, plan, base, start, repeats, harness_bytes)


def _growth(held: list[int]) -> float:
    return (held[-1] - held[0]) / (len(held) - 1) if len(held) >= 2 else 0.0


def _measure_cuda(call: Callable[[list[Any]], Any], model: Any, plan: InputPlan, device: torch.device,
                  base: MemoryBaseline | None, start: int, repeats: int, sync: Callable[[], None],
                  harness_bytes: int, exclusive: bool = True) -> dict[str, Any]:
    base = base or MemoryBaseline(str(device))
    # the allocator's baseline is this process's own: always good once taken before the import;
    # memory outside the allocator since then needs NVML's count, or a device nobody else uses
    resident_known = bool(base.free)
    known = resident_known and (base.process is not None or exclusive)
    inputs = plan.inputs_for(start)
    sync()
    torch.cuda.empty_cache()
    alloc0 = torch.cuda.memory_allocated(device)
    reserved0 = torch.cuda.memory_reserved(device)
    free0, _ = torch.cuda.mem_get_info(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = call(inputs)
    sync()
    call_peak = max(0, torch.cuda.max_memory_allocated(device) - alloc0)
    del out
    sync()
    free1, _ = torch.cuda.mem_get_info(device)
    reserved1 = torch.cuda.memory_reserved(device)
    outside_during_call = max(0, (free0 - free1) - (reserved1 - reserved0))
    outside: int | None = None
    method = "during-call"
    if known:
        outside, method = _outside(device, base, exclusive)
        if outside is None:  # NVML stopped answering: what the call itself took is still exact
            known = False
            method = "during-call"
    if outside is None:
        outside = outside_during_call
    resident = max(0, alloc0 - base.allocated - harness_bytes) if resident_known else model_tensor_bytes(model)
    held: list[int] = []
    for r in range(repeats):
        out = call(plan.inputs_for(start + 1 + r))
        sync()
        del out
        sync()
        extra_known = _outside(device, base, exclusive)[0] if known else None
        if extra_known is not None:
            extra = extra_known
        else:
            free_r, _ = torch.cuda.mem_get_info(device)
            extra = max(0, (free1 - free_r) - (torch.cuda.memory_reserved(device) - reserved1))
        # what stays after the call: tensors plus device memory held outside the allocator
        held.append(torch.cuda.memory_allocated(device) + extra)
    process = process_device_bytes(base.nvml_pid)
    return {
        "kind": "cuda",
        "resident": resident,
        "state": model_tensor_bytes(model),
        "call_peak": call_peak,
        "outside": outside,
        "outside_during_call": outside_during_call,
        "peak": resident + call_peak + outside,
        "held_after_calls": held,
        "growth_per_call": _growth(held),
        "baseline_known": known,
        "allocator_baseline_known": resident_known,
        "outside_method": method,
        # device memory of this process outside the allocator (context and libraries included): the
        # parent compares it with the reference worker's when neither has a pre-import baseline
        "process_nonallocator": None if process is None else max(0, process - torch.cuda.memory_reserved(device)),
        "harness_bytes": harness_bytes,
    }


def _measure_cpu(call: Callable[[list[Any]], Any], model: Any, plan: InputPlan, base: MemoryBaseline | None,
                 start: int, repeats: int, harness_bytes: int) -> dict[str, Any]:
    inputs = plan.inputs_for(start)
    rss0 = _proc_status().get("VmRSS", 0)
    peak_known = _reset_peak_rss()
    out = call(inputs)
    hwm = _proc_status().get("VmHWM", 0)
    call_peak = max(0, hwm - rss0) if peak_known else 0
    del out
    # RSS also grows with every module imported after the baseline (a compiled extension pulls in
    # setuptools), so on the CPU the model's resident memory is the tensors it holds
    resident = model_tensor_bytes(model)
    rss_growth = max(0, rss0 - base.rss - harness_bytes) if base and base.rss else 0
    held: list[int] = []
    heap: list[int] = []
    for r in range(repeats):
        out = call(plan.inputs_for(start + 1 + r))
        del out
        held.append(_proc_status().get("VmRSS", 0))
        in_use = _malloc_in_use()
        if in_use is not None:
            heap.append(in_use)
    return {
        "kind": "rss",
        "resident": resident,
        "state": resident,
        "call_peak": call_peak,
        "outside": 0,
        "outside_during_call": 0,
        "peak": resident + call_peak,
        "held_after_calls": held,
        "heap_after_calls": heap,
        # either count may miss what the other sees (pages reused, memory mapped outside malloc)
        "growth_per_call": max(_growth(held), _growth(heap) if len(heap) == len(held) else 0.0),
        "baseline_known": bool(base and base.rss),
        "peak_known": peak_known,
        "rss_growth_since_baseline": rss_growth,
        "harness_bytes": harness_bytes,
    }
