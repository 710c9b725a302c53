"""Scan many submissions in parallel processes, in input order, losing no result to one bad file.

The static scan costs a few milliseconds per file, so work goes to worker processes in chunks of
submissions and comes back one report at a time (the progress bar moves per file, and a worker that
dies mid-chunk has already delivered everything before the file that killed it).  What a worker can
do wrong, and what the parent does about it:

* a rule or parser raises: the engine already turns that into an ``analysis-failure`` finding;
* the worker process dies (a crash in a native parser, the OOM killer): the file it was on is
  retried once alone in a fresh worker, and if it kills that one too it gets an ``error`` report;
* a file takes longer than ``item_timeout``: the worker is killed and the file gets an ``error``
  report; the rest of its chunk goes back in the queue.

Reports come back pickled from workers that this process started and that only parse (they never
import or run candidate code), so unpickling them is safe; candidate code runs only in the dynamic
stage's own sandboxed children.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from .config import Config
from .inputs import InputProblem, Submission
from .model import Confidence, Finding, Location, Report, Severity, Stage, Verdict

Item = Submission | InputProblem
Progress = Callable[[int, int, str], None]

# below this many items a pool costs more to start than it saves
MIN_PARALLEL_ITEMS = 8
DEFAULT_ITEM_TIMEOUT = 60.0
ANALYSIS_FAILURE = "HS005"


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def chunk_size(n_items: int, jobs: int) -> int:
    """Chunks small enough to balance the load (about eight per worker), big enough to amortise a message."""
    return max(1, min(64, -(-n_items // (jobs * 8))))


# ---------------------------------------------------------------------------------------------- worker
def _worker_main(conn: Connection, config: Config) -> None:
    from .engine import StaticScanner

    scanner = StaticScanner(config)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        for index, item in msg:
            conn.send(("start", index))
            report = scanner.scan(item)
            try:
                conn.send(("report", index, report))
            except Exception as exc:  # an unpicklable evidence value: keep the verdict, say what was lost
                conn.send(("report", index, _failure_report(item, f"report could not be sent back: {exc}",
                                                            traceback.format_exc(limit=4), report.verdict)))


def _failure_report(item: Item, why: str, detail: str = "", verdict: Verdict = Verdict.ERROR) -> Report:
    file = item.file if isinstance(item, Submission) else item.path
    path = file or item.path
    finding = Finding(
        rule=ANALYSIS_FAILURE, name="analysis-failure", severity=Severity.WARNING, confidence=Confidence.LOW,
        message=f"hackscan failed to analyse this submission: {why}",
        location=Location(path, 1, 1, record=item.record), stage=Stage.STATIC,
        evidence={"traceback": detail} if detail else {})
    meta = dict(item.meta) if isinstance(item, Submission) else {}
    return Report(path=item.path, verdict=verdict, findings=(finding,), error=why, record=item.record, meta=meta)


@dataclass
class _Worker:
    proc: mp.process.BaseProcess
    conn: Connection
    chunk: deque = field(default_factory=deque)  # (index, item) not yet reported
    current: int | None = None  # the index being scanned now
    started: float = 0.0

    @property
    def busy(self) -> bool:
        return bool(self.chunk)


def _context() -> mp.context.BaseContext:
    # fork is cheapest and the scanner never touches threads or CUDA; once torch is imported
    # (a dynamic run in this process) a fork could inherit its thread state, so spawn instead
    if sys.platform.startswith("linux") and "torch" not in sys.modules:
        return mp.get_context("fork")
    return mp.get_context("spawn")


class ParallelScanner:
    """A pool of static-scan workers; ``scan`` returns reports in input order."""

    def __init__(self, config: Config, jobs: int, item_timeout: float = DEFAULT_ITEM_TIMEOUT,
                 start_method: str | None = None):
        self.config = config
        self.jobs = max(1, jobs)
        self.item_timeout = item_timeout
        self._ctx = mp.get_context(start_method) if start_method else _context()

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_worker_main, args=(child, self.config), daemon=True)
        proc.start()
        child.close()
        return _Worker(proc, parent)

    @staticmethod
    def _stop(w: _Worker, kill: bool = False) -> None:
        try:
            if kill:
                w.proc.kill()
            else:
                w.conn.send(None)
        except (OSError, ValueError):
            pass
        w.proc.join(timeout=5)
        if w.proc.is_alive():  # pragma: no cover - a worker that ignores the stop message
            w.proc.kill()
            w.proc.join(timeout=5)
        w.conn.close()

    def scan(self, items: Sequence[Item], progress: Progress | None = None,
             on_report: Callable[[int, Report], None] | None = None) -> list[Report]:
        n = len(items)
        results: list[Report | None] = [None] * n
        size = chunk_size(n, self.jobs)
        queue: deque[list[tuple[int, Item]]] = deque(
            [(i, items[i]) for i in range(s, min(n, s + size))] for s in range(0, n, size))
        retried: set[int] = set()
        done = 0

        def finish(index: int, report: Report) -> None:
            nonlocal done
            if results[index] is None:
                done += 1
            results[index] = report
            if on_report is not None:
                on_report(index, report)
            if progress is not None:
                progress(done, n, report.path)

        def assign(w: _Worker) -> None:
            if queue and not w.busy:
                chunk = queue.popleft()
                w.chunk = deque(chunk)
                w.current, w.started = None, time.monotonic()
                w.conn.send(chunk)

        def lost(w: _Worker, why: str) -> None:
            """The worker is gone: blame the file it was on, requeue the rest of its chunk."""
            rest = list(w.chunk)
            w.chunk.clear()
            if not rest:
                return
            culprit = w.current if w.current is not None else rest[0][0]
            others = [(i, it) for i, it in rest if i != culprit]
            if others:
                queue.appendleft(others)
            if culprit in retried or why.startswith("timed out"):
                finish(culprit, _failure_report(items[culprit], why))
            else:
                retried.add(culprit)
                queue.append([(culprit, items[culprit])])

        workers = [self._spawn() for _ in range(min(self.jobs, len(queue)))]
        try:
            for w in workers:
                assign(w)
            while any(w.busy for w in workers):
                busy = [w for w in workers if w.busy]
                ready = wait([w.conn for w in busy], timeout=1.0)
                now = time.monotonic()
                for w in busy:
                    if w.conn in ready:
                        try:
                            msg = w.conn.recv()
                        except (EOFError, OSError):
                            code = w.proc.exitcode if not w.proc.is_alive() else None
                            self._replace(workers, w, lost, f"the scanning process died (exit code {code})")
                            continue
                        if msg[0] == "start":
                            w.current, w.started = msg[1], now
                        elif msg[0] == "report":
                            w.chunk = deque((i, it) for i, it in w.chunk if i != msg[1])
                            w.current = None
                            finish(msg[1], msg[2])
                    elif w.current is not None and now - w.started > self.item_timeout:
                        self._replace(workers, w, lost, f"timed out after {self.item_timeout:g} s")
                for w in workers:
                    assign(w)
        finally:
            for w in workers:
                self._stop(w, kill=w.busy)
        for i, r in enumerate(results):
            if r is None:
                results[i] = _failure_report(items[i], "no result came back")
                if on_report is not None:
                    on_report(i, results[i])
        return results  # type: ignore[return-value]

    def _replace(self, workers: list[_Worker], w: _Worker, lost: Callable[[_Worker, str], None], why: str) -> None:
        lost(w, why)
        self._stop(w, kill=True)
        workers[workers.index(w)] = self._spawn()


def scan_items(items: Sequence[Item], config: Config, jobs: int = 1, progress: Progress | None = None,
               item_timeout: float = DEFAULT_ITEM_TIMEOUT,
               on_report: Callable[[int, Report], None] | None = None) -> list[Report]:
    """Statically scan ``items``; in ``jobs`` processes when that pays, else in this one."""
    if jobs <= 1 or len(items) < MIN_PARALLEL_ITEMS:
        from .engine import StaticScanner

        scanner = StaticScanner(config)
        out = []
        for i, item in enumerate(items):
            out.append(scanner.scan(item))
            if on_report is not None:
                on_report(i, out[-1])
            if progress is not None:
                progress(i + 1, len(items), out[-1].path)
        return out
    return ParallelScanner(config, jobs, item_timeout).scan(items, progress, on_report)
