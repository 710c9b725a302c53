"""Several candidates' dynamic stages at once, with timing exclusive per device.

``run_concurrently`` runs up to ``jobs`` candidates side by side (threads in the parent: the parent
mostly waits on its workers' sockets; every candidate still gets its own single-use sandboxes).
What overlaps and what does not is decided by a ``DeviceGate`` per device:

- loading, building and probing (correctness and integrity) take the gate *shared*: several
  candidates' probes may run together on one device (or the CPU);
- timing takes it *exclusive*: while one candidate is timed no other candidate's worker does
  anything on that device, so a speedup is measured on a quiet device.  On the CPU the gate covers
  the CPU (builds included), on a GPU that GPU alone (builds and CPU-side work of other GPUs'
  candidates go on).  The gate prefers timing: once a candidate waits to be timed, no new work
  starts on its device until it has been.

GPUs: each candidate is given one visible GPU (the one with the fewest candidates in flight); its
workers see only that one (``CUDA_VISIBLE_DEVICES``), so every visible GPU is used.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .options import DynamicOptions


class DeviceGate:
    """A reader-writer lock per device: ``work`` shared, ``timing`` exclusive, timing first.

    ``log`` (when given a list) receives ``(device, kind, tag, start, end)`` for each interval held,
    on ``time.monotonic()``: the tests read it to check that no timing overlapped anything."""

    def __init__(self, log: list[tuple[str, str, str, float, float]] | None = None):
        self._cond = threading.Condition()
        self._work: dict[str, int] = {}
        self._timing: set[str] = set()
        self._waiting: dict[str, int] = {}
        self.log = log

    def _record(self, device: str, kind: str, tag: str, start: float) -> None:
        if self.log is not None:
            with self._cond:
                self.log.append((device, kind, tag, start, time.monotonic()))

    @contextmanager
    def work(self, device: str, tag: str = "") -> Iterator[None]:
        with self._cond:
            while device in self._timing or self._waiting.get(device, 0):
                self._cond.wait()
            self._work[device] = self._work.get(device, 0) + 1
        start = time.monotonic()
        try:
            yield
        finally:
            self._record(device, "work", tag, start)
            with self._cond:
                self._work[device] -= 1
                self._cond.notify_all()

    @contextmanager
    def timing(self, device: str, tag: str = "") -> Iterator[None]:
        with self._cond:
            self._waiting[device] = self._waiting.get(device, 0) + 1
            try:
                while device in self._timing or self._work.get(device, 0):
                    self._cond.wait()
            finally:
                self._waiting[device] -= 1
            self._timing.add(device)
        start = time.monotonic()
        try:
            yield
        finally:
            self._record(device, "timing", tag, start)
            with self._cond:
                self._timing.discard(device)
                self._cond.notify_all()


class Slot:
    """Where one candidate runs: the gate's device key and the GPU its workers see (None: the
    launcher's own setting, all GPUs or none)."""

    def __init__(self, gate: DeviceGate, key: str, gpu: str | None, share: int = 1):
        self.gate = gate
        self.key = key
        self.gpu = gpu
        # candidates that may be in flight at once: each gets this share of the parent's memory budget
        self.share = max(int(share), 1)


def visible_gpus(device: str) -> list[str]:
    """The GPUs a run may use: ``CUDA_VISIBLE_DEVICES`` when set, else every device NVML or
    ``nvidia-smi`` lists; none for ``--device cpu``.  Never imports torch in the parent."""
    if device == "cpu":
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=False).stdout
        return [ln.strip() for ln in out.splitlines() if ln.strip().isdigit()]
    except (OSError, subprocess.SubprocessError):
        return []


class Scheduler:
    """Hands out slots: the CPU when no GPU is visible, else the GPU with the fewest candidates."""

    def __init__(self, device: str, gate: DeviceGate | None = None, gpus: Sequence[str] | None = None):
        self.gate = gate or DeviceGate()
        self.gpus = list(gpus) if gpus is not None else visible_gpus(device)
        self._load = {g: 0 for g in self.gpus}
        self._lock = threading.Lock()
        self.share = 1

    @contextmanager
    def slot(self) -> Iterator[Slot]:
        if not self.gpus:
            yield Slot(self.gate, "cpu", None, self.share)
            return
        with self._lock:
            gpu = min(self.gpus, key=lambda g: self._load[g])
            self._load[gpu] += 1
        try:
            # with one GPU the launcher's own setting (every GPU visible) is that GPU: keep it,
            # so that a one-GPU run starts the same workers as before
            yield Slot(self.gate, f"cuda:{gpu}", gpu if len(self.gpus) > 1 else None, self.share)
        finally:
            with self._lock:
                self._load[gpu] -= 1


def run_concurrently(todo: Sequence[int], one: Callable[[int, Slot], Any], jobs: int, scheduler: Scheduler,
                     done: Callable[[int, Any], None]) -> None:
    """``one(i, slot)`` for every index of ``todo``, ``jobs`` at a time; ``done(i, result)`` in the
    calling thread as each finishes (so reports, streams and progress stay single-threaded)."""
    jobs = max(1, int(jobs))
    if jobs == 1:
        for i in todo:
            with scheduler.slot() as s:
                done(i, one(i, s))
        return

    def call(i: int) -> Any:
        with scheduler.slot() as s:
            return one(i, s)

    from concurrent.futures import FIRST_COMPLETED, wait

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="hackscan-candidate") as ex:
        pending = {ex.submit(call, i): i for i in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                i = pending.pop(f)
                done(i, f.result())


def concurrency(options: DynamicOptions) -> int:
    """Candidates in flight: ``--jobs``, on the CPU at most one per core (each candidate's probes
    keep a core busy)."""
    jobs = max(1, int(options.jobs or 1))
    if options.device == "cpu" or not visible_gpus(options.device):
        jobs = min(jobs, os.cpu_count() or 1)
    return jobs


def prepare(options: DynamicOptions) -> tuple[int, Scheduler]:
    """The default worker pool sized to the concurrency (two spare sandboxes per candidate in
    flight), given the build cache and the build farm; the concurrency and the scheduler whose
    device gate the candidates share.  The pool and its farm are the process's: a caller that keeps
    the scheduler (``hackscan.Verifier``) keeps all three warm across calls."""
    from .pool import default_pool

    jobs = concurrency(options)
    extra = options.extra or {}
    pool = default_pool(options.sandbox)
    pool.spares = max(pool.spares, 2 * jobs)
    if extra.get("build_cache"):
        pool.cache_root = str(extra["build_cache"])
    from .farm import BuildFarm, arch_list

    # every worker, the build farm's included, builds for the same CUDA architectures (farm.py)
    pool.cuda_arch = arch_list(visible_gpus(options.device), extra.get("cuda_arch"))
    if pool.farm is None:
        pool.farm = BuildFarm(jobs)
    scheduler = Scheduler(options.device)
    scheduler.share = jobs
    return jobs, scheduler


def run_candidates(todo: Sequence[int], one: Callable[[int, Any], Any], options: DynamicOptions,
                   done: Callable[[int, Any], None]) -> None:
    """The pipeline's dynamic stage over ``todo``: ``prepare``, then ``run_concurrently``."""
    jobs, scheduler = prepare(options)
    if jobs == 1:
        # one candidate at a time: nothing to gate, and the run is what it always was
        for i in todo:
            done(i, one(i, None))
        return
    run_concurrently(todo, one, jobs, scheduler, done)
