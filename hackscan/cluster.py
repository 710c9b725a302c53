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


class ClusterUnreachable(RuntimeError):
    """The cluster could not be joined: every candidate keeps its static result and the dynamic stage
    is reported as not run on it (fail closed), with this one line as the reason."""


def _token_available() -> bool:
    """Whether this machine holds a Ray authentication token (where Ray itself looks for one)."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    try:
        return Path(path).is_file() and Path(path).stat().st_size > 0
    except OSError:
        return False


def _auth_for(address: str) -> None:
    """Token authentication for an explicit address, as Ray does for ``auto``.

    ``ray start --head`` (Ray 2.59 and later) enables token authentication whenever a token exists
    (``~/.ray/auth_token``, written by any earlier ``ray.init()`` here), but ``ray.init`` turns it on
    only for ``auto``: a ``host:port`` then failed after 25 s of connection retries with an internal
    error.  A token on this machine means the clusters it starts use it, so the driver presents it;
    ``RAY_AUTH_MODE`` set by the user is left as it is."""
    if address == "local" or "RAY_AUTH_MODE" in os.environ or not _token_available():
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray reads the mode into its native config once: refresh it as Ray's own setup does
        from ray._raylet import Config as RayConfig

        RayConfig.initialize("")
    except (ImportError, AttributeError):
        pass


def connect(address: str, num_cpus: int | None = None) -> None:
    """Join or start the cluster (once per process: a second call keeps the first connection).
    Raises ``ClusterUnreachable`` with one line when the cluster cannot be joined."""
    import ray

    if ray.is_initialized():
        return
    here = str(Path(__file__).resolve().parent.parent)
    kw: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False}
    _auth_for(address)
    if address == "local":
        # a private cluster on this machine runs this very hackscan: its import path goes along
        path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
        kw["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
        if num_cpus is not None:
            kw["num_cpus"] = num_cpus
        ray.init(address="local", **kw)
        return
    unreachable = _probe(address)
    if unreachable:
        raise ClusterUnreachable(unreachable)
    try:
        with _quiet_native_stderr():
            ray.init(address=address, **kw)
    except Exception as exc:  # ConnectionError, Ray's internal errors, a refused token
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ClusterUnreachable(f"cannot join the Ray cluster at {address}: {type(exc).__name__}: {first}") from None


def _probe(address: str, timeout: float = 5.0) -> str | None:
    """Why ``host:port`` (or ``ray://host:port``) takes no TCP connection, or None.  Ray retries an
    address that answers nothing for about 35 s an attempt, twenty attempts: a mistyped port held
    the run for twelve minutes before the first line of its report."""
    import socket

    if address == "auto":
        return None
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return None  # Ray's own parsing says what is wrong with it
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return f"cannot join the Ray cluster at {address}: {exc.strerror or exc} (is `ray start --head` running there?)"


class _quiet_native_stderr:
    """Ray's C++ core writes a warning per failed connection attempt straight to file descriptor 2
    (some 20 lines while it retries); a failed join is reported in one line instead.  The lines go
    to a temporary file, shown only when hackscan's debug variable asks (HACKSCAN_DEBUG)."""

    def __enter__(self) -> _quiet_native_stderr:
        import sys
        import tempfile

        self._saved = None
        if os.environ.get("HACKSCAN_DEBUG"):
            return self
        try:
            sys.stderr.flush()
            self._file = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._file.fileno(), 2)
        except OSError:
            self._saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._file.close()


def _timed_task(sub: Submission, report: dict[str, Any], options: Any, config: Config) -> dict[str, Any]:
    """``_dynamic_task`` with what it took on its node: the driver sees completions in the order
    they arrive, so the time between two of them is not either task's duration."""
    import socket
    import time

    t0 = time.monotonic()
    out = _dynamic_task(sub, report, options, config, pool=_pool_for(options))
    return {"report": out, "elapsed_s": time.monotonic() - t0, "node": socket.gethostname()}


# a task's worker pools, one per (sandbox mode, build cache folder): a Ray worker process outlives
# the run that started it, and a pool keeps the cache folder its first sandboxes were started with
_POOLS: dict[tuple[str | None, str], Any] = {}


def _pool_for(options: Any) -> Any:
    """The pool whose sandboxes seed from and harvest into the driver's build cache folder
    (``_with_build_cache``), or None for the process's default pool."""
    cache = (getattr(options, "extra", None) or {}).get("build_cache")
    if not cache:
        return None
    key = (getattr(options, "sandbox", None), str(cache))
    pool = _POOLS.get(key)
    if pool is None:
        import atexit

        from .dynamic.pool import WorkerPool

        pool = _POOLS[key] = WorkerPool(sandbox=key[0], cache_root=key[1])
        atexit.register(pool.close)
    return pool


def _dynamic_task(sub: Submission, report: dict[str, Any], options: Any, config: Config,
                  pool: Any = None) -> dict[str, Any]:
    """One candidate's dynamic stage, on the node Ray chose (reports travel as their JSON form)."""
    from .pipeline import _guarded, _unavailable, dynamic_available
    from .resume import report_from_dict

    reason = dynamic_available()
    if reason is None:
        from .dynamic import run_dynamic_stage as dynamic

        if pool is not None:
            import functools

            dynamic = functools.partial(dynamic, pool=pool)
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

    def failed(i: int, why: str) -> Report:
        # fail closed for this candidate, keeping every static finding
        return static[i].with_(verdict=Verdict.ERROR, error=why, dynamic={"ran": False, "failed": True, "reason": why})

    try:
        connect(address, num_cpus)
    except ClusterUnreachable as exc:
        for n, i in enumerate(remote, 1):
            reports[i] = failed(i, str(exc))
            if stream is not None:
                stream(i, reports[i], keys[i])
            if progress is not None:
                progress(n, len(remote), f"dynamic: {reports[i].path}")
        return
    gpus = ray.cluster_resources().get("GPU", 0) > 0 and options.device != "cpu"
    task = ray.remote(num_gpus=1, num_cpus=0)(_timed_task) if gpus else ray.remote(num_cpus=1)(_timed_task)
    task_options = _with_build_cache(options)
    pending = {task.remote(items[i], static[i].to_dict(), task_options, config): i for i in remote}
    finished = 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(ready[0])
        took = None
        try:
            got = ray.get(ready[0])
            reports[i] = report_from_dict(got["report"])
            took = float(got["elapsed_s"])
        except Exception as exc:  # the task, its worker or its node died: fail closed for this one only
            reports[i] = failed(i, f"dynamic stage failed on the Ray cluster: {type(exc).__name__}: {str(exc)[:300]}")
        finished += 1
        if stream is not None:
            stream(i, reports[i], keys[i])
        if progress is not None:
            done_in = getattr(progress, "done_in", None)
            if done_in is not None and took is not None:
                done_in(finished, len(remote), f"dynamic: {reports[i].path}", took)
            else:
                progress(finished, len(remote), f"dynamic: {reports[i].path}")


def _with_build_cache(options: Any) -> Any:
    """``options`` naming the driver's build cache folder for the tasks.  A task's process does not
    inherit the driver's environment (HACKSCAN_CACHE_DIR) and compiled every extension again into
    its own default folder (259 s against 22 s for a build the driver's cache held); with the
    folder named, a node on this host, or one that mounts the folder at the same path, reuses the
    builds, and the builds it makes land where the next run finds them."""
    import dataclasses

    extra = dict(getattr(options, "extra", None) or {})
    if extra.get("build_cache") or not dataclasses.is_dataclass(options):
        return options
    from .dynamic.shared.extcache import default_cache_dir

    extra["build_cache"] = str(default_cache_dir().resolve())
    return dataclasses.replace(options, extra=extra)
