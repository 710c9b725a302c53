"""The whole verification as a function (``verify``) and as a service for a training loop
(``Verifier``).

``Verifier`` keeps what is expensive to start across calls: the worker server (its ``import torch``)
and its spare sandboxes, the build farm, and the device gate that keeps timing exclusive per device
(``dynamic/schedule.py``).  ``submit`` returns a future, ``map`` keeps the batch's order, ``stream``
yields results as they finish.  With ``ray=`` each candidate's dynamic stage is one task on a Ray
cluster (``hackscan/cluster.py``): the same per-candidate path, so the same results.

Nothing here imports torch into the caller's process: the candidate and the reference run in
sandboxed child processes (the parent side needs numpy alone).  The static stage runs here first;
everything the candidate does is judged outside its process, and any failure rejects it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from ..dynamic.options import DEVICES, DynamicOptions
from .verification import Verification, failed, from_report

if TYPE_CHECKING:
    from ..config import Config
    from ..model import Report
    from ..pipeline import RunOptions

PERF = ("off", "quick", "target", "thorough")
SANDBOXES = ("required", "off")
# Ray tasks only wait in this process: many may be in flight at once
_RAY_WAITERS = 64
# references kept analysed by the static stage: a training set's tasks come back every step (a
# GRPO group shares one, and every epoch repeats them), so their parse and value flow (a fifth of a
# scan on the CUDA-L1 corpus) is paid once per task; a few hundred entries of a few hundred kB
REFERENCE_CACHE = 256


def _options(device: str, seed: int | None, perf: str, timeout: float, jobs: int,
             baselines: Sequence[str] | None, sandbox: str) -> RunOptions:
    """The typed options, with every value checked before any work (a clear ``ValueError``)."""
    from ..pipeline import RunOptions

    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if perf not in PERF:
        raise ValueError(f"perf must be one of {', '.join(PERF)}, not {perf!r}")
    if sandbox not in SANDBOXES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOXES)}, not {sandbox!r}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer or None, not {seed!r}")
    if not timeout > 0:
        raise ValueError("timeout must be positive")
    if int(jobs) < 1:
        raise ValueError("jobs must be at least 1")
    chosen = None
    if baselines is not None:
        from ..dynamic.options import BASELINES

        bad = [b for b in baselines if b not in BASELINES]
        if bad:
            raise ValueError(f"baselines must be among {', '.join(BASELINES)}, not {', '.join(bad)}")
        chosen = tuple(baselines)
    extra = {"perf_mode": perf} if perf in ("quick", "thorough") else {}
    return RunOptions(device=device, seed=seed, timeout=float(timeout), perf=perf != "off", jobs=int(jobs),
                      baselines=chosen, sandbox=sandbox, extra=extra)


def _empty(code: object) -> str | None:
    """Why ``code`` is no generation at all (None, not a string, empty, the string "None"), or None."""
    if code is None:
        return "no generation (None)"
    if not isinstance(code, str):
        return f"the generation is a {type(code).__name__}, not a string"
    if code.strip() in ("", "None"):
        return "the generation is empty" if not code.strip() else 'the generation is the string "None"'
    return None


class Verifier:
    """Verifies candidates for a training loop; reuse one across steps (thread-safe).

    ``device``: cpu, cuda or auto.  ``jobs``: candidates in flight at once (on one host: timing stays
    exclusive per device; on the CPU at most one per core).  ``ray``: None (this host), ``"auto"``
    (the cluster ``ray start`` set up), ``"local"`` (a private cluster) or a cluster's address.
    ``seed``: every candidate's hidden inputs from this seed (a replay); None draws a fresh one per
    candidate, stated in ``Verification.seed``.  ``perf``: quick (the RL gate's budget: a candidate
    already rejected is not timed), target, thorough, or off.  ``baselines``: among eager, tf32,
    compile (None: all on a GPU, eager on the CPU).  ``reject_classes``: the verdict classes that
    reject (None: all).  ``timeout``: seconds per candidate's dynamic stage.
    """

    def __init__(self, *, device: str = "auto", jobs: int = 1, ray: str | None = None, seed: int | None = None,
                 perf: str = "quick", timeout: float = 120.0, baselines: Sequence[str] | None = None,
                 reject_classes: Sequence[str] | None = None, harness: str | None = None,
                 config: Config | None = None, sandbox: str = "required", prewarm: bool = True):
        from .. import Scanner
        from ..config import Config

        self.options: DynamicOptions = _options(device, seed, perf, timeout, jobs, baselines, sandbox)
        base = config or Config()
        if harness is not None:
            base = base.with_(harness=harness)
        self._scanner = Scanner(mode="gate", config=base, reject_classes=reject_classes,
                                reference_cache_size=REFERENCE_CACHE)
        self.config = self._scanner._config
        self.reject_classes = self.config.reject_classes
        self.ray = ray
        self._lock = threading.Lock()
        self._count = 0
        if ray is not None:
            from ..cluster import ray_problem

            problem = ray_problem(ray)
            if problem is not None:
                raise RuntimeError(problem)
            self._jobs, self._scheduler = 1, None
            self._executor = ThreadPoolExecutor(max_workers=max(int(jobs), _RAY_WAITERS),
                                                thread_name_prefix="hackscan-ray")
            return
        from ..pipeline import dynamic_available

        self._dynamic = dynamic_available() is None
        self._jobs, self._scheduler = 1, None
        if self._dynamic:
            from ..dynamic import prewarm as start
            from ..dynamic.schedule import prepare

            self._jobs, self._scheduler = prepare(self.options)
            if prewarm:
                start(self.options.device)
        self._executor = ThreadPoolExecutor(max_workers=self._jobs, thread_name_prefix="hackscan-verify")

    # ------------------------------------------------------------------------------ one candidate
    def _path(self) -> str:
        with self._lock:
            self._count += 1
            return f"<candidate {self._count}>"

    def _static(self, code: str, reference: str | None, path: str) -> tuple[Any, Report]:
        from .. import _submission

        sub = _submission(code, reference, path)
        return sub, self._scanner._engine.scan(sub)

    def _run(self, code: object, reference: str | None) -> Verification:
        why = _empty(code)
        if why is not None:
            return failed(why)
        if reference is not None and not isinstance(reference, str):
            return failed(f"the reference is a {type(reference).__name__}, not a string")
        path = self._path()
        try:
            if self.ray is not None:
                report = self._on_ray(code, reference, path)  # type: ignore[arg-type]
            else:
                report = self._here(code, reference, path)  # type: ignore[arg-type]
        except Exception as exc:  # a bug of hackscan's, never a pass: this candidate alone is an error
            return failed(f"verification failed: {type(exc).__name__}: {exc}")
        return from_report(report, self.reject_classes, self.config.fail_on.value)

    def _here(self, code: str, reference: str | None, path: str) -> Report:
        from ..pipeline import _guarded, _unavailable, dynamic_available

        sub, report = self._static(code, reference, path)
        if not self._dynamic:
            return _unavailable(dynamic_available() or "the dynamic stage is not installed")(
                sub, report, self.options, self.config)
        from ..dynamic import run_dynamic_stage

        if self._jobs == 1 or self._scheduler is None:
            # one candidate at a time (the executor has one thread): nothing to gate
            return _guarded(run_dynamic_stage, sub, report, self.options, self.config)
        with self._scheduler.slot() as slot:
            return _guarded(run_dynamic_stage, sub, report, self.options, self.config, None, slot)

    def _on_ray(self, code: str, reference: str | None, path: str) -> Report:
        from dataclasses import replace

        from .. import _submission
        from ..cluster import run_on_ray

        # the static stage of one item runs in this thread (jobs=1); Ray schedules the dynamic stage
        reports, _ = run_on_ray(self.ray or "auto", [_submission(code, reference, path)], self.config,
                                replace(self.options, jobs=1), {})
        return reports[0]

    # ------------------------------------------------------------------------------ the API
    def submit(self, code: str, reference: str | None = None) -> Future[Verification]:
        """Verify one candidate in the background; the future's result is its ``Verification``
        (never an exception for anything the candidate does)."""
        return self._executor.submit(self._run, code, reference)

    def verify(self, code: str, reference: str | None = None) -> Verification:
        """Verify one candidate and wait for it."""
        return self.submit(code, reference).result()

    def stream(self, batch: Iterable[tuple[str, str | None]]) -> Iterator[tuple[int, Verification]]:
        """``(index, Verification)`` for each ``(code, reference)`` of ``batch`` as it finishes."""
        pending = {self.submit(code, ref): i for i, (code, ref) in enumerate(batch)}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                yield pending.pop(f), f.result()

    def map(self, batch: Iterable[tuple[str, str | None]]) -> list[Verification]:
        """Every ``(code, reference)`` of ``batch`` verified, in the batch's order."""
        futures = [self.submit(code, ref) for code, ref in batch]
        return [f.result() for f in futures]

    def close(self) -> None:
        """Wait for what is in flight and stop taking work (the process's worker server stays up
        for the next ``Verifier``)."""
        self._executor.shutdown(wait=True)

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verify(code: str, reference: str | None = None, *, device: str = "auto", seed: int | None = None,
           perf: str = "quick", timeout: float = 120.0, baselines: Sequence[str] | None = None,
           reject_classes: Sequence[str] | None = None, harness: str | None = None,
           config: Config | None = None, sandbox: str = "required") -> Verification:
    """The whole verification of one candidate against its reference: the static stage, then the
    candidate run on hidden inputs in sandboxed workers (correctness, integrity), then its timing
    against strict fp32, TF32 and ``torch.compile`` (``perf``: quick, target, thorough or off).

    Returns a ``Verification``: the verdict, whether the gate accepts it, what it is rejected for,
    the findings, correctness on hidden inputs, the verified speedups with their intervals and the
    seed that replays it.  An empty or missing generation, or one that could not be run, is
    ``error``.  For many candidates keep a ``Verifier``: it keeps the workers warm."""
    v = Verifier(device=device, seed=seed, perf=perf, timeout=timeout, baselines=baselines,
                 reject_classes=reject_classes, harness=harness, config=config, sandbox=sandbox, prewarm=False)
    try:
        return v.verify(code, reference)
    finally:
        v.close()
