"""What the workers of the dynamic stage call to measure speed and memory (PROTOCOL.md, "perf").

The dynamic stage imports this module in each worker before any untrusted import, then, after the
candidate passed correctness, calls ``measure`` first in the reference worker, then in the
candidate worker::

    raw = measure(model, input_sets, role="reference" | "candidate", device=..., timers=..., options=...)

``input_sets`` maps ``"original"`` to N distinct input sets (fresh ``get_inputs()`` draws, already
on the device, the same values in both workers) and, optionally, hidden-distribution names
(``"sign_flip"``, ``"randn"``, ...) to sets at task shapes.  Every function returns a plain
JSON-able dict; the parent (``parent_side.evaluate``) compares the two.  Nothing here trusts the
candidate: the clocks were bound before it was imported, outputs are fingerprinted after the clock
stops, and the identity of every timer is checked again at the end.

``prepare(device)``, called in the worker before the untrusted import, also takes the memory
baseline that lets raw ``cudaMalloc`` at import or first call count (see ``memory``); without it
the clocks come from the dynamic stage's ``Timers`` and memory outside the allocator is estimated
per process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..options import CURVE_SERIES, HIDDEN_DISTRIBUTIONS, SCHEMA, PerfOptions
from . import baselines, bounds
from . import memory as memory_mod
from .clock import Clock, Snapshot, capture
from .fingerprint import fingerprint
from .plan import REPEAT, InputPlan, halved, nbytes
from .timing import Flusher, Target, _one_call, calibrate, time_series

# Taken when the dynamic stage imports this module, which it does before any untrusted import:
# the pre-import identities (and code objects) of every watched timer.
_IMPORT_SNAPSHOT = Snapshot.take()
_IMPORT_CURRENT_STREAM = torch.cuda.current_stream
_IMPORT_DEFAULT_STREAM = torch.cuda.default_stream
_IMPORT_SYNC_RAW = getattr(torch._C, "_cuda_synchronize", None)

# hidden distributions of the dynamic stage worth timing, in order of preference (value guards
# test signs and ranges); at most ``MAX_HIDDEN`` are timed
HIDDEN_PREFERENCE = ("sign_flip", "shift_up", "randn", "sparse_negatives")
MAX_HIDDEN = 2

# index ranges of the input plan, so that no two series ever see the same values
HIDDEN_START = 100_000
HIDDEN_STRIDE = 10_000
PAIRED_OFFSET = 5_000  # the main-distribution calls interleaved with a hidden series
COMPILE_MIN_BUDGET_S = 20.0
MEMORY_START = 50_000
FLOPS_INDEX = 0


@dataclass
class Prepared:
    """Captured before the candidate exists: clocks, the memory baseline, the precision flags."""

    device: torch.device
    clock: Clock
    memory: memory_mod.MemoryBaseline
    precision_before: dict[str, Any]


def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def prepare(device: str | torch.device = "cpu") -> Prepared:
    """Bind clocks and take the memory baseline.  Call in the worker before importing untrusted code
    (it initialises CUDA on a CUDA device, so not in a process that forks afterwards)."""
    dev = _device(device)
    mem = memory_mod.baseline(dev)
    clock = capture(str(dev), before_import=True)
    return Prepared(dev, clock, mem, baselines.precision_flags())


def _from_timers(timers: Any, device: str | torch.device) -> Prepared:
    """A ``Prepared`` from the dynamic stage's ``Timers`` (captured before the untrusted import)."""
    dev = _device(device)
    clock = Clock(now=timers.perf_counter, snapshot=_IMPORT_SNAPSHOT, threads_at_capture=0,
                  captured_before_import=True)
    if dev.type == "cuda" and timers.cuda_Event is not None:
        raw = _IMPORT_SYNC_RAW or timers.cuda_synchronize
        clock.cuda = True
        clock.sync = (lambda _raw=raw: _raw())
        clock.event_cls = timers.cuda_Event
        clock.record = timers.event_record
        clock.elapsed = timers.event_elapsed_time
        clock.current_stream = _IMPORT_CURRENT_STREAM
        clock.default_stream = _IMPORT_DEFAULT_STREAM
    return Prepared(dev, clock, memory_mod.MemoryBaseline(str(dev)), {})


def _late(device: torch.device) -> Prepared:
    # nobody captured anything before the import: the snapshot from this module's import is the
    # best pre-import record there is; the clocks are bound now
    clock = capture(str(device), before_import=False)
    clock.snapshot = _IMPORT_SNAPSHOT
    return Prepared(device, clock, memory_mod.MemoryBaseline(str(device)), {})


def resolve_options(options: PerfOptions | Mapping[str, Any] | None, device: torch.device) -> PerfOptions:
    """Options as the dynamic stage sends them (``budget_s``, ``sets``, ``rules``, ...) or ours."""
    if isinstance(options, PerfOptions):
        return options
    opts = PerfOptions.for_device(device.type)
    if not options:
        return opts
    mine = {k: v for k, v in options.items() if k in PerfOptions.__dataclass_fields__}
    if mine:
        opts = opts.with_(**mine)
    budget = options.get("budget_s")
    if isinstance(budget, (int, float)) and budget > 0:
        # a total for this worker: half for the main series, a quarter for the hidden ones
        opts = opts.with_(time_budget_s=min(opts.time_budget_s, 0.5 * budget),
                          hidden_budget_s=min(opts.hidden_budget_s, 0.25 * budget / max(1, MAX_HIDDEN)),
                          # a sixteenth of the budget per curve series: a quarter for all four,
                          # half that for the two of --perf quick
                          curve_budget_s=min(opts.curve_budget_s, 0.25 * budget / len(CURVE_SERIES)))
        if "deadline_s" not in mine:
            # the dynamic stage waits max(30, 20 x budget) seconds for a worker's reply
            opts = opts.with_(deadline_s=max(10.0, 10.0 * budget))
        if (budget < COMPILE_MIN_BUDGET_S and "compile" not in mine and opts.compile == "auto"
                and opts.compile_enabled(device.type)):
            # the first call of torch.compile alone takes 5-60 s: more than this worker may spend
            opts = opts.with_(compile="never", extra={**opts.extra, "compile_skipped": (
                f"budget_s={budget:g} is below {COMPILE_MIN_BUDGET_S:g} s; torch.compile's first call can take longer")})
    sets = options.get("sets")
    if isinstance(sets, int) and sets > 0:
        opts = opts.with_(input_sets=min(opts.input_sets, sets) if "input_sets" not in mine else opts.input_sets)
    return opts


def _device_of(input_sets: Sequence[Sequence[Any]]) -> torch.device:
    for s in input_sets:
        for x in s:
            if isinstance(x, torch.Tensor):
                return x.device
    return torch.device("cpu")


def device_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"type": device.type, "torch": torch.__version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(index=device.index, name=props.name, capability=f"{props.major}.{props.minor}",
                    memory_bytes=int(props.total_memory), l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
                    sms=props.multi_processor_count, cuda=torch.version.cuda)
    else:
        info.update(name="cpu", threads=torch.get_num_threads())
    return info


class _Deadline:
    """What is left of ``deadline_s``; a phase runs only when its estimated cost fits."""

    def __init__(self, clock: Clock, seconds: float | None):
        self.clock = clock
        self.end = clock.now() + seconds if seconds else None

    def allows(self, seconds: float) -> bool:
        return self.end is None or self.clock.now() + seconds <= self.end


def _per_call_s(series: Mapping[str, Any]) -> float:
    walls = sorted(v for v in series.get("wall_ms", []) if isinstance(v, (int, float)))
    return walls[len(walls) // 2] / 1e3 if walls else 0.0


@dataclass
class _Setup:
    prepared: Prepared
    opts: PerfOptions
    plan: InputPlan
    hidden: dict[str, tuple[InputPlan, str | None, int]]  # name -> (plan, transform, first index)
    flush: Flusher
    call: Callable[[list[Any]], Any]
    # bytes of every input set handed in (kept or not: the caller holds them all)
    given_bytes: int = 0
    given_sets: int = 0
    pool_cap: int = 0
    # the curve's series among ``hidden`` (timed with their own counts), and why any was left out
    curve: tuple[str, ...] = ()
    curve_skipped: dict[str, str] | None = None
    # seconds this worker spent on the curve's series (their cost, reported as ``curve_s``)
    curve_s: float = 0.0
    # asked after every timed call (``time_series``): why to stop, once the model's memory has grown
    memory_stop: Callable[[], str | None] | None = None


def _setup(model: Any, input_sets: Sequence[Sequence[Any]], hidden_sets: Mapping[str, Sequence[Sequence[Any]]],
           options: PerfOptions | Mapping[str, Any] | None, prepared: Prepared | None,
           timed_hidden: bool = True) -> _Setup:
    if prepared is None:
        prepared = _late(_device_of(input_sets))
    opts = resolve_options(options, prepared.device)
    pool = opts.input_pool_bytes
    if pool is None:
        total = (torch.cuda.get_device_properties(prepared.device).total_memory
                 if prepared.device.type == "cuda" else 5 << 30)
        pool = min(8 << 30, total // 10)
    plan = InputPlan(input_sets, max_pool_bytes=pool, max_sets=opts.input_sets)
    hidden: dict[str, tuple[InputPlan, str | None, int]] = {}
    names = [k for k in HIDDEN_PREFERENCE if hidden_sets.get(k)][:MAX_HIDDEN]
    for i, name in enumerate(names):
        hp = InputPlan(hidden_sets[name], max_pool_bytes=pool // 2, max_sets=opts.input_sets)
        hidden[name] = (hp, None, HIDDEN_START + i * HIDDEN_STRIDE)
    if not hidden:
        # no hidden sets were handed over: derive them from the original sets
        for i, name in enumerate(h for h in opts.hidden if h in HIDDEN_DISTRIBUTIONS):
            hidden[name] = (plan, name, HIDDEN_START + i * HIDDEN_STRIDE)
    curve, curve_skipped = _curve(opts, plan, hidden, pool) if timed_hidden else ((), {})
    flush = Flusher(prepared.device, opts.flush_bytes)

    def call(inputs: list[Any], _model: Any = model) -> Any:
        with torch.no_grad():
            return _model(*inputs)

    given = nbytes([list(input_sets), list(hidden_sets.values())])
    st = _Setup(prepared, opts, plan, hidden, flush, call, given, len(input_sets), int(pool), curve, curve_skipped)
    st.memory_stop = _memory_stop(st)
    return st


# How much the model's allocated memory may grow over a worker's timed calls, as a share of the
# device: an honest kernel's memory is flat from call to call (a workspace is allocated once), and
# a cache keyed by input that kept one output per call would otherwise run until the device is full
# and fail at a call count set by the device's size (an H100 runs out where an H200 does not)
MEMORY_STOP_SHARE = 8


def _harness_bytes(st: _Setup) -> int:
    """The harness's own tensors in the worker: every set handed in, the working slots, the flush
    buffer (the curve's own plans too: ``repeat``'s slots, ``half``'s sets and slots)."""
    return st.given_bytes + nbytes(st.plan.slots) + st.flush.nbytes + sum(
        nbytes(hp.slots) + (nbytes(hp.originals) if name == "half" and name in st.curve else 0)
        for name, (hp, tr, _) in st.hidden.items() if hp is not st.plan)


def _memory_stop(st: _Setup) -> Callable[[], str | None] | None:
    dev = st.prepared.device
    if dev.type != "cuda":
        return None  # the host's memory is the cgroup's to cap; the device has no such wall
    total = torch.cuda.get_device_properties(dev).total_memory
    cap = max(1 << 30, total // MEMORY_STOP_SHARE)
    allocated = torch.cuda.memory_allocated
    start, harness0 = allocated(dev), _harness_bytes(st)

    def stop() -> str | None:
        grown = allocated(dev) - start
        if grown <= cap:
            return None
        # the input plans fill their slots as the series reach them: not the model's growth
        grown -= _harness_bytes(st) - harness0
        if grown <= cap:
            return None
        return (f"the model's allocated memory grew by {grown / 2**30:.1f} GiB over the timed calls "
                f"(cap {cap / 2**30:.1f} GiB, 1/{MEMORY_STOP_SHARE} of the device)")
    return stop


def _curve(opts: PerfOptions, plan: InputPlan, hidden: dict[str, tuple[InputPlan, str | None, int]],
           pool: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """Add the curve's series (``opts.curve``) to ``hidden``, after the hidden distributions, each
    derived from the original sets: value transforms on the main plan, ``repeat`` on a plan of its
    own (other storage for the same values), ``half`` on the sets with the batch halved."""
    names: list[str] = []
    skipped: dict[str, str] = {}
    for name in opts.curve:
        if name not in CURVE_SERIES or name in hidden:
            continue
        start = HIDDEN_START + len(hidden) * HIDDEN_STRIDE
        if name == REPEAT:
            entry = (InputPlan(plan.originals, max_pool_bytes=pool // 2, max_sets=opts.input_sets), REPEAT, start)
        elif name == "half":
            sets = halved(plan.originals)
            if sets is None:
                skipped["hidden:half"] = "no batch to halve (the first input has no leading dimension of 2 or more)"
                continue
            entry = (InputPlan(sets, max_pool_bytes=pool // 2, max_sets=opts.input_sets), None, start)
        else:
            entry = (plan, name, start)
        hidden[name] = entry
        names.append(name)
    return tuple(names), skipped


def _method(st: _Setup) -> dict[str, Any]:
    opts = st.opts
    return {
        "warmup": opts.warmup,
        "iterations": opts.iterations,
        "min_iterations": opts.min_iterations,
        "adaptive": opts.adaptive,
        "time_budget_s": opts.time_budget_s,
        "mode": opts.mode,
        "target_rel": opts.target_rel if opts.targeted() else None,
        "series_cap_s": opts.series_cap_s if opts.targeted() else None,
        "input_sets": st.plan.size,
        "input_sets_given": st.given_sets,
        "input_set_bytes": st.plan.set_bytes,
        "input_pool_cap_bytes": st.pool_cap,
        "refresh": st.plan.refresh,
        "flush_bytes": st.flush.nbytes,
        "hidden": {name: {"source": "transform" if tr else "sets", "sets": hp.size} for name, (hp, tr, _) in st.hidden.items()},
        "curve": list(st.curve),
        "curve_iterations": opts.curve_iterations,
        "seed": opts.seed,
        "clock": "cuda-events+synchronized-wall" if st.prepared.clock.cuda else "perf_counter",
        "cpu_threads": torch.get_num_threads() if st.prepared.device.type == "cpu" else None,
        "clock_captured_before_import": st.prepared.clock.captured_before_import,
        "memory_baseline_before_import": bool(st.prepared.memory.free or st.prepared.memory.rss),
        "nvml_process": st.prepared.memory.process is not None,
        "exclusive_device": st.opts.exclusive_device,
    }


def _target(st: _Setup, deadline: _Deadline | None) -> Target | None:
    """The interval target of a main series (``mode="target"``), its cap cut to a third of what is
    left before the deadline, so the series after it (hidden, memory) still fit."""
    opts = st.opts
    if not opts.targeted():
        return None
    cap = float(opts.series_cap_s)
    if deadline is not None and deadline.end is not None:
        cap = max(0.0, min(cap, (deadline.end - st.prepared.clock.now()) / 3))
    return Target(rel=float(opts.target_rel), cap_s=cap, max_calls=int(opts.max_calls),
                  min_s=min(float(opts.series_min_s), cap),
                  statistic="median" if st.prepared.clock.cuda else "min")


def _series(st: _Setup, name: str, call: Callable[[list[Any]], Any], start: int, plan: InputPlan | None = None,
            transform: str | None = None, hidden: bool = False, keep_fingerprints: bool = True,
            deadline: _Deadline | None = None, curve: bool = False) -> dict[str, Any]:
    opts, clock = st.opts, st.prepared.clock
    plan = plan or st.plan
    if not hidden:
        s = time_series(name, call, plan, clock, st.flush, start=start, warmup=opts.warmup,
                        iterations=opts.iterations, min_iterations=opts.min_iterations, budget_s=opts.time_budget_s,
                        adaptive=opts.adaptive, samples=opts.fingerprint_samples, keep_fingerprints=keep_fingerprints,
                        target=_target(st, deadline), memory_stop=st.memory_stop)
    else:
        iterations = opts.curve_iterations if curve else opts.hidden_iterations
        # the curve's series compare ratios of adjacent calls, both sides under the same conditions:
        # they skip the cache flush, which cost ~10 ms a call on the CPU host (its flush writes twice
        # the last-level cache), against 0.1 ms for a small kernel's call
        flush = _no_flush if curve else st.flush
        s = time_series(name, call, plan, clock, flush, start=start, warmup=1,
                        iterations=iterations, min_iterations=min(5, iterations),
                        budget_s=opts.curve_budget_s if curve else opts.hidden_budget_s, adaptive=True,
                        hidden=transform,
                        samples=opts.fingerprint_samples, keep_fingerprints=keep_fingerprints,
                        pair=(st.plan, start + PAIRED_OFFSET), memory_stop=st.memory_stop)
    return s.to_dict()


def _no_flush() -> None:
    return None


def _hidden_series(st: _Setup, call: Callable[[list[Any]], Any], per_call_s: float, deadline: _Deadline,
                   skipped: dict[str, str], keep_fingerprints: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (hp, tr, start) in st.hidden.items():
        curve = name in st.curve
        need = per_call_s * (1 + 2 * min(5, st.opts.curve_iterations if curve else st.opts.hidden_iterations))
        if curve and need > st.opts.curve_budget_s:
            # the curve's series never stretch the worker's time: fewer than 5 paired calls decide
            # nothing (HS606's min_samples), so a kernel too slow for them within the budget gets none
            skipped[f"hidden:{name}"] = (f"a call takes {per_call_s * 1e3:.3g} ms: the {need:.2g} s its least series "
                                         f"needs exceed curve_budget_s={st.opts.curve_budget_s:g}")
            continue
        if not deadline.allows(need):
            skipped[f"hidden:{name}"] = f"not enough time left (needs about {need:.1f} s)"
            continue
        t0 = st.prepared.clock.now()
        out[f"hidden:{name}"] = _series(st, f"hidden:{name}", call, start, plan=hp, transform=tr, hidden=True,
                                        keep_fingerprints=keep_fingerprints, curve=curve)
        if curve:
            st.curve_s += st.prepared.clock.now() - t0
    skipped.update(st.curve_skipped or {})
    return out


def _safe_memory(st: _Setup, call: Callable[[list[Any]], Any], model: Any, per_call_s: float = 0.0,
                 deadline: _Deadline | None = None) -> dict[str, Any]:
    need = per_call_s * (2 + st.opts.memory_repeats)
    if deadline is not None and not deadline.allows(need):
        return {"error": f"skipped: not enough time left (needs about {need:.1f} s)"}
    try:
        mem = memory_mod.measure(call, model, st.plan, st.prepared.device, st.prepared.memory, MEMORY_START,
                                 st.opts.memory_repeats, st.prepared.clock.sync, harness_bytes=_harness_bytes(st),
                                 exclusive=st.opts.exclusive_device)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return mem


def _common(st: _Setup, role: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "role": role,
        "device": device_info(st.prepared.device),
        "method": _method(st),
        "inputs_digest": st.plan.digest(),
        "calibration": calibrate(st.prepared.clock, st.flush),
    }


def _finish(st: _Setup, out: dict[str, Any], t0: float) -> dict[str, Any]:
    out["precision_flags"] = {"before": st.prepared.precision_before, "after": baselines.precision_flags()}
    out["timers"] = {"watched": len(st.prepared.clock.snapshot.objects), "changed": st.prepared.clock.tampering()}
    out["elapsed_s"] = st.prepared.clock.now() - t0
    out["curve_s"] = st.curve_s
    return out


def measure(model: Any, input_sets: Mapping[str, Sequence[Sequence[Any]]] | Sequence[Sequence[Any]], *,
            role: str, device: str | torch.device = "cpu", timers: Any = None,
            options: PerfOptions | Mapping[str, Any] | None = None, prepared: Prepared | None = None,
            keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """The dynamic stage's entry point (PROTOCOL.md): dispatch on ``role``.  ``keep`` (a dict), when
    given, receives the timing setup under ``"setup"``, for the paired blocks (``time_block``)."""
    sets = dict(input_sets) if isinstance(input_sets, Mapping) else {"original": list(input_sets)}
    original = sets.pop("original", None) or next((v for v in sets.values() if v), None)
    if not original:
        return {"schema": SCHEMA, "role": role, "error": "no input sets to time"}
    if prepared is None and timers is not None:
        prepared = _from_timers(timers, device)
    if prepared is None:
        prepared = _late(_device(device))
    if role == "reference":
        return measure_reference(model, original, options, prepared, hidden_sets=sets, keep=keep)
    if role == "candidate":
        return measure_candidate(model, original, options, prepared, hidden_sets=sets, keep=keep)
    raise ValueError(f"unknown role {role!r}")


@contextlib.contextmanager
def _threads(st: _Setup) -> Iterator[None]:
    n = st.opts.cpu_threads
    if st.prepared.device.type != "cpu" or not n:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def measure_candidate(model: Any, input_sets: Sequence[Sequence[Any]],
                      options: PerfOptions | Mapping[str, Any] | None = None, prepared: Prepared | None = None,
                      hidden_sets: Mapping[str, Sequence[Sequence[Any]]] | None = None,
                      keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Time the candidate on the main series and the hidden series; measure its memory."""
    st = _setup(model, input_sets, hidden_sets or {}, options, prepared)
    if keep is not None:
        keep["setup"] = st
    with _threads(st):
        return _measure_candidate(st, model)


def _measure_candidate(st: _Setup, model: Any) -> dict[str, Any]:
    t0 = st.prepared.clock.now()
    deadline = _Deadline(st.prepared.clock, st.opts.deadline_s)
    skipped: dict[str, str] = {}
    out = _common(st, "candidate")
    series = {"main": _series(st, "main", st.call, 0, deadline=deadline)}
    if series["main"]["error"] is None:
        per_call = _per_call_s(series["main"])
        series.update(_hidden_series(st, st.call, per_call, deadline, skipped))
        out["memory"] = _safe_memory(st, st.call, model, per_call, deadline)
    out["series"] = series
    out["skipped"] = skipped
    return _finish(st, out, t0)


def measure_reference(model: Any, input_sets: Sequence[Sequence[Any]],
                      options: PerfOptions | Mapping[str, Any] | None = None, prepared: Prepared | None = None,
                      hidden_sets: Mapping[str, Sequence[Sequence[Any]]] | None = None,
                      keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Time the baselines on the same plan, fingerprint the outputs the candidate's calls must
    match, count FLOPs and bytes, read the device ceilings, and measure the reference's memory."""
    st = _setup(model, input_sets, hidden_sets or {}, options, prepared)
    if keep is not None:
        keep["setup"] = st
    with _threads(st):
        return _measure_reference(st, model)


def _measure_reference(st: _Setup, model: Any) -> dict[str, Any]:
    dev, clock, opts = st.prepared.device, st.prepared.clock, st.opts
    t0 = clock.now()
    deadline = _Deadline(clock, opts.deadline_s)
    skipped: dict[str, str] = {}
    out = _common(st, "reference")
    headline = baselines.headline_for(dev, opts.tf32)
    results: dict[str, Any] = {}
    per_call = 0.0
    for name in baselines.names_for(dev, opts.compile_enabled(dev.type), opts.tf32):
        tf32 = baselines.uses_tf32(name, dev)
        entry: dict[str, Any] = {"tf32": tf32}
        need = per_call * (max(opts.warmup, 1) + opts.min_iterations)
        if results and not deadline.allows(need):
            results[name] = {"tf32": tf32, "skipped": f"not enough time left (needs about {need:.1f} s)"}
            continue
        try:
            with baselines.precision(tf32):
                target = st.call
                if name == baselines.COMPILE:
                    target = _no_grad(baselines.compiled(model, opts.compile_mode))
                    c0 = clock.now()
                    target(st.plan.inputs_for(0))  # compile outside the timed series
                    clock.sync()
                    entry["compile_s"] = clock.now() - c0
                entry["series"] = {"main": _series(st, "main", target, 0, keep_fingerprints=name == baselines.STRICT,
                                                   deadline=deadline)}
                per_call = max(per_call, _per_call_s(entry["series"]["main"]))
                if name == headline:
                    entry["series"].update(_hidden_series(st, target, per_call, deadline, skipped))
        except Exception as exc:
            entry = {"tf32": tf32, "skipped": f"{type(exc).__name__}: {exc}"[:500]}
        results[name] = entry
    if baselines.COMPILE not in results and (opts.extra or {}).get("compile_skipped"):
        results[baselines.COMPILE] = {"tf32": dev.type == "cuda", "skipped": str(opts.extra["compile_skipped"])}
    out["baselines"] = results
    out["headline"] = headline
    # what every candidate call is checked against: strict fp32 eager outputs of calls 0..calls-1
    strict_main = results.get(baselines.STRICT, {}).get("series", {}).get("main", {})
    main_fp = dict(strict_main.pop("fingerprints", {}))
    with baselines.precision(False):
        for j in range(opts.calls):
            if str(j) not in main_fp:
                if not deadline.allows(per_call * 2):
                    skipped["fingerprints"] = f"stopped at call {j}: not enough time left"
                    break
                try:
                    main_fp[str(j)] = fingerprint(st.call(st.plan.inputs_for(j)), opts.fingerprint_samples)
                except Exception:
                    break
        fingerprints: dict[str, Any] = {"main": main_fp}
        for key, series in results.get(headline, {}).get("series", {}).items():
            if key.startswith("hidden:"):
                fingerprints[key] = series.pop("fingerprints", {})
        out["work"] = _work(st)
        out["memory"] = _safe_memory(st, st.call, model, per_call, deadline)
    out["fingerprints"] = fingerprints
    out["skipped"] = skipped
    out["fingerprint_precision"] = {"main": "strict fp32", "hidden": "tf32" if baselines.uses_tf32(headline, dev) else "strict fp32"}
    try:
        # measured with the clocks bound before the reference was imported, and never written to
        # the shared cache when the reference touched a timer
        out["ceilings"] = bounds.ceilings(dev, clock=clock, write=not clock.tampering(),
                                          known=(opts.extra or {}).get("known_ceilings"))
    except Exception as exc:
        out["ceilings"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return _finish(st, out, t0)


def measure_compile(model: Any, input_sets: Mapping[str, Sequence[Sequence[Any]]] | Sequence[Sequence[Any]], *,
                    device: str | torch.device = "cpu", timers: Any = None,
                    options: PerfOptions | Mapping[str, Any] | None = None,
                    prepared: Prepared | None = None, warm: dict[str, Any] | None = None,
                    warm_only: bool = False) -> dict[str, Any]:
    """The ``torch.compile`` baseline alone, measured as ``measure_reference`` measures the others
    (same input plan, flush and clocks; TF32 allowed on a GPU).  The dynamic stage asks for it in a
    request of its own, with its own time allowance: a compilation that overruns then costs only
    this baseline.  Returns ``{"schema", "role", "baseline": entry, "elapsed_s", "timers"}`` where
    ``entry`` is ``{"tf32", "compile_s", "series": {"main": ...}}`` or ``{"tf32", "skipped"}``.

    ``warm`` (a dict the caller keeps between two calls) splits compilation from timing:
    ``warm_only=True`` compiles (the first call, CPU work that needs no exclusive device) and keeps
    the compiled callable there; the next call finds it and only times.  The scheduler then holds
    the device exclusively for the timed series alone."""
    sets = dict(input_sets) if isinstance(input_sets, Mapping) else {"original": list(input_sets)}
    original = sets.get("original") or next((v for v in sets.values() if v), None)
    if not original:
        return {"schema": SCHEMA, "role": "reference", "error": "no input sets to time"}
    if prepared is None and timers is not None:
        prepared = _from_timers(timers, device)
    if prepared is None:
        prepared = _late(_device(device))
    st = _setup(model, original, {}, options, prepared, timed_hidden=False)
    dev, clock = st.prepared.device, st.prepared.clock
    tf32 = baselines.uses_tf32(baselines.COMPILE, dev) and st.opts.tf32
    entry: dict[str, Any] = {"tf32": tf32}
    t0 = clock.now()
    with _threads(st):
        try:
            with baselines.precision(tf32):
                kept = warm.get("target") if warm is not None and warm.get("mode") == st.opts.compile_mode else None
                if kept is not None:
                    target, entry["compile_s"] = kept, float(warm.get("compile_s") or 0.0)
                else:
                    target = _no_grad(baselines.compiled(model, st.opts.compile_mode))
                    c0 = clock.now()
                    target(st.plan.inputs_for(0))  # compile outside the timed series
                    clock.sync()
                    entry["compile_s"] = clock.now() - c0
                    if warm is not None:
                        warm.update(target=target, compile_s=entry["compile_s"], mode=st.opts.compile_mode)
                if warm_only:
                    entry["warm"] = True
                    return {"schema": SCHEMA, "role": "reference", "baseline": entry, "elapsed_s": clock.now() - t0,
                            "device": device_info(dev),
                            "timers": {"watched": len(clock.snapshot.objects), "changed": clock.tampering()}}
                entry["series"] = {"main": _series(st, "main", target, 0, keep_fingerprints=False,
                                                   deadline=_Deadline(clock, st.opts.deadline_s))}
        except Exception as exc:
            entry = {"tf32": tf32, "skipped": f"torch.compile failed: {type(exc).__name__}: {exc}"[:500]}
    return {"schema": SCHEMA, "role": "reference", "baseline": entry, "elapsed_s": clock.now() - t0,
            "device": device_info(dev), "timers": {"watched": len(clock.snapshot.objects), "changed": clock.tampering()}}


# the paired blocks' calls take input indices from here on (see InputPlan: every index is a fresh
# mix of the sets), PAIRED_STRIDE per round, so no block repeats another's values
PAIRED_START = 1_000_000
PAIRED_STRIDE = 10_000
MAX_BLOCK_CALLS = 1_000


def block_setup(model: Any, input_sets: Mapping[str, Sequence[Sequence[Any]]] | Sequence[Sequence[Any]], *,
                device: str | torch.device = "cpu", timers: Any = None,
                options: PerfOptions | Mapping[str, Any] | None = None,
                prepared: Prepared | None = None) -> _Setup:
    """The setup ``time_block`` times with, built without measuring anything (PROTOCOL.md,
    ``perf_setup``): for a fresh pair of workers that only times paired blocks (the parent spreads
    the paired speedup over several pairs of processes, stats.between_processes).  The same input
    plan, flush and clocks as ``measure`` builds, then a few untimed calls so the first block does
    not pay for first-call work (allocator growth, lazy initialisation)."""
    sets = dict(input_sets) if isinstance(input_sets, Mapping) else {"original": list(input_sets)}
    original = sets.get("original") or next((v for v in sets.values() if v), None)
    if not original:
        raise ValueError("no input sets to time")
    if prepared is None and timers is not None:
        prepared = _from_timers(timers, device)
    if prepared is None:
        prepared = _late(_device(device))
    st = _setup(model, original, {}, options, prepared, timed_hidden=False)
    with _threads(st):
        for k in range(max(1, min(st.opts.warmup, 3))):
            st.flush()
            out = st.call(st.plan.inputs_for(k))
            del out
        st.prepared.clock.sync()
    return st


def time_block(st: _Setup, calls: int, round_index: int, baseline: str | None = None,
               relayout: bool = True, cpu: int | None = None) -> dict[str, Any]:
    """One block of a paired measurement (PROTOCOL.md, ``perf_block``): ``calls`` timed calls of the
    main series, each on fresh inputs with a cold cache, as ``time_series`` times them.  In the
    reference worker ``baseline`` names the eager baseline to call (its precision flags set around
    the block); the parent alternates these blocks with the candidate's and takes the speedup per
    pair.  The outputs are not fingerprinted: the main series validated them, and a block is short
    so that the two sides of a pair see the same load.

    ``cpu`` (an index into the CPUs this process may use, modulo their number) pins the block's
    thread to that one CPU and restores the mask afterwards.  The parent gives both blocks of a
    round the same index, so the two sides of a pair share one core and the rounds rotate over the
    cores: on a shared host one core can be slower than the other for minutes (the other tenants'
    work), and a worker the scheduler keeps there carries that into every block of the scan.
    Measured on the 2-core host, trials interleaved pinned / unpinned: the paired speedup of one
    clean kernel spread with log sd 0.074 pinned (15 scans) against 0.105 unpinned (10 scans)."""
    calls = max(1, min(int(calls), MAX_BLOCK_CALLS))
    clock, dev = st.prepared.clock, st.prepared.device
    tf32 = False
    if baseline is not None:
        if baseline not in (baselines.STRICT, baselines.TF32):
            return {"error": f"no paired blocks for baseline {baseline!r}"}
        tf32 = baselines.uses_tf32(baseline, dev) and st.opts.tf32
    events = (clock.new_event(), clock.new_event()) if clock.cuda else None
    event_ms: list[float] = []
    wall_ms: list[float] = []
    start = PAIRED_START + max(0, int(round_index)) * PAIRED_STRIDE
    restore = _pin(cpu)
    try:
        # a new place in memory for the inputs of every block (InputPlan.relayout)
        if relayout:
            st.plan.relayout(round_index)
        with _threads(st), baselines.precision(tf32):
            for k in range(calls):
                inputs = st.plan.inputs_for(start + k)
                st.flush()
                out, ev, wall, _ = _one_call(st.call, inputs, clock, events)
                del out
                event_ms.append(ev)
                wall_ms.append(wall)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500], "event_ms": event_ms, "wall_ms": wall_ms}
    finally:
        pinned = restore()
    return {"event_ms": event_ms, "wall_ms": wall_ms, "timers_changed": len(clock.tampering()), "cpu": pinned}


def _pin(cpu: int | None) -> Callable[[], int | None]:
    """Pin the calling thread to the ``cpu``-th allowed CPU; returns a function that restores the
    mask and says which CPU it was (None: not pinned)."""
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return lambda: None
    try:
        before = os.sched_getaffinity(0)
        target = sorted(before)[int(cpu) % len(before)]
        os.sched_setaffinity(0, {target})
    except (OSError, ValueError):
        return lambda: None

    def restore() -> int | None:
        try:
            os.sched_setaffinity(0, before)
        except OSError:
            pass
        return target

    return restore


def _no_grad(fn: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    def call(inputs: list[Any]) -> Any:
        with torch.no_grad():
            return fn(*inputs)

    return call


def _work(st: _Setup) -> dict[str, Any]:
    """FLOPs (by the flop counter) and bytes in and out of one reference call."""
    inputs = st.plan.inputs_for(FLOPS_INDEX)
    try:
        counted = bounds.count_flops(lambda: st.call(inputs))
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}
    io = bounds.io_bytes(inputs, counted.pop("output"))
    return {"flops": counted["total"], "flops_by_op": counted["by_op"], "bytes_read": io["read"],
            "bytes_written": io["written"], "aliased_outputs": io["aliased_outputs"]}


def spin(model: Any, input_sets: Sequence[Sequence[Any]], calls: int, prepared: Prepared | None = None) -> dict[str, Any]:
    """``calls`` back-to-back calls on one input set, one device-wide synchronisation at the end.

    The parent times this request with its own clock, which the candidate cannot reach, and
    compares with the per-call time the child reported (HS609).
    """
    if prepared is None:
        prepared = _late(_device_of(input_sets))
    inputs = list(input_sets[0])
    t0 = prepared.clock.now()
    with torch.no_grad():
        for _ in range(max(1, calls)):
            out = model(*inputs)
            del out
    prepared.clock.sync()
    return {"calls": calls, "child_s": prepared.clock.now() - t0}
