"""The whole job for the command line: discover inputs, run the static stage, then the dynamic and
performance stages where they can run, and hand the reports to a view.

The static stage runs in this process (it never imports or runs candidate code).  The dynamic
stage is imported only when asked for: it imports torch, and it runs candidates in child
processes (see ``hackscan.dynamic``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .config import Config
from .inputs import InputOptions, InputProblem, Submission, discover
from .model import Report


@dataclass(frozen=True)
class RunOptions:
    static_only: bool = False
    device: str = "auto"  # cpu | cuda | auto
    seed: int | None = None
    timeout: float = 120.0  # seconds per candidate for the dynamic stage
    perf: bool = True  # time candidates that pass correctness
    jobs: int = 1
    # baselines to time against ("eager", "tf32", "compile"); None: all on a GPU, eager on the CPU
    baselines: tuple[str, ...] | None = None
    # "required": every worker in its own OS sandbox (dynamic/sandbox.py); "off": no walls
    sandbox: str = "required"
    extra: dict = field(default_factory=dict)


def dynamic_available() -> str | None:
    """None when the dynamic stage can run here, else the reason it cannot."""
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return "torch is not installed"
        if importlib.util.find_spec("hackscan.dynamic") is None:
            return "the dynamic stage is not installed"
    except (ImportError, ValueError):
        return "torch is not importable"
    return None


def run(paths: Sequence[str], config: Config, inputs: InputOptions, options: RunOptions,
        progress: Callable[[int, int, str], None] | None = None) -> list[Report]:
    items: list[Submission | InputProblem] = list(discover(paths, inputs))
    return run_items(items, config, options, progress)


def run_items(items: Sequence[Submission | InputProblem], config: Config, options: RunOptions,
              progress: Callable[[int, int, str], None] | None = None) -> list[Report]:
    """Static stage over every item (in ``options.jobs`` processes), then the dynamic stage.

    Reports come back in input order whatever the number of jobs.  ``progress(done, total, label)``
    is called once per item and stage; dynamic-stage labels start with ``dynamic:``.
    """
    from .parallel import scan_items

    dynamic = None
    if not options.static_only:
        reason = dynamic_available()
        if reason is None:
            from .dynamic import run_dynamic_stage as dynamic  # noqa: N813
        else:
            dynamic = _unavailable(reason)
    reports = scan_items(items, config, jobs=options.jobs, progress=progress)
    if dynamic is None:
        return reports
    todo = [i for i, item in enumerate(items) if isinstance(item, Submission)]
    for n, i in enumerate(todo):
        reports[i] = _guarded(dynamic, items[i], reports[i], options, config)  # type: ignore[arg-type]
        if progress is not None:
            progress(n + 1, len(todo), f"dynamic: {reports[i].path}")
    return reports


def _guarded(dynamic: Callable[[Submission, Report, RunOptions, Config], Report], sub: Submission, report: Report,
             options: RunOptions, config: Config) -> Report:
    """One candidate's dynamic-stage failure must not cost the other candidates their results."""
    try:
        return dynamic(sub, report, options, config)
    except Exception as exc:  # a bug in the dynamic stage itself; candidate crashes are findings there
        return report.with_(dynamic={"ran": False, "reason": f"dynamic stage failed: {type(exc).__name__}: {exc}"})


def _unavailable(reason: str) -> Callable[[Submission, Report, RunOptions, Config], Report]:
    def note(sub: Submission, report: Report, options: RunOptions, config: Config) -> Report:
        dyn = {"ran": False, "reason": f"dynamic stage not run: {reason}"}
        return report.with_(dynamic=dyn)

    return note


def iter_paths(paths: Iterable[str]) -> list[str]:
    return [str(p) for p in paths]
