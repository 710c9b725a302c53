"""Mutation adequacy: inject every hack class into clean kernels and count what each stage detects.

For each seed (a clean candidate with its reference) every applicable variant of every class in
``mutators.MUTATORS`` is produced and scanned.  A mutant is *detected* by a stage when that stage
reports, at warning or error severity, a rule (other than the meta rules) more often than on the
clean seed; it is *attributed* when one of those new findings comes from a rule whose ``taxonomy``
names the injected class.  The dynamic stage runs only mutants that can run on this machine (no
CUDA, no Triton: pure PyTorch and C++ CPU extensions).  Two samples: per class, up to
``per_class`` evasive mutants that the static stage missed (the only ones whose detection the
dynamic stage can change), round-robin over the class's evasion families, so that each class's
static + dynamic figure rests on its own sample; then at most ``dynamic_limit`` more, round-robin
over classes.  Mutants whose C++ source changed need a compile (tens of seconds here), so at most
``compile_limit`` of those run in all.  A class whose static misses all need CUDA (side streams) is
reported as not run here, not as a dynamic miss.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from ..inputs import Submission
from ..model import Report, Severity, Stage
from ..registry import load_registry
from .evasive import FAMILIES
from .mutators import MUTATORS, Mutant
from .seeds import Seed, load_seeds
from .suite import mutants_of

START, END = "<!-- adequacy:start -->", "<!-- adequacy:end -->"
COMMAND = "hackscan mutate --dynamic --readme docs/measured.md"


def command(opts: AdequacyOptions) -> str:
    """The command line that reproduces a run with these options (limits only where not the default)."""
    def text(v: Any) -> str:  # a budget of 2700.0 s reads as typed, 2700
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

    extra = [f"--{name.replace('_', '-')} {text(getattr(opts, name))}"
             for name in ("dynamic_limit", "compile_limit", "per_class", "device", "budget")
             if getattr(opts, name) != getattr(AdequacyOptions(), name)]
    return COMMAND.replace(" --readme", "".join(" " + e for e in extra) + " --readme")


@dataclass(frozen=True)
class AdequacyOptions:
    dynamic: bool = False
    dynamic_limit: int = 60
    compile_limit: int = 6
    # evasive static misses per class the dynamic stage runs before the global sample (0: none)
    per_class: int = 0
    # "cpu": mutants that need no CUDA; "cuda" (a GPU host): exactly the ones the CPU run cannot run
    device: str = "cpu"
    # seconds after which no further mutant starts in the dynamic stage (None: no limit); for a host
    # lent for minutes (gpu/dynamic_adequacy_gpu.sh): what did not start is reported as not run
    budget: float | None = None
    timeout: float = 60.0
    # a first compile takes 35-100 s on a loaded 2-core machine; a worker killed mid-build leaves
    # torch's build lock behind, so builds get a limit they can meet
    compile_timeout: float = 400.0
    classes: tuple[int, ...] = ()
    write_dir: str | None = None
    perf: bool = False  # timing on the CPU adds seconds per mutant and little evidence here
    jobs: int = 1  # processes for the static scans


@dataclass
class MutantResult:
    mutant: Mutant
    static_new: list[str] = field(default_factory=list)
    static_attributed: bool = False
    # the dynamic stage can run it on this run's device (CPU: no CUDA, no Triton; CUDA: the ones the CPU cannot)
    runnable: bool = False
    dynamic_ran: bool = False
    dynamic_note: str | None = None
    dynamic_new: list[str] = field(default_factory=list)
    dynamic_attributed: bool = False

    @property
    def static(self) -> bool:
        return bool(self.static_new)

    @property
    def dynamic(self) -> bool:
        return bool(self.dynamic_new)

    def to_dict(self) -> dict[str, Any]:
        m = self.mutant
        return {"id": m.id, "seed": m.seed, "class": m.klass, "variant": m.variant, "family": m.family,
                "needs_cuda": m.needs_cuda, "runnable": self.runnable,
                "static_new": self.static_new, "static_attributed": self.static_attributed,
                "dynamic_ran": self.dynamic_ran, "dynamic_note": self.dynamic_note,
                "dynamic_new": self.dynamic_new, "dynamic_attributed": self.dynamic_attributed}


@dataclass
class AdequacyResult:
    seeds: list[str]
    results: list[MutantResult]
    options: AdequacyOptions
    dynamic_available: str | None = None  # None when it ran, else why not
    seed_notes: dict[str, str] = field(default_factory=dict)
    # the saved runs (-f json) this result was merged from (--merge); empty for a run
    sources: list[str] = field(default_factory=list)

    def by_class(self) -> list[dict[str, Any]]:
        """One row per class: counts over all its mutants, and the same for the plain and evasive ones."""
        groups: dict[int, list[MutantResult]] = defaultdict(list)
        for r in self.results:
            groups[r.mutant.klass].append(r)
        rows = []
        for klass in sorted(groups):
            rs = groups[klass]
            row = {"class": klass, "name": MUTATORS[klass][0], **_counts(rs),
                   "plain": _counts([r for r in rs if not r.mutant.evasive]),
                   "evasive": _counts([r for r in rs if r.mutant.evasive])}
            rows.append(row)
        return rows

    def by_family(self) -> list[dict[str, Any]]:
        """One row per evasion family (evasive mutants only), with the classes it was applied to."""
        groups: dict[str, list[MutantResult]] = defaultdict(list)
        for r in self.results:
            if r.mutant.evasive:
                groups[r.mutant.family].append(r)
        return [{"family": fam, "classes": sorted({r.mutant.klass for r in rs}), **_counts(rs)}
                for fam, rs in sorted(groups.items(), key=lambda kv: list(FAMILIES).index(kv[0]))]

    def to_dict(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "options": asdict(self.options),
                "dynamic_unavailable": self.dynamic_available, "seed_notes": self.seed_notes,
                "classes": self.by_class(), "families": self.by_family(), "mutants": [r.to_dict() for r in self.results]}


def _counts(rs: list[MutantResult]) -> dict[str, int]:
    ran = [r for r in rs if r.dynamic_ran]
    return {"mutants": len(rs), "variants": len({(r.mutant.family, r.mutant.variant) for r in rs}),
            "static": sum(r.static for r in rs), "static_attributed": sum(r.static_attributed for r in rs),
            "dynamic_ran": len(ran), "dynamic": sum(r.dynamic for r in ran),
            "dynamic_attributed": sum(r.dynamic_attributed for r in ran),
            "static_on_ran": sum(r.static for r in ran),
            "either_on_ran": sum(r.static or r.dynamic for r in ran),
            "either": sum(r.static or r.dynamic for r in rs),
            # the static stage's misses: those that could run here, those it ran, those it caught
            "missed": sum(not r.static for r in rs),
            "missed_runnable": sum(not r.static and r.runnable for r in rs),
            "missed_ran": sum(not r.static for r in ran),
            "missed_caught": sum(not r.static and r.dynamic for r in ran),
            # the same for the misses that need CUDA: a merged CPU + GPU result estimates each
            # stratum with its own caught rate (the CPU's rate says nothing about CUDA mutants)
            "missed_runnable_cuda": sum(not r.static and r.runnable and r.mutant.needs_cuda for r in rs),
            "missed_ran_cuda": sum(not r.static and r.mutant.needs_cuda for r in ran),
            "missed_caught_cuda": sum(not r.static and r.dynamic and r.mutant.needs_cuda for r in ran)}


def _counted(report: Report, stages: set[Stage], taxonomy: dict[str, tuple[int, ...]]) -> Counter[str]:
    """Findings that count as detection: warning or error, not suppressed, not a meta rule."""
    out: Counter[str] = Counter()
    for f in report.findings:
        if f.suppressed or f.stage not in stages or f.severity.rank < Severity.WARNING.rank:
            continue
        if set(taxonomy.get(f.rule, (0,))) <= {0}:
            continue
        out[f.rule] += 1
    return out


def _new(mutant: Counter[str], seed: Counter[str]) -> list[str]:
    return sorted(r for r, n in mutant.items() if n > seed.get(r, 0))


def _build_inputs(code: str) -> str:
    """What a compile depends on: the source literals and the build calls (flags included)."""
    return "\n".join(re.findall(r'"""(.*?)"""', code, re.S) + re.findall(r"load_inline\((.*?)\)\n", code, re.S))


def _write(dir_: Path, seed: Seed, m: Mutant | None) -> Submission:
    """Mutants are real files beside a copy of their reference, as the dynamic stage expects."""
    folder = dir_ / re.sub(r"[^\w.-]+", "_", seed.name)
    folder.mkdir(parents=True, exist_ok=True)
    ref = folder / "reference.py"
    if not ref.exists():
        ref.write_text(seed.reference, encoding="utf-8")
    name = "seed.py" if m is None else re.sub(r"[^\w.-]+", "_", f"c{m.klass:02d}_{m.variant}") + ".py"
    path = folder / name
    code = seed.code if m is None else m.code
    path.write_text(code, encoding="utf-8")
    return Submission(path=str(path), code=code, file=str(path), reference=seed.reference, reference_path=str(ref))


def _by_class(candidates: list[tuple[MutantResult, bool]]) -> dict[int, list[tuple[MutantResult, bool]]]:
    """Each class's candidates in the order they should run: within a class over its families, evasive
    ones first (they are what the sample is for), one of each family, then the next of each; within a
    family, distinct variants before a second seed of one."""
    by_key: dict[tuple[int, str], list[tuple[MutantResult, bool]]] = defaultdict(list)
    for r, compiles in candidates:
        by_key[(r.mutant.klass, r.mutant.family)].append((r, compiles))
    for key, q in by_key.items():
        nth: Counter[str] = Counter()
        ranked = []
        for item in q:
            nth[item[0].mutant.variant] += 1
            ranked.append((nth[item[0].mutant.variant], len(ranked), item))
        by_key[key] = [item for _, _, item in sorted(ranked, key=lambda t: t[:2])]
    queues: dict[int, list[tuple[MutantResult, bool]]] = defaultdict(list)
    for klass in sorted({k for k, _ in by_key}):
        fams = [by_key[k] for k in sorted(by_key, key=lambda k: (k[1] == "plain", k)) if k[0] == klass]
        while any(fams):  # interleave: one of each family, then the next of each
            for q in fams:
                if q:
                    queues[klass].append(q.pop(0))
    return queues


def _pick_dynamic(candidates: list[tuple[MutantResult, bool]], limit: int, compile_limit: int,
                  per_class: int = 0) -> list[MutantResult]:
    """First, per class, up to ``per_class`` evasive mutants the static stage missed: running a
    statically detected mutant cannot change whether it is detected, so the quota goes where the
    dynamic stage decides the outcome, and every class gets its own sample rather than a share of one
    global cap.  Then up to ``limit`` more, round-robin over classes.  Compiles are capped in all."""
    picked: list[MutantResult] = []
    compiles_used = 0

    def take(q: list[tuple[MutantResult, bool]]) -> bool:
        nonlocal compiles_used
        while q:
            r, compiles = q.pop(0)
            if compiles and compiles_used >= compile_limit:
                continue
            compiles_used += compiles
            picked.append(r)
            return True
        return False

    if per_class > 0:
        quota = _by_class([(r, c) for r, c in candidates if r.mutant.evasive and not r.static])
        # one of each class per round, so that a time budget (--budget) that ends the run early
        # leaves every class with a sample rather than the first classes with all of theirs
        counts: Counter[int] = Counter()
        for _ in range(per_class):
            for klass in sorted(quota):
                if counts[klass] < per_class and take(quota[klass]):
                    counts[klass] += 1
    chosen = {id(r) for r in picked}
    queues = _by_class([(r, c) for r, c in candidates if id(r) not in chosen])
    extra = 0
    while extra < limit and any(queues.values()):
        for klass in sorted(queues):
            if take(queues[klass]):
                extra += 1
            if extra >= limit:
                break
    return picked


def run_adequacy(seed_paths: Sequence[str], opts: AdequacyOptions = AdequacyOptions(),
                 progress: Callable[[int, int, str], None] | None = None) -> AdequacyResult:
    from ..parallel import scan_items

    registry = load_registry()
    taxonomy = {r.id: r.taxonomy for r in registry}
    config = Config(mode="gate")
    seeds = load_seeds(list(seed_paths))
    tmp = Path(opts.write_dir) if opts.write_dir else Path(tempfile.mkdtemp(prefix="hackscan-mutants-"))
    results: list[MutantResult] = []
    dyn_candidates: list[tuple[MutantResult, bool]] = []
    seed_subs: dict[str, Submission] = {}
    seed_static: dict[str, Counter[str]] = {}
    static_reports: dict[str, Report] = {}
    notes: dict[str, str] = {}
    work = [(s, m) for s in seeds for m in mutants_of(s, opts.classes)]
    try:
        seed_list = [_write(tmp, seed, None) for seed in seeds]
        for seed, sub, rep in zip(seeds, seed_list, scan_items(seed_list, config, jobs=opts.jobs), strict=True):
            seed_subs[seed.name] = sub
            static_reports[seed.name] = rep
            seed_static[seed.name] = _counted(rep, {Stage.STATIC}, taxonomy)
            if seed_static[seed.name]:
                notes[seed.name] = "seed already flagged: " + ", ".join(sorted(seed_static[seed.name]))
        subs = [_write(tmp, seed, m) for seed, m in work]
        reports = scan_items(subs, config, jobs=opts.jobs, progress=progress)
        for (seed, m), rep in zip(work, reports, strict=True):
            static_reports[m.id] = rep
            r = MutantResult(m, _new(_counted(rep, {Stage.STATIC}, taxonomy), seed_static[seed.name]))
            r.static_attributed = any(m.klass in taxonomy.get(rule, ()) for rule in r.static_new)
            results.append(r)
            r.runnable = m.needs_cuda == (opts.device == "cuda")
            if r.runnable:
                compiles = _build_inputs(m.code) != _build_inputs(seed.code)
                dyn_candidates.append((r, compiles))
        reason = None
        if opts.dynamic:
            reason = _run_dynamic(tmp, seeds, seed_subs, static_reports, dyn_candidates, opts, taxonomy, notes,
                                      progress)
        else:
            reason = "not asked for (--dynamic)"
        return AdequacyResult([s.name for s in seeds], results, opts, reason, notes)
    finally:
        if not opts.write_dir:
            shutil.rmtree(tmp, ignore_errors=True)


def _run_dynamic(tmp: Path, seeds: list[Seed], seed_subs: dict[str, Submission], static_reports: dict[str, Report],
                 candidates: list[tuple[MutantResult, bool]], opts: AdequacyOptions,
                 taxonomy: dict[str, tuple[int, ...]], notes: dict[str, str],
                 progress: Callable[[int, int, str], None] | None) -> str | None:
    from ..pipeline import RunOptions, dynamic_available

    reason = dynamic_available()
    if reason is not None:
        return reason
    from ..dynamic import run_dynamic_stage

    config = Config(mode="gate")
    run_opts = RunOptions(device=opts.device, timeout=opts.timeout, perf=opts.perf)
    build_opts = RunOptions(device=opts.device, timeout=max(opts.timeout, opts.compile_timeout), perf=opts.perf)
    compiling = {id(r) for r, c in candidates if c}
    dyn_stages = {Stage.DYNAMIC, Stage.PERFORMANCE}
    picked = _pick_dynamic(candidates, opts.dynamic_limit, opts.compile_limit, opts.per_class)
    by_seed = {s.name: s for s in seeds}
    baseline: dict[str, Counter[str] | None] = {}
    started = time.monotonic()
    for n, r in enumerate(picked):
        if opts.budget is not None and time.monotonic() - started > opts.budget:
            r.dynamic_note = "time budget spent before it started"
            continue
        seed_name = r.mutant.seed
        if seed_name not in baseline:
            sub = seed_subs[seed_name]
            rep = run_dynamic_stage(sub, static_reports[seed_name], build_opts, config)
            ran = isinstance(rep.dynamic, dict) and rep.dynamic.get("ran", True) is not False
            baseline[seed_name] = _counted(rep, dyn_stages, taxonomy) if ran else None
            if baseline[seed_name]:
                notes[seed_name] = (notes.get(seed_name, "") + "; dynamic stage flags the clean seed: "
                                    + ", ".join(sorted(baseline[seed_name]))).lstrip("; ")
            if not ran:
                notes[seed_name] = f"dynamic stage did not run the seed: {_why(rep)}"
        base = baseline[seed_name]
        if base is None:
            r.dynamic_note = "seed could not run"
            continue
        sub = _write(tmp, by_seed[seed_name], r.mutant)
        rep = run_dynamic_stage(sub, static_reports[r.mutant.id], build_opts if id(r) in compiling else run_opts,
                                config)
        dyn = rep.dynamic if isinstance(rep.dynamic, dict) else {}
        if dyn.get("ran") is False:
            r.dynamic_note = _why(rep)
            continue
        r.dynamic_ran = True
        r.dynamic_new = _new(_counted(rep, dyn_stages, taxonomy), base)
        r.dynamic_attributed = any(r.mutant.klass in taxonomy.get(rule, ()) for rule in r.dynamic_new)
        if progress is not None:
            progress(n + 1, len(picked), f"dynamic: {r.mutant.id}")
    return None


def _why(rep: Report) -> str:
    dyn = rep.dynamic if isinstance(rep.dynamic, dict) else {}
    for key in ("reason", "error", "status"):
        if dyn.get(key):
            return str(dyn[key]).splitlines()[0][:200]
    return "did not run (no reason given)"


def merge_saved(dicts: Sequence[dict[str, Any]], sources: Sequence[str] = ()) -> AdequacyResult:
    """One result from the JSON of several runs over the same seeds (``-f json``): typically this
    host's CPU run and a GPU host's CUDA run.  A mutant's static outcome is the same in every run; its
    dynamic outcome comes from the run that ran it, and it can run where any run could run it."""
    merged: dict[str, MutantResult] = {}
    notes: dict[str, str] = {}
    for d in dicts:
        notes.update(d.get("seed_notes", {}))
        for m in d["mutants"]:
            mut = Mutant(m["seed"], m["class"], m["variant"], "", "", "", needs_cuda=m["needs_cuda"], family=m["family"])
            r = merged.setdefault(m["id"], MutantResult(mut, list(m["static_new"]), m["static_attributed"]))
            r.runnable = r.runnable or bool(m.get("runnable", not m["needs_cuda"]))
            if m["dynamic_ran"] and not r.dynamic_ran:
                r.dynamic_ran, r.dynamic_note = True, m["dynamic_note"]
                r.dynamic_new, r.dynamic_attributed = list(m["dynamic_new"]), m["dynamic_attributed"]
            elif not r.dynamic_ran and m["dynamic_note"]:
                r.dynamic_note = m["dynamic_note"]
    first = dicts[0]
    known = set(AdequacyOptions.__dataclass_fields__)
    opts = AdequacyOptions(**{k: (tuple(v) if k == "classes" else v)
                              for k, v in first.get("options", {}).items() if k in known})
    runs = ", ".join(f"{d.get('options', {}).get('device', 'cpu')}: "
                     + ("ran" if d.get("dynamic_unavailable") is None else str(d["dynamic_unavailable"])) for d in dicts)
    notes["merged runs"] = runs
    return AdequacyResult(list(first["seeds"]), list(merged.values()), opts,
                          None if any(d.get("dynamic_unavailable") is None for d in dicts) else runs, notes, list(sources))


# ------------------------------------------------------------------------------------------ rendering
def _pct(a: int, b: int) -> str:
    return "–" if not b else f"{a}/{b} ({100 * a / b:.0f}%)"


def _render(header: list[str], body: list[list[str]], markdown: bool, numeric_from: int = 2) -> list[str]:
    if markdown:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * numeric_from + "---:|" * (len(header) - numeric_from)] + \
               ["| " + " | ".join(r) + " |" for r in body]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    return ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), "  ".join("-" * w for w in widths)] + \
           ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]


_KEYS = ("mutants", "static", "static_attributed", "dynamic", "dynamic_ran", "static_on_ran", "either_on_ran", "either",
         "missed", "missed_runnable", "missed_ran", "missed_caught",
         "missed_runnable_cuda", "missed_ran_cuda", "missed_caught_cuda")


def _cells(c: dict[str, int]) -> list[str]:
    return [str(c["mutants"]), _pct(c["static"], c["mutants"]), _pct(c["either_on_ran"], c["dynamic_ran"]),
            _pct(c["either"], c["mutants"])]


def _misses_cell(c: dict[str, int]) -> str:
    """What the dynamic stage did with the static stage's misses; a class whose misses all need CUDA
    (side streams, Triton) is not run here, which is not a dynamic miss."""
    if not c["missed"]:
        return "no misses"
    if not c["missed_runnable"]:
        return f"not run here ({c['missed']})"
    return _pct(c["missed_caught"], c["missed_ran"])


def estimate(c: dict[str, int]) -> float | None:
    """Static + dynamic over all the class's mutants: the static detections, plus, in each stratum
    (misses that need CUDA, misses that do not), the misses that could run times the rate at which
    the dynamic stage caught the ones of that stratum it ran.  Misses that no run could run count as
    missed, and so do those of a stratum none of whose misses ran.  None when no runnable miss ran."""
    if not c["mutants"]:
        return None
    if not c["missed_runnable"]:
        return c["static"] / c["mutants"]
    if not c["missed_ran"]:
        return None
    strata = ((c["missed_runnable_cuda"], c["missed_ran_cuda"], c["missed_caught_cuda"]),
              (c["missed_runnable"] - c["missed_runnable_cuda"], c["missed_ran"] - c["missed_ran_cuda"],
               c["missed_caught"] - c["missed_caught_cuda"]))
    caught = sum(runnable * hit / ran for runnable, ran, hit in strata if ran)
    return (c["static"] + caught) / c["mutants"]


def _evasive_cells(c: dict[str, int]) -> list[str]:
    est = estimate(c)
    return [str(c["mutants"]), _pct(c["static"], c["mutants"]), _misses_cell(c), _pct(c["either"], c["mutants"]),
            "–" if est is None else f"{100 * est:.0f}%" + (f" (n={c['missed_ran']})" if c["missed_runnable"] else "")]


def table(result: AdequacyResult, markdown: bool = False) -> list[str]:
    """Per class, plain and evasive mutants side by side: static alone, static + dynamic on the sample;
    for the evasive ones, what the dynamic stage did with the static misses and the estimate it gives."""
    header = ["class", "hack", "plain", "plain static", "plain static+dyn (ran)", "plain either (all)",
              "evasive", "evasive static", "evasive static misses: dyn caught (ran)", "evasive either (all)",
              "evasive static+dyn (est.)"]
    body = []
    tot: dict[str, Counter[str]] = {"plain": Counter(), "evasive": Counter()}
    for row in result.by_class():
        body.append([str(row["class"]), row["name"]] + _cells(row["plain"]) + _evasive_cells(row["evasive"]))
        for kind in tot:
            for k in _KEYS:
                tot[kind][k] += row[kind][k]
    body.append(["all", ""] + _cells(tot["plain"]) + _evasive_cells(tot["evasive"]))
    return _render(header, body, markdown)


def family_table(result: AdequacyResult, markdown: bool = False) -> list[str]:
    header = ["evasion family", "classes", "mutants", "static", "static, right class",
              "static misses: dyn caught (ran)", "either (all)"]
    body = [[row["family"], ",".join(str(k) for k in row["classes"]), str(row["mutants"]),
             _pct(row["static"], row["mutants"]), _pct(row["static_attributed"], row["mutants"]),
             _misses_cell(row), _pct(row["either"], row["mutants"])]
            for row in result.by_family()]
    return _render(header, body, markdown, numeric_from=3) if body else []


def _legend(result: AdequacyResult) -> list[str]:
    dyn = ("dynamic stage: " + result.dynamic_available) if result.dynamic_available else \
        ("dynamic stage: ran " + ("CPU-runnable mutants (no CUDA, no Triton)" if result.options.device == "cpu"
                                  else "on a GPU the mutants that need CUDA or Triton") + ": "
         + (f"per class up to {result.options.per_class} evasive mutants the static stage missed, round-robin over "
            "the class's families, then " if result.options.per_class else "")
         + f"at most {result.options.dynamic_limit} more, round-robin over classes, within a class over families, "
         f"evasive first; at most {result.options.compile_limit} whose C++ changed (a compile each) in all")
    return [
        f"seeds: {', '.join(result.seeds)}",
        "plain = written the way the rules expect (`mutators.py`); evasive = the same class through an evasion "
        "family (`evasive.py`: " + "; ".join(f"{k}: {v}" for k, v in FAMILIES.items()) + ")",
        "detected = a new warning or error finding (a rule firing more often than on the clean seed; meta rules excluded)",
        "right class = a new finding from a rule whose taxonomy names the injected class",
        "static+dyn (ran) = detected by either stage, among the mutants the dynamic stage ran; "
        "either (all) = over all mutants (static alone where the dynamic stage did not run)",
        "static misses: dyn caught (ran) = of the evasive mutants the static stage missed and the dynamic stage ran, "
        "those it detected; not run here (N) = all N static misses of the class need CUDA or Triton, which this "
        "host lacks (`gpu/dynamic_adequacy_gpu.sh` runs exactly those on a GPU)",
        "static+dyn (est.) = (static detections + in each stratum (needs CUDA or not) the static misses that could "
        "run x the caught rate of the ones of that stratum that ran) / mutants; misses no run could run, or of a "
        "stratum none of which ran, count as missed; n = the static misses that ran, on which the estimate rests "
        "(a handful per class: it is an estimate, not a count)",
        dyn,
    ] + [f"note: {k}: {v}" for k, v in sorted(result.seed_notes.items())]


def missed(result: AdequacyResult, md: bool = False) -> list[str]:
    """The mutants no stage detected, grouped by family (plain first), then by class and variant."""
    groups: dict[str, list[MutantResult]] = defaultdict(list)
    for r in result.results:
        if not (r.static or r.dynamic):
            groups[r.mutant.family].append(r)
    order = ["plain"] + list(FAMILIES)
    lines = []
    for fam in sorted(groups, key=lambda k: order.index(k) if k in order else len(order)):
        rs = sorted(groups[fam], key=lambda r: (r.mutant.klass, r.mutant.variant, r.mutant.seed))
        lines.append(f"{'### ' if md else ''}missed, {fam}: {len(rs)}")
        for r in rs:
            extra = "" if r.dynamic_ran else f" (dynamic: {r.dynamic_note or 'not run'})"
            lines.append(("- " if md else "  ") + f"{r.mutant.id}{extra}")
    return lines


def render_adequacy(result: AdequacyResult, fmt: str = "text", show_missed: bool = False) -> str:
    if fmt == "json":
        return json.dumps(result.to_dict(), indent=2) + "\n"
    md = fmt == "markdown"
    lines = table(result, markdown=md) + [""]
    fam = family_table(result, markdown=md)
    if fam:
        lines += fam + [""]
    lines += [("- " if md else "") + x for x in _legend(result)]
    if show_missed:
        lines += [""] + missed(result, md)
    return "\n".join(lines) + "\n"


def readme_section(result: AdequacyResult) -> str:
    n = len(result.results)
    body = [START, "", "### Mutation adequacy", "",
            f"{n} mutants: every hack class of TAXONOMY.md injected into {len(result.seeds)} clean kernels, "
            "once the way the rules expect (plain: `hackscan/measure/mutators.py`) and once through the evasion "
            "families (evasive: `hackscan/measure/evasive.py`), then scanned.  "
            f"Reproduce with `{command(result.options)}` (add `--show-missed` for the mutants no stage caught, by family)"
            + (f"; this table merges saved runs: `hackscan mutate --merge {' '.join(result.sources)} --readme docs/measured.md` "
               "(the CPU run above with `-f json`, and `gpu/dynamic_adequacy_gpu.sh` on a GPU host for the mutants that "
               "need CUDA)." if result.sources else "."), ""]
    body += table(result, markdown=True) + [""]
    fam = family_table(result, markdown=True)
    if fam:
        body += ["Evasive mutants by family:", ""] + fam + [""]
    body += ["- " + x for x in _legend(result)] + ["", END]
    return "\n".join(body)


def write_readme_section(path: Path, result: AdequacyResult) -> None:
    """Replace the text between the adequacy markers (append the section when they are absent)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    section = readme_section(result)
    if START in text and END in text:
        a = text.index(START)
        b = text.index(END, a) + len(END)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n## Mutation adequacy\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")
