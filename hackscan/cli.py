"""The ``hackscan`` command.

``hackscan PATH...`` audits files, folders and JSONL datasets (the main job); ``hackscan rules``
lists the registry and ``hackscan explain ID`` prints one rule's docs.  Exit codes follow ruff and
bandit: 0 when nothing reaches ``--fail-on``, 1 when something does, 2 for usage or internal errors.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup
from typer.exceptions import Abort, TyperException

from . import __version__


class _DefaultToScan(TyperGroup):
    """Route ``hackscan PATH...`` to the ``scan`` command, so the main job needs no verb."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:  # ctx: click.Context
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["scan", *args]
        elif not args:
            args = ["--help"]
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        """The group's help, then the main job's options: ``hackscan PATH... [OPTIONS]`` is what most
        runs are, and its options were only under ``hackscan scan --help``."""
        super().format_help(ctx, formatter)
        import click

        scan = self.commands.get("scan")
        if scan is None:
            return
        sub = click.Context(scan, info_name="scan", parent=ctx)
        rows = [r for r in (p.get_help_record(sub) for p in scan.get_params(sub)
                            if not isinstance(p, click.Argument)) if r]
        with formatter.section("Options of the main job (hackscan PATH... [OPTIONS], same as hackscan scan)"):
            formatter.write_dl(rows)

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        """Usage errors (an unknown option, a value outside an option's choices) as one line on
        stderr and exit 2, like hackscan's own errors: typer would draw a boxed panel, click a
        four-line usage block."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except TyperException as exc:  # click's UsageError, BadParameter and the like
            # typer 0.29 prefixes choice errors with pydantic's "Value error, "; it says nothing
            message = " ".join(exc.format_message().replace("Value error, ", "").split())
            hint = ""
            ctx = getattr(exc, "ctx", None)
            if ctx is not None:
                hint = f" (see `{ctx.command_path} --help`)"
            sys.stderr.write(f"hackscan: error: {message}{hint}\n")
            sys.exit(exc.exit_code)
        except Abort:
            sys.stderr.write("hackscan: aborted\n")
            sys.exit(1)
        # non-standalone click returns the command's value, or the code of an Exit it raised
        sys.exit(code if isinstance(code, int) else 0)


class _PlainArgs(TyperCommand):
    """Arguments in help as their metavar alone (``PATH...``, ``[PATH...]``): typer draws a list
    argument as ``{paths}...`` in the usage line and adds ``<list[Path]>`` after it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar:
                shown = param.metavar if param.required else f"[{param.metavar}]"
                # per instance: these two methods are all typer consults for the argument's label
                param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
                param._usage_display_name = lambda shown=shown: shown  # type: ignore[method-assign]


app = typer.Typer(
    cls=_DefaultToScan,
    add_completion=False,
    # plain help: rich markup swallowed "[tool.hackscan]" in the --config help
    rich_markup_mode=None,
    no_args_is_help=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Tell whether an LLM-generated GPU kernel does its job or games the benchmark.\n\n"
         "Run `hackscan PATH...` to audit files, folders (a reference.py pairs with its siblings) "
         "and JSONL datasets.",
)


class Format(StrEnum):
    text = "text"
    json = "json"
    sarif = "sarif"
    markdown = "markdown"
    html = "html"


class FailOn(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"
    never = "never"


class Mode(StrEnum):
    audit = "audit"
    gate = "gate"


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Sandbox(StrEnum):
    required = "required"
    no_seccomp = "no-seccomp"
    off = "off"


class PerfMode(StrEnum):
    target = "target"
    quick = "quick"
    thorough = "thorough"


class StageName(StrEnum):
    static = "static"
    dynamic = "dynamic"
    performance = "performance"


class TableFormat(StrEnum):
    text = "text"
    markdown = "markdown"
    json = "json"


class RulesFormat(StrEnum):
    text = "text"
    json = "json"


def _writable(path: Path, what: str) -> None:
    """Refuse an output path that cannot be written before any work starts, so a long dynamic
    run never ends in "cannot write" with its report lost."""
    if path.is_dir():
        raise _fail(f"{what} {path} is a directory, not a file")
    folder = path.parent
    if not folder.is_dir():
        raise _fail(f"cannot write {what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise _fail(f"cannot write {what} {path}: permission denied")


def _split(values: list[str] | None) -> tuple[str, ...]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"hackscan: error: {message}", err=True)
    return typer.Exit(2)


def _sandbox_walls(mode: str) -> None:
    """``--sandbox required`` means every wall: a missing syscall filter fails the run here, in one
    line; a weaker mode, asked for by name, is said on every run."""
    import importlib.util

    from .dynamic.sandbox import WEAKER, check, seccomp_problem

    if mode == "required":
        # where no sandbox can be built at all (no bwrap, no torch), each submission's dynamic
        # stage says so and fails closed as before; here only the missing filter is new
        problem = None if check().get("problem") or importlib.util.find_spec("torch") is None else seccomp_problem()
        if problem:
            raise _fail(f"--sandbox required: {problem}")
    elif mode in WEAKER:
        typer.echo(f"hackscan: warning: --sandbox {mode}: {WEAKER[mode]}", err=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hackscan {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """hackscan: static and dynamic detection of reward hacks in generated GPU kernels."""


def _open_stream(stream_path: Path | None, resume: bool, partial: bool) -> tuple[Any, dict[str, Any]]:
    """The result stream (None without one) and, with ``--resume``, the results already in it."""
    from .pipeline import ResultStream

    sink = None
    done: dict[str, Any] = {}
    if stream_path is not None:
        try:
            if resume:
                from .resume import StreamError, load_done

                try:
                    done = load_done(str(stream_path))
                except StreamError as exc:
                    raise _fail(str(exc)) from None
            elif partial:
                stream_path.unlink(missing_ok=True)  # a leftover of an earlier, interrupted run
            sink = ResultStream(str(stream_path))
        except OSError as exc:
            raise _fail(f"cannot write {stream_path}: {exc.strerror or exc}") from None
    return sink, done


def _check_usage(output: Path | None, stream: Path | None, build_cache: Path | None, build_farm: str,
                 timeout: float, limit: int | None, sample: int | None, resume: bool, ray: str | None) -> None:
    """The checks of ``scan``'s options that need nothing loaded: a usage error before any work."""
    if output is not None:
        _writable(output, "report")
    if stream is not None:
        _writable(stream, "stream")
    if build_cache is not None:
        try:
            build_cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fail(f"--build-cache {build_cache}: {exc.strerror or exc}") from None
    if build_farm not in ("auto", "on", "off"):
        raise _fail(f"--build-farm must be auto, on or off (got {build_farm!r})")
    if not timeout > 0:  # also NaN: a candidate with no time at all would fail as a timeout
        raise _fail(f"--timeout must be a positive number of seconds (got {timeout})")
    if limit is not None and sample is not None:
        raise _fail("--limit and --sample exclude each other: take the first N or a random N")
    if resume and stream is None and output is None:
        raise _fail("--resume needs the stream of the run it resumes: --stream FILE, or -o FILE (FILE.partial.jsonl)")
    if ray is not None:
        from .cluster import ray_problem

        problem = ray_problem(ray)
        if problem:
            raise _fail(problem)


def _one_field(claimed_field: list[str] | None) -> str | None:
    """``--claimed-field``: one field name, or None."""
    if claimed_field:
        if len(claimed_field) > 1:
            raise _fail(f"--claimed-field given {len(claimed_field)} times ({', '.join(claimed_field)}): name one field")
        claimed_field = claimed_field[0]
        if not claimed_field.strip():
            raise _fail("--claimed-field needs a field name")
    else:
        claimed_field = None
    return claimed_field


def _check_rules(registry: Any, keys: list[str]) -> None:
    """Every ``--select``/``--ignore`` key names a rule (an id, a prefix or a name)."""
    for key in keys:
        if not any(r.id.startswith(key.upper()) or r.name == key for r in registry):
            raise _fail(f"no rule matches {key!r} (see `hackscan rules`)")


def _jobs(jobs: int | None, device: str) -> int:
    """``--jobs``: the host's default when not given, one per core for 0."""
    if jobs is None:
        from .perf.default_mode import default_jobs_for_host

        jobs = default_jobs_for_host(device)
    if jobs == 0:
        from .parallel import default_jobs

        jobs = default_jobs()
    return jobs


@app.command("scan", cls=_PlainArgs)
def scan(
    paths: list[Path] = typer.Argument(..., metavar="PATH...", show_default=False,
                                       help="Candidate .py/.cu files, folders, or .jsonl datasets."),
    ref: Path | None = typer.Option(None, "--ref", "-r", metavar="FILE",
                                       help="Reference problem file for every candidate."),
    fmt: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
    output: Path | None = typer.Option(None, "--output", "-o", metavar="FILE", help="Write the report to this file."),
    stream: Path | None = typer.Option(
        None, "--stream", metavar="FILE", help="Append each finished result to this file as one JSON line, flushed to disk at once "
                               "(default with -o FILE: FILE.partial.jsonl, removed once FILE is written)."),
    resume: bool = typer.Option(
        False, "--resume", help="Keep the results already in the stream file (--stream FILE, or FILE.partial.jsonl "
                                "with -o FILE) whose candidate, reference, options and hackscan version are "
                                "unchanged, and run only the rest."),
    claimed_field: list[str] | None = typer.Option(
        None, "--claimed-field", metavar="FIELD", help="JSONL field holding each candidate's claimed speedup (e.g. "
                                "score_default): shown beside the verified speedups and summarised as claimed vs "
                                "verified."),
    ray: str | None = typer.Option(
        None, "--ray", metavar="ADDRESS", help="Run the candidates as tasks on a Ray cluster: auto (the cluster this "
                                "machine belongs to), local (start one here) or host:port. Needs the ray extra."),
    fail_on: FailOn | None = typer.Option(None, "--fail-on", help="Lowest severity that makes the exit code 1."),
    reject_class: str | None = typer.Option(
        None, "--reject-class", metavar="CLASSES", help="Only findings of these verdict classes make the exit code 1 "
                                    "(comma-separated: gaming, integrity, no-kernel, precision, task, meta; default: all). "
                                    "Results that could not be analysed always fail."),
    select: list[str] | None = typer.Option(None, "--select", metavar="RULES",
                                               help="Only these rules (ids, names or prefixes; comma-separated "
                                                    "or repeated)."),
    ignore: list[str] | None = typer.Option(None, "--ignore", metavar="RULES",
                                               help="Skip these rules (ids, names or prefixes)."),
    mode: Mode | None = typer.Option(None, "--mode", help="audit honours suppression comments; gate flags them."),
    static: bool = typer.Option(False, "--static", help="Static stage only: never run candidate code."),
    device: Device = typer.Option(Device.auto, "--device", help="Where the dynamic stage runs candidates."),
    seed: int | None = typer.Option(None, "--seed", metavar="S",
                                        help="Seed for hidden inputs (replay a finding) and for --sample."),
    limit: int | None = typer.Option(None, "--limit", metavar="N", min=1,
                                        help="Scan only the first N submissions (dataset records, files)."),
    sample: int | None = typer.Option(None, "--sample", metavar="N", min=1,
                                         help="Scan a random N of the submissions; the same N for the same --seed."),
    harness: str | None = typer.Option(
        None, "--harness", metavar="NAME", help="The scoring harness the dynamic stage imitates when it loads and calls a "
                                "candidate (kernelbench, plain). Default: kernelbench, or `harness` in the config."),
    timeout: float = typer.Option(120.0, "--timeout", metavar="SECONDS", help="Seconds per candidate for the dynamic stage."),
    no_perf: bool = typer.Option(False, "--no-perf", help="Skip timing and memory measurement."),
    perf_mode: PerfMode | None = typer.Option(
        None, "--perf", help="target: repeat each timing until its 95% interval is within +-5% (at most a "
                                        "few seconds per series; the report says when it did not get there). "
                                        "quick: as target, but the paired speedup is timed in the scan's own pair of worker "
                                        "processes only (an RL gate's budget; the report says the spread between processes "
                                        "is unknown), and a candidate the findings already reject before timing is not "
                                        "timed. thorough: the fixed counts and budgets, whatever the interval. Default: quick on a "
                                        "host with no GPU and at most 4 cores, target elsewhere."),
    sandbox: Sandbox = typer.Option(
        Sandbox.required, "--sandbox", help="required: every process that runs candidate code is in its own OS "
                                             "sandbox (bubblewrap) with every wall, the syscall filter "
                                             "included; refuses to run without them. no-seccomp: the sandbox "
                                             "without its syscall filter. off: no walls, only for code you trust."),
    baselines: str | None = typer.Option(
        None, "--baselines", metavar="LIST", help="What speedups are measured against: eager (strict fp32, always), tf32 (GPU), "
                                  "compile (torch.compile). Default: eager,tf32,compile on a GPU, eager on the CPU."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=0, metavar="N", help="Candidates in flight at once, static and dynamic stage "
                                                                        "(0: one per core); timing stays exclusive per device. "
                                                                        "Default: one per core (at most 4) on a host with no "
                                                                        "GPU, where builds are CPU work; 1 elsewhere."),
    build_cache: Path | None = typer.Option(
        None, "--build-cache", metavar="DIR", help="Folder of compiled extensions, by source hash; shareable between runs and "
                                                   "hosts (default: HACKSCAN_CACHE_DIR or ~/.cache/hackscan)."),
    build_farm: str = typer.Option(
        "auto", "--build-farm", metavar="auto|on|off", help="Compile each candidate's extensions first in a sandbox "
                                                            "without the GPU (import, ModelNew(*get_init_inputs()), "
                                                            "a first call), so no build holds a GPU (auto, the "
                                                            "default: when candidates share a GPU, i.e. --jobs > 1 "
                                                            "on a GPU)."),
    cuda_arch: str | None = typer.Option(
        None, "--cuda-arch", metavar="LIST", help="TORCH_CUDA_ARCH_LIST for every extension build (default: the "
                                                  "caller's own, else the visible GPUs' compute capability)."),
    code_field: str | None = typer.Option(None, "--code-field", metavar="FIELD", help="JSONL field holding the candidate code."),
    ref_field: str | None = typer.Option(None, "--ref-field", metavar="FIELD", help="JSONL field holding the reference code."),
    config_path: Path | None = typer.Option(None, "--config", metavar="FILE", help="pyproject.toml with [tool.hackscan]."),
    progress: bool | None = typer.Option(None, "--progress/--no-progress", help="Where the run is, on stderr: a bar on a terminal, log lines elsewhere (default: on)."),
    color: bool | None = typer.Option(None, "--color/--no-color", help="Colour the text report."),
    perf_stats: bool = typer.Option(False, "--perf-stats", help="The text report's full timing statistics per "
                                    "candidate (series, intervals, pairs of processes, bound) instead of the "
                                    "three-line summary."),
) -> None:
    """Audit candidates (the default command: `hackscan PATH...`)."""
    from .config import ConfigError, load_config
    from .inputs import InputOptions
    from .pipeline import RunOptions, failed_reports, run_resumable
    from .registry import RegistryError

    # every check that can fail on what was typed runs before any work
    _check_usage(output, stream, build_cache, build_farm, timeout, limit, sample, resume, ray)
    claimed_field = _one_field(claimed_field)
    try:
        config = load_config(config_path) if config_path else load_config(start=Path.cwd())
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    try:
        from .registry import load_registry

        registry = load_registry()
    except RegistryError as exc:
        raise _fail(f"rule registry: {exc}") from None
    sel, ign = _split(select), _split(ignore)
    _check_rules(registry, sel + ign)
    if harness is not None:
        from .config import check_harness

        try:
            harness = check_harness(harness)
        except ConfigError as exc:
            raise _fail(str(exc)) from None
    config = config.with_(
        harness=harness,
        select=sel or None,
        ignore=ign or None,
        mode=mode.value if mode else (config.mode if config.source else "audit"),
        code_field=code_field,
        ref_field=ref_field,
    )
    if reject_class is not None:
        from .classes import ClassError, parse_classes

        try:
            config = config.with_(reject_classes=parse_classes(reject_class))
        except ClassError as exc:
            raise _fail(f"--reject-class: {exc}") from None
    if ref is not None and not ref.is_file():
        raise _fail(f"reference {ref} does not exist or is not a file")
    # a missing path is not a usage error: like any bad input it gets a result of its own
    # (verdict error), beside the other paths' results
    inputs = InputOptions(reference=str(ref) if ref else None, code_field=config.code_field, ref_field=config.ref_field,
                          claimed_field=claimed_field)
    jobs = _jobs(jobs, device.value)
    chosen = None
    if baselines is not None:
        from .perf.options import normalise_baseline

        try:
            chosen = tuple(dict.fromkeys(normalise_baseline(b) for b in _split([baselines])))
        except ValueError as exc:
            raise _fail(str(exc)) from None
    if not static:
        _sandbox_walls(sandbox.value)
    seed_drawn = False
    if seed is None and (sample is not None or not static):
        # one fresh seed for the whole run, stated at the end of the report: the same sample can be
        # taken again, and a second run with it gives the same findings for every submission (an
        # audit).  Still drawn anew each run, so a policy cannot learn the hidden inputs; the Python
        # API (a per-sample gate) draws one per submission instead.
        import secrets

        seed = secrets.randbelow(2**31)
        seed_drawn = True
    if perf_mode is None:
        from .perf.default_mode import default_perf_mode

        chosen_mode, why_mode = default_perf_mode(device.value)
        perf_mode = PerfMode(chosen_mode)
        if why_mode and not static and not no_perf:
            typer.echo(f"hackscan: {why_mode}", err=True)
    options = RunOptions(static_only=static, device=device.value, seed=seed, timeout=timeout, perf=not no_perf, jobs=jobs,
                         baselines=chosen, sandbox=sandbox.value,
                         extra={**({"build_cache": str(build_cache)} if build_cache is not None else {}),
                                **({"seed_drawn": True} if seed_drawn else {}),
                                "build_farm": build_farm,
                                **({"cuda_arch": cuda_arch} if cuda_arch else {}),
                                **({"perf_mode": perf_mode.value} if perf_mode is not PerfMode.target else {})})
    # a bar on a terminal; in CI logs and pipes, where a redrawn line would be noise, plain log lines
    # (a dynamic run takes minutes: silence reads as a hang)
    reporter = ProgressBar(sys.stderr, plain=not sys.stderr.isatty()) if progress is not False else None
    # results survive the death of this process: each one is on disk as soon as it is final
    partial = stream is None and output is not None
    stream_path = stream if stream is not None else (Path(str(output) + ".partial.jsonl") if output else None)
    sink, done = _open_stream(stream_path, resume, partial)
    from .inputs import Submission, discover, take

    items = list(discover([str(p) for p in paths], inputs))
    if not items:
        # a gate pointed at a wrong path must not pass on nothing
        raise _fail(f"nothing to scan in {', '.join(map(str, paths))}: no .py/.cu/.cpp candidate, no folder holding "
                    "one, no JSONL record")
    if all(isinstance(i, Submission) and not i.code.strip() for i in items):
        raise _fail(f"nothing to scan in {', '.join(map(str, paths))}: every candidate file is empty")
    if claimed_field is not None:
        from .inputs import check_claimed

        problem = check_claimed(items, claimed_field)
        if problem:
            raise _fail(problem)
    if limit is not None or sample is not None:
        total = len(items)
        items = take(items, limit=limit, sample=sample, seed=seed)
        how = f"--limit {limit}" if limit is not None else f"--sample {sample} --seed {seed}"
        typer.echo(f"hackscan: {how}: took {len(items)} of {total} submission(s): {_taken(items)}", err=True)
    try:
        if ray is not None:
            from .cluster import run_on_ray

            reports, reused = run_on_ray(ray, items, config, options, done, sink, reporter)
        else:
            reports, reused = run_resumable(items, config, options, done, sink, reporter)
        if resume:
            typer.echo(f"hackscan: --resume: {reused} of {len(items)} result(s) taken from {stream_path}, "
                       f"{len(items) - reused} run now", err=True)
    finally:
        if sink is not None:
            sink.close()
    if reporter is not None:
        reporter.close()
    from .output import render

    use_color = color if color is not None else (output is None and sys.stdout.isatty())
    text = render(reports, fmt.value, color=use_color and fmt is Format.text, code_field=config.code_field,
                  perf_stats=perf_stats)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise _fail(f"cannot write {output}: {exc.strerror or exc}") from None
        typer.echo(f"hackscan: wrote {fmt.value} report for {len(reports)} submission(s) to {output}", err=True)
        if partial and stream_path is not None:
            stream_path.unlink(missing_ok=True)
    else:
        sys.stdout.write(text)
    broken = failed_reports(reports)
    if broken:
        # fail closed: a dynamic stage that broke (reference or worker server died, hackscan's own
        # error) proves nothing about the candidate; whatever --fail-on says, this is exit 2
        for r in broken[:5]:
            typer.echo(f"hackscan: error: {r.path}: {r.dynamic.get('reason')}", err=True)  # type: ignore[union-attr]
        raise typer.Exit(2)
    threshold = fail_on.value if fail_on else config.fail_on.value
    if threshold == "never":
        raise typer.Exit(0)
    from .classes import rejects

    # the gate: a result fails when a finding at --fail-on or above belongs to a class it rejects
    # (all by default), or when it could not be analysed at all (fail closed)
    failing = any(rejects(r, config.reject_classes, threshold) for r in reports)
    raise typer.Exit(1 if failing else 0)


def _taken(items) -> str:
    """Which submissions a --limit / --sample took: ``runs.jsonl records 3, 9, 14; kernels/a.py``."""
    groups: dict[str, list[str]] = {}
    for item in items:
        record = getattr(item, "record", None)
        if record is not None:
            file = getattr(item, "file", None) or item.path.rsplit(":", 1)[0]
            groups.setdefault(file, []).append(str(record))
        else:
            groups.setdefault(item.path, [])
    return "; ".join(f"{k} record{'s' * (len(v) != 1)} {', '.join(v)}" if v else k for k, v in groups.items()) or "none"


class ProgressBar:
    """Where the run is, on stderr: the stage, the candidate, the dynamic-stage phase and the time.

    On a terminal (``plain=False``) one line redrawn in place, at most ten times a second, and once
    a second while a candidate runs (a ticker thread: a build or a probe can take minutes):
    ``dynamic [##.....] 1/4 38.2 s/item eta 1m55s kernels/x.py: probes 12s``.  Elsewhere (CI logs,
    ``| tee``; ``plain=True``) log lines: one per dynamic-stage candidate and phase with the
    seconds since the start, and for the static stage one line every ``log_interval`` seconds and
    one when it ends.  No rate is shown before one item is done and a second has passed (a rate
    over a few microseconds reads as millions per second).
    """

    def __init__(self, stream, width: int = 28, min_interval: float = 0.1, plain: bool = False,
                 log_interval: float = 10.0, tick: float = 1.0, clock=None):
        import threading
        import time

        self.stream = stream
        self.width = width
        self.min_interval = min_interval
        self.plain = plain
        self.log_interval = log_interval
        self.tick = tick
        self._clock = clock or time.monotonic
        self._start = self._clock()
        self._stage = "static"
        self._t0 = self._start  # when the current stage began
        self._last_event = self._start
        self._last = float("-inf")
        self._logged = self._start
        self._current: tuple[int, int, str, str, float] | None = None  # done, total, path, phase, since
        self._item_t0 = self._start
        # when each candidate's first phase began: with several in flight (--jobs, a cluster) the
        # previous completion is not when this one started
        self._starts: dict[str, float] = {}
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._closed = threading.Event()
        self.drawn = 0

    # -- what the pipeline calls
    def __call__(self, done: int, total: int, path: str) -> None:
        stage = "dynamic" if path.startswith("dynamic: ") else "static"
        path = path.removeprefix("dynamic: ")
        now = self._clock()
        with self._lock:
            self._enter(stage, now)
            self._current = None
            if self.plain:
                if stage == "dynamic":
                    began = self._starts.pop(path, self._item_t0)
                    self._log(now, f"dynamic [{done}/{total}] {path}: done in {now - began:.1f} s")
                    self._item_t0 = now
                elif done == total or now - self._logged >= self.log_interval:
                    self._log(now, f"static {done}/{total}" + (" done" if done == total else ""))
                return
            if done < total and now - self._last < self.min_interval:
                return
            self._draw(now, done, total, path, "")

    def done_in(self, done: int, total: int, path: str, seconds: float) -> None:
        """A candidate that ran elsewhere (a Ray task) finished after ``seconds`` of its own: its
        completion and the previous one's are not its start and end."""
        with self._lock:
            self._starts[path.removeprefix("dynamic: ")] = self._clock() - seconds
        self(done, total, path)

    def phase(self, done: int, total: int, path: str, phase: str) -> None:
        """A dynamic-stage phase (setup, build, probes, timing) begins for candidate ``done + 1``."""
        now = self._clock()
        with self._lock:
            self._enter("dynamic", now)
            if self._current is None or self._current[2] != path:
                self._item_t0 = now
            self._starts.setdefault(path, now)
            self._current = (done, total, path, phase, now)
            if self.plain:
                self._log(now, f"dynamic [{done + 1}/{total}] {path}: {phase}")
                return
            self._draw(now, done, total, path, self._phase_text(now))
            if self._ticker is None and self.tick > 0:
                import threading

                self._ticker = threading.Thread(target=self._tick, name="hackscan-progress", daemon=True)
                self._ticker.start()

    def close(self) -> None:
        self._closed.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2 * self.tick)
        with self._lock:
            if self.drawn and not self.plain:
                self.stream.write("\r\x1b[K")
                self.stream.flush()

    # -- internals
    def _enter(self, stage: str, now: float) -> None:
        if stage != self._stage:  # a new stage restarts the rate, from when the old one ended
            self._stage, self._t0 = stage, self._last_event
        self._last_event = now

    def _phase_text(self, now: float) -> str:
        _, _, _, phase, since = self._current  # type: ignore[misc]
        return f": {phase} {_duration(now - since)}"

    def _rate(self, now: float, done: int, total: int) -> str:
        elapsed = now - self._t0
        if done < 1 or elapsed < 1.0:
            return ""
        rate = done / elapsed
        text = f" {rate:.1f}/s" if rate >= 1 else f" {elapsed / done:.1f} s/item"
        if done < total:
            text += f" eta {_duration((total - done) / rate)}"
        return text

    def _draw(self, now: float, done: int, total: int, path: str, suffix: str) -> None:
        self._last = now
        filled = int(self.width * done / max(total, 1))
        name = path if len(path) < 50 else "…" + path[-49:]
        self.stream.write(f"\r\x1b[K{self._stage} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
                          f"{self._rate(now, done, total)} {name}{suffix}")
        self.stream.flush()
        self.drawn += 1

    def _log(self, now: float, text: str) -> None:
        self._logged = now
        self.stream.write(f"hackscan: [{now - self._start:7.1f}s] {text}\n")
        self.stream.flush()
        self.drawn += 1

    def _tick(self) -> None:
        while not self._closed.wait(self.tick):
            with self._lock:
                if self._current is not None:
                    done, total, path, _, _ = self._current
                    now = self._clock()
                    self._draw(now, done, total, path, self._phase_text(now))


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s"


@app.command("measure", cls=_PlainArgs)
def measure_cmd(
    paths: list[Path] = typer.Argument(None, metavar="PATH...", show_default=False, help="Annotated corpus: files and folders (default: fixtures/)."),
    fmt: TableFormat = typer.Option(TableFormat.text, "--format", "-f", help="Output format."),
    dynamic: bool = typer.Option(False, "--dynamic", help="Run the dynamic stage too (where torch is installed)."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=0, metavar="N", help="Parallel processes for the static stage (0: one per core)."),
    show_misses: bool = typer.Option(False, "--show-misses", help="List every missed site and false alarm."),
    select: list[str] | None = typer.Option(None, "--select", metavar="RULES",
                                               help="Only these rules (ids, names or prefixes)."),
) -> None:
    """Recall and false-positive rate per rule and per hack class against an annotated corpus."""
    from .config import Config
    from .measure.annotated import measure, render_measurement
    from .parallel import default_jobs

    targets = [str(p) for p in paths] if paths else ["fixtures"]
    missing = [t for t in targets if not Path(t).exists()]
    if missing:
        raise _fail("no such file or directory: " + ", ".join(missing))
    config = Config(select=_split(select))
    m = measure(targets, config=config, jobs=jobs or default_jobs(), dynamic=dynamic)
    sys.stdout.write(render_measurement(m, fmt.value, show_misses=show_misses))


@app.command("mutate", cls=_PlainArgs)
def mutate_cmd(
    seeds: list[Path] = typer.Argument(None, metavar="PATH...", show_default=False, help="Clean seed candidates or folders (default: the bundled seeds, "
                                                  "fixtures/**/ok_*.py and kernels/**/clean_*.py)."),
    dynamic: bool = typer.Option(False, "--dynamic", help="Also run CPU-runnable mutants in the dynamic stage."),
    dynamic_limit: int = typer.Option(60, "--dynamic-limit", metavar="N", help="Run at most this many mutants dynamically."),
    compile_limit: int = typer.Option(6, "--compile-limit", metavar="N", help="Of those, at most this many whose C++ changed (a compile each)."),
    per_class: int = typer.Option(0, "--per-class", metavar="N", min=0,
                                  help="Before --dynamic-limit, run up to N evasive mutants per class that the static stage missed."),
    timeout: float = typer.Option(60.0, "--timeout", metavar="SECONDS", help="Seconds per mutant for the dynamic stage."),
    device: str = typer.Option("cpu", "--device", metavar="cpu|cuda",
                               help="cpu: run the mutants that need no CUDA; cuda (a GPU host): the ones that do."),
    classes: list[str] | None = typer.Option(None, "--class", metavar="N", help="Only these hack classes (numbers, TAXONOMY.md)."),
    fmt: TableFormat = typer.Option(TableFormat.text, "--format", "-f", help="Output format."),
    write: Path | None = typer.Option(None, "--write", metavar="FOLDER", help="Write every mutant to this folder for inspection."),
    show_missed: bool = typer.Option(False, "--show-missed", help="List the mutants no stage detected."),
    readme: Path | None = typer.Option(None, "--readme", metavar="FILE", help="Write the table between the adequacy markers of this file."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=0, metavar="N", help="Parallel processes for the static scans (0: one per core)."),
    perf: bool = typer.Option(False, "--perf", help="Also time the mutants (the performance stage: side streams, "
                                                    "timer escapes); worth it on a GPU only."),
    budget: float | None = typer.Option(None, "--budget", metavar="SECONDS",
                                        help="Start no further dynamic run after this many seconds of the dynamic stage."),
    merge: bool = typer.Option(False, "--merge", help="PATH... are the saved JSON of earlier runs (-f json, .gz too; e.g. "
                                                     "a CPU and a GPU run): render them as one instead of running."),
) -> None:
    """Mutation adequacy: inject each hack class into clean kernels and report the fraction detected."""
    from .measure.adequacy import AdequacyOptions, merge_saved, render_adequacy, run_adequacy, write_readme_section
    from .measure.seeds import default_seed_paths

    if merge:
        import gzip
        import json

        if not seeds:
            raise _fail("--merge takes the saved runs as PATH...")
        result = merge_saved([json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes())
                              for p in seeds], [str(p) for p in seeds])
        sys.stdout.write(render_adequacy(result, fmt.value, show_missed=show_missed))
        if readme is not None:
            write_readme_section(readme, result)
        return

    targets = [str(p) for p in seeds] if seeds else default_seed_paths()
    if device not in ("cpu", "cuda"):
        raise _fail("--device takes cpu or cuda")
    try:
        wanted = tuple(int(c) for c in _split(classes))
    except ValueError:
        raise _fail("--class takes hack class numbers (1-20, see TAXONOMY.md)") from None
    from .parallel import default_jobs

    opts = AdequacyOptions(dynamic=dynamic, dynamic_limit=dynamic_limit, compile_limit=compile_limit, per_class=per_class,
                           timeout=timeout, device=device, budget=budget, perf=perf,
                           classes=wanted, write_dir=str(write) if write else None, jobs=jobs or default_jobs())
    result = run_adequacy(targets, opts, progress=ProgressBar(sys.stderr) if sys.stderr.isatty() else None)
    sys.stdout.write(render_adequacy(result, fmt.value, show_missed=show_missed))
    if readme is not None:
        write_readme_section(readme, result)
        typer.echo(f"hackscan: wrote the adequacy table into {readme}", err=True)


@app.command("rules")
def rules_cmd(
    fmt: RulesFormat = typer.Option(RulesFormat.text, "--format", "-f", help="Output format."),
    stage: StageName | None = typer.Option(None, "--stage", help="Only rules of this stage."),
) -> None:
    """List the rules in the registry."""
    import json

    from .registry import load_registry

    rules = [r for r in load_registry() if stage is None or r.stage.value == stage.value]
    if fmt is RulesFormat.json:
        typer.echo(json.dumps([r.to_dict() for r in rules], indent=2))
        return
    typer.echo(f"{'id':<6} {'name':<38} {'severity':<8} {'conf':<6} {'stage':<11} {'lang':<18} summary")
    for r in rules:
        typer.echo(f"{r.id:<6} {r.name:<38} {r.severity.value:<8} {r.confidence.value:<6} {r.stage.value:<11} "
                   f"{','.join(r.languages):<18} {r.summary}")


@app.command("explain", cls=_PlainArgs)
def explain_cmd(rule: str = typer.Argument(..., metavar="RULE", help="Rule id (HS101) or name.")) -> None:
    """Print one rule's documentation with its hack example and legitimate look-alike."""
    from .registry import load_registry

    try:
        r = load_registry().get(rule)
    except KeyError:
        raise _fail(f"no rule {rule!r} (see `hackscan rules`)") from None
    classes = ", ".join(str(t) for t in r.taxonomy if t) or "meta"
    typer.echo(f"{r.id} {r.name}\n")
    typer.echo(f"severity: {r.severity.value}   confidence: {r.confidence.value}   stage: {r.stage.value}   "
               f"languages: {', '.join(r.languages)}   taxonomy class: {classes}\n")
    if r.check or r.unit:
        # where the rule is decided: the one function its TOML names
        typer.echo(f"decided by: {r.check or r.unit}\n")
    typer.echo(r.summary + "\n")
    typer.echo(r.description + "\n")
    typer.echo("Hack:\n" + _indent(r.hack_example) + "\n")
    typer.echo("Legitimate look-alike (not flagged):\n" + _indent(r.legit_example))


@app.command("new-rule", cls=_PlainArgs)
def new_rule_cmd(
    name: str = typer.Argument(..., metavar="NAME", help="Kebab-case rule name (cuda-... for CUDA, triton-... for Triton)."),
    language: str | None = typer.Option(None, "--language", "-l", metavar="LANG",
                                        help="python, cuda or triton (static rules)."),
    stage: str = typer.Option("static", "--stage", metavar="STAGE",
                              help="static (a check), dynamic (HS4xx/HS5xx unit) or perf (HS6xx unit)."),
    topic: str | None = typer.Option(None, "--topic", "-t", metavar="TOPIC",
                                     help="Module the check or unit lives in: checks/<language>/<topic>.py, "
                                          "dynamic/rules/<topic>.py, perf/rules/<topic>.py; not for triton."),
    severity: str = typer.Option("error", "--severity", "-s", metavar="SEV", help="error, warning or info."),
    confidence: str = typer.Option("medium", "--confidence", metavar="CONF", help="high, medium or low."),
    rule_id: str | None = typer.Option(None, "--id", metavar="HSNNN",
                                       help="Rule id (default: the next free one of the family; HS4xx for dynamic)."),
    taxonomy: int | None = typer.Option(None, "--class", metavar="N", help="TAXONOMY.md class (1..20)."),
    root: Path | None = typer.Option(None, "--root", metavar="DIR", help="Source checkout to write into (default: this one)."),
) -> None:
    """Scaffold a rule: its TOML, a check or unit stub, a hack fixture and a look-alike (and, for a
    dynamic or performance rule, a test stub for its unit)."""
    from .scaffold import ScaffoldError, new_rule, new_stage_rule, source_root

    try:
        where = root.resolve() if root else source_root()
        stage = stage.lower()
        if stage == "static":
            if not language:
                raise ScaffoldError("a static rule needs --language (python, cuda or triton)")
            done = new_rule(where, name, language.lower(), topic, severity.lower(), confidence.lower(), rule_id,
                            taxonomy)
        else:
            if language:
                raise ScaffoldError(f"a {stage} rule has no --language: it judges what a run shows")
            done = new_stage_rule(where, name, stage, topic, severity.lower(), confidence.lower(), rule_id,
                                  taxonomy)  # type: ignore[assignment]
    except ScaffoldError as exc:
        raise _fail(str(exc)) from None
    typer.echo(done.next_steps(where))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def run_cli() -> None:
    """Entry point: turn unexpected exceptions into exit code 2 with a one-line message."""
    try:
        app(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.stderr.write("hackscan: interrupted\n")
        sys.exit(130)
    except Exception as exc:  # pragma: no cover - last resort, never a traceback for users
        sys.stderr.write(f"hackscan: internal error: {type(exc).__name__}: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    run_cli()
