"""The whole job for the command line: discover inputs, run the static stage, then the dynamic and
performance stages where they can run, and hand the reports to a view.

The static stage runs in this process (it never imports or runs candidate code).  The dynamic
stage is imported only when asked for: it imports torch, and it runs candidates in child
processes (see ``hackscan.dynamic``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from .config import Config
from .dynamic.options import DynamicOptions
from .inputs import InputOptions, InputProblem, Submission, discover
from .model import Report


@dataclass(frozen=True)
class RunOptions(DynamicOptions):
    """The dynamic stage's options (``hackscan.dynamic.options.DynamicOptions``) and whether it runs at all;
    ``jobs`` also sets the static stage's processes."""

    static_only: bool = False


def dynamic_available() -> str | None:
    """None when the dynamic stage can run here, else the reason it cannot."""
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (pip install 'hackscan[dynamic]' adds the dynamic stage)"
        if importlib.util.find_spec("hackscan.dynamic") is None:
            return "the dynamic stage is not installed"
    except (ImportError, ValueError):
        return "torch is not importable"
    return None


OnReport = Callable[[int, Report], None]
# (candidates done, candidates in the dynamic stage, path, phase): a dynamic-stage phase begins for
# the candidate after the first ``done``; phases are setup, build, probes, timing (dynamic/stage.py)
OnPhase = Callable[[int, int, str, str], None]


class ResultStream:
    """Finished reports, one JSON line each (``Report.to_dict()`` plus ``"index"``, the item's
    position in the input, and ``"key"``, the result's content hash when the run knows it: see
    ``hackscan.resume``), appended and flushed to disk (``fsync``) as each one completes: a
    hackscan process killed mid-batch keeps every result it had finished."""

    def __init__(self, path: str):
        self.path = path
        self._fh: IO[str] = open(path, "a", encoding="utf-8")
        # a line cut short by a kill (no newline at its end) must not swallow the next result
        if self._fh.tell() > 0:
            with open(path, "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    self._fh.write("\n")

    def __call__(self, index: int, report: Report, key: str | None = None) -> None:
        row = dict(report.to_dict(), index=index)
        if key is not None:
            row["key"] = key
        line = json.dumps(row, separators=(",", ":"), default=str)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def failed_reports(reports: Iterable[Report]) -> list[Report]:
    """Reports whose dynamic stage broke for a reason the candidate is not known to have caused
    (the reference or the worker server died, hackscan's own error): verdict ``error``, exit 2."""
    return [r for r in reports if isinstance(r.dynamic, dict) and r.dynamic.get("failed")]


def run(paths: Sequence[str], config: Config, inputs: InputOptions, options: RunOptions,
        progress: Callable[[int, int, str], None] | None = None, on_report: OnReport | None = None,
        on_phase: OnPhase | None = None) -> list[Report]:
    items: list[Submission | InputProblem] = list(discover(paths, inputs))
    return run_items(items, config, options, progress, on_report, on_phase)


def run_items(items: Sequence[Submission | InputProblem], config: Config, options: RunOptions,
              progress: Callable[[int, int, str], None] | None = None,
              on_report: OnReport | None = None, on_phase: OnPhase | None = None) -> list[Report]:
    """Static stage over every item (in ``options.jobs`` processes), then the dynamic stage.

    Reports come back in input order whatever the number of jobs.  ``progress(done, total, label)``
    is called once per item and stage; dynamic-stage labels start with ``dynamic:``.
    ``on_report(index, report)`` is called once per item as soon as its report is final (after
    the static stage for what the dynamic stage does not run, after the dynamic stage otherwise).
    ``on_phase(done, total, path, phase)`` is called as each dynamic-stage phase of a candidate
    begins; by default it is ``progress.phase`` where the progress reporter has one (cli.ProgressBar).
    """
    from .parallel import scan_items

    if on_phase is None:
        on_phase = getattr(progress, "phase", None)
    dynamic = None
    reason: str | None = "static only"
    if not options.static_only:
        reason = dynamic_available()
        if reason is None:
            from .dynamic import run_dynamic_stage as dynamic  # noqa: N813
        else:
            dynamic = _unavailable(reason)

    def static_done(index: int, report: Report) -> None:
        if on_report is not None and (dynamic is None or not isinstance(items[index], Submission)):
            on_report(index, report)

    reports = scan_items(items, config, jobs=options.jobs, progress=progress, on_report=static_done)
    if dynamic is None:
        return reports
    todo = [i for i, item in enumerate(items) if isinstance(item, Submission)]
    finished = [0]

    def one(i: int, slot: object = None) -> Report:
        hook = None
        if on_phase is not None:
            def hook(phase: str, path: str = reports[i].path) -> None:
                on_phase(finished[0], len(todo), path, phase)  # type: ignore[misc]
        return _guarded(dynamic, items[i], reports[i], options, config, hook, slot)  # type: ignore[arg-type]

    def done(i: int, report: Report) -> None:
        reports[i] = report
        finished[0] += 1
        if on_report is not None:
            on_report(i, report)
        if progress is not None:
            progress(finished[0], len(todo), f"dynamic: {report.path}")

    if reason is None:
        # several candidates at once, timing exclusive per device (dynamic/schedule.py)
        from .dynamic.schedule import run_candidates

        run_candidates(todo, one, options, done)
    else:
        for i in todo:
            done(i, one(i))
    return reports


def run_resumable(items: Sequence[Submission | InputProblem], config: Config, options: RunOptions,
                  done: Mapping[str, Report], stream: ResultStream | None = None,
                  progress: Callable[[int, int, str], None] | None = None) -> tuple[list[Report], int]:
    """``run_items`` over the items whose result is not in ``done`` (reports by key, read back from
    an earlier run's stream: ``hackscan.resume.load_done``); each new result goes to ``stream`` with
    its key as it completes.  Returns every item's report in input order, and how many were reused.

    A reused report is the one the earlier run streamed, unchanged; the new ones are what a one-shot
    run would produce for them, so the reports at the end are those of a run that was never killed.
    """
    from .resume import result_key, settings_digest

    settings = settings_digest(options, config)
    keys = [result_key(item, settings) for item in items]
    todo = [i for i, k in enumerate(keys) if k not in done]

    def streamed(j: int, report: Report) -> None:
        if stream is not None:
            stream(todo[j], report, keys[todo[j]])

    new = run_items([items[i] for i in todo], config, options, progress, on_report=streamed)
    reports: list[Report | None] = [done.get(k) for k in keys]
    for i, report in zip(todo, new, strict=True):
        reports[i] = report
    return reports, len(items) - len(todo)  # type: ignore[return-value]


def _guarded(dynamic: Callable[..., Report], sub: Submission, report: Report,
             options: RunOptions, config: Config, on_phase: Callable[[str], None] | None = None,
             slot: object = None) -> Report:
    """One candidate's dynamic-stage failure must not cost the other candidates their results, nor
    pass this one on its static verdict alone: a bug there is verdict ``error`` (fail closed)."""
    from .model import Verdict

    try:
        kw: dict = {}
        if on_phase is not None:
            kw["on_phase"] = on_phase
        if slot is not None:
            kw["slot"] = slot
        return dynamic(sub, report, options, config, **kw)
    except Exception as exc:  # a bug in the dynamic stage itself; candidate crashes are findings there
        why = f"dynamic stage failed: {type(exc).__name__}: {exc}"
        return report.with_(verdict=Verdict.ERROR, error=why, dynamic={"ran": False, "failed": True, "reason": why})


def _unavailable(reason: str) -> Callable[[Submission, Report, RunOptions, Config], Report]:
    def note(sub: Submission, report: Report, options: RunOptions, config: Config, on_phase: object = None) -> Report:
        dyn = {"ran": False, "reason": f"dynamic stage not run: {reason}"}
        return report.with_(dynamic=dyn)

    return note


