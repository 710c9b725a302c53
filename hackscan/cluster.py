"""``--ray ADDRESS``: the dynamic stage of each candidate as a task on a Ray cluster.

Ray only schedules.  Each task runs the same per-candidate path as a local run
(``pipeline._guarded`` around ``dynamic.run_dynamic_stage``): the candidate's workers still start in
their own bubblewrap sandbox on the node that runs the task, and a task that fails is a verdict
``error``, never a pass.  The static stage runs here, in the driver: it is pure Python, it never runs
candidate code, and it decides what the dynamic stage is given.

A task asks for one GPU (``num_gpus=1``: one candidate's probes and timing on one GPU, so no other
candidate's work shares it while it is timed) when the cluster has GPUs and ``--device`` allows
them, else for one CPU.  Results come back as they finish; each is streamed with its key (see
``hackscan.resume``) at once, so ``--resume`` works the same as for a local run, and the reports
are returned in input order, as a local run's are.

``ADDRESS``: ``auto`` joins the cluster this machine belongs to (``ray start`` ran here),
``local`` starts a private one for this run, anything else is a cluster's ``host:port`` or
``ray://host:port``.  The nodes need hackscan with its dynamic extra installed (a ``local`` cluster
is given this process's import path).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .config import Config
from .inputs import InputProblem, Submission
from .model import Report

INSTALL_HINT = "--ray needs the ray extra: pip install 'hackscan[ray]'"


def ray_problem(address: str) -> str | None:
    """Why ``--ray ADDRESS`` cannot run here, or None."""
    if not address.strip():
        return "--ray needs an address: auto, local or host:port"
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return INSTALL_HINT
    return None


def connect(address: str, num_cpus: int | None = None) -> None:
    """Join or start the cluster (once per process: a second call keeps the first connection)."""
    import ray

    if ray.is_initialized():
        return
    here = str(Path(__file__).resolve().parent.parent)
    kw: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
    if address == "local":
        # a private cluster on this machine runs this very hackscan: its import path goes along
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        kw["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
        if num_cpus is not None:
            kw["num_cpus"] = num_cpus
        ray.init(address="local", **kw)
    else:
        ray.init(address=address, **kw)


def _dynamic_task(sub: Submission, report: dict[str, Any], options: Any, config: Config) -> dict[str, Any]:
    """One candidate's dynamic stage, on the node Ray chose (reports travel as their JSON form)."""
    from .pipeline import _guarded, _unavailable, dynamic_available
    from .resume import report_from_dict

    reason = dynamic_available()
    if reason is None:
        from .dynamic import run_dynamic_stage as dynamic
    else:
        dynamic = _unavailable(f"{reason} on the Ray node")
    return _guarded(dynamic, sub, report_from_dict(report), options, config).to_dict()


def run_on_ray(address: str, items: Sequence[Submission | InputProblem], config: Config, options: Any,
               done: Mapping[str, Report], stream: Callable[..., None] | None = None,
               progress: Callable[[int, int, str], None] | None = None,
               num_cpus: int | None = None) -> tuple[list[Report], int]:
    """``pipeline.run_resumable`` with the dynamic stage on Ray: every item's report in input order,
    and how many came from ``done``."""
    from .parallel import scan_items
    from .pipeline import dynamic_available
    from .resume import result_key, settings_digest

    settings = settings_digest(options, config)
    keys = [result_key(item, settings) for item in items]
    todo = [i for i, k in enumerate(keys) if k not in done]
    reports: list[Report | None] = [done.get(k) for k in keys]
    dynamic = not options.static_only and dynamic_available() is None
    static = scan_items([items[i] for i in todo], config, jobs=options.jobs, progress=progress)
    remote: list[int] = []
    for i, report in zip(todo, static, strict=True):
        if dynamic and isinstance(items[i], Submission):
            remote.append(i)
            continue
        if options.static_only or isinstance(items[i], InputProblem):
            reports[i] = report
        else:  # torch is missing here: the same note a local run gives
            from .pipeline import _unavailable

            reports[i] = _unavailable(dynamic_available() or "")(items[i], report, options, config)
        if stream is not None:
            stream(i, reports[i], keys[i])
    if remote:
        _run_remote(address, remote, items, {i: r for i, r in zip(todo, static, strict=True)}, keys, reports,
                    config, options, stream, progress, num_cpus)
    return reports, len(items) - len(todo)  # type: ignore[return-value]


def _run_remote(address: str, remote: list[int], items: Sequence[Submission | InputProblem],
                static: Mapping[int, Report], keys: list[str], reports: list[Report | None], config: Config,
                options: Any, stream: Callable[..., None] | None,
                progress: Callable[[int, int, str], None] | None, num_cpus: int | None) -> None:
    import ray

    from .model import Verdict
    from .resume import report_from_dict

    connect(address, num_cpus)
    gpus = ray.cluster_resources().get("GPU", 0) > 0 and options.device != "cpu"
    task = ray.remote(num_gpus=1, num_cpus=0)(_dynamic_task) if gpus else ray.remote(num_cpus=1)(_dynamic_task)
    pending = {task.remote(items[i], static[i].to_dict(), options, config): i for i in remote}
    finished = 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(ready[0])
        try:
            reports[i] = report_from_dict(ray.get(ready[0]))
        except Exception as exc:  # the task, its worker or its node died: fail closed for this one only
            why = f"dynamic stage failed on the Ray cluster: {type(exc).__name__}: {str(exc)[:300]}"
            reports[i] = static[i].with_(verdict=Verdict.ERROR, error=why,
                                         dynamic={"ran": False, "failed": True, "reason": why})
        finished += 1
        if stream is not None:
            stream(i, reports[i], keys[i])
        if progress is not None:
            progress(finished, len(remote), f"dynamic: {reports[i].path}")
