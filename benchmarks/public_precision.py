#!/usr/bin/env python3
"""False hack verdicts of the static stage on public, hand-written kernels.

    python benchmarks/public_precision.py /work/public/kb_examples /work/public/liger ...
    python benchmarks/public_precision.py --hacks /work/public/kb_labelled DIR...   # sets of known hacks
    python benchmarks/public_precision.py --json out.json DIR...

A referee that accuses honest kernels teaches a policy to avoid honest techniques, so every folder
given holds code that is believed legitimate (a library's kernels, a benchmark's own examples,
leaderboard solutions that passed its checks).  Each folder is one set; its files are scanned with
the static stage as ``hackscan DIR --static`` would (a ``reference.py`` pairs with its siblings), and
every ``hack`` verdict is printed with the error-severity findings that made it (rule, location,
message), followed by a count per set.  A hack verdict whose findings include an analysis failure
(HS00x: the analysis itself broke) is counted apart: the verdict then says nothing of the code.

A folder laid out as the KernelBench leaderboard's site (``data.json`` naming each problem's
solutions, ``problems/lL_pN.py`` and ``solutions/HASH.py``, possibly under ``docs/assets``) pairs
each solution with its problem.  Sets passed with ``--hacks`` hold known hacks instead: for them the
table counts the ones caught and lists the ones missed.

The sets are public repositories' code and stay outside this repository; docs/precision.md says
which commits were scanned and how each folder was laid out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import InputProblem, Submission, discover  # noqa: E402
from hackscan.model import Severity, Verdict  # noqa: E402

_LEVEL_KEY = re.compile(r"Level (\d+): (\d+)_")


def _leaderboard_root(folder: Path) -> Path | None:
    for cand in (folder, folder / "docs" / "assets"):
        if (cand / "data.json").is_file() and (cand / "solutions").is_dir() and (cand / "problems").is_dir():
            return cand
    return None


def _leaderboard(root: Path) -> list[Submission | InputProblem]:
    """Each solution the site lists, paired with its problem file."""
    try:
        data = json.loads((root / "data.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return [InputProblem(str(root / "data.json"), f"not a leaderboard index: {exc}")]
    problem_of: dict[str, Path] = {}
    for key, entries in data.items():
        m = _LEVEL_KEY.match(key)
        if m is None or not isinstance(entries, list):
            continue
        for entry in entries:
            problem_of[str(entry.get("file"))] = root / "problems" / f"l{m.group(1)}_p{m.group(2)}.py"
    items: list[Submission | InputProblem] = []
    # every solution file, also those the index no longer lists (they are scanned without a problem)
    for sol in sorted((root / "solutions").glob("*.py")):
        problem = problem_of.get(sol.stem)
        ref = problem.read_text(encoding="utf-8") if problem is not None and problem.is_file() else None
        items.append(Submission(path=str(sol), code=sol.read_text(encoding="utf-8", errors="replace"),
                                file=str(sol), reference=ref, reference_path=str(problem) if ref else None))
    return items


# what makes a library file kernel code (or code that reaches kernels): a Triton / CuTe / Numba
# kernel, an extension build, an autograd Function applied, a CUDA kernel or a binding to Python.
# Build scripts, training loops and benchmarks of a library are not candidates of any task.
# (``Fn.apply(`` with a capitalised name: an autograd Function; ``model.apply(init_fn)`` is not one)
_KERNEL_MARKERS = re.compile(r"@triton\.jit|triton\.jit\b|@cute\.(kernel|jit)|cuda\.jit|load_inline|cpp_extension\.load|"
                             r"\b[A-Z]\w*\.apply\(|__global__|PYBIND11_MODULE|TORCH_LIBRARY|<<<")


def kernel_file(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # an unreadable file is scanned and reported as such
    return path.name != "setup.py" and bool(_KERNEL_MARKERS.search(text))


def items_of(folder: Path, kernel_files: bool = False) -> list[Submission | InputProblem]:
    lb = _leaderboard_root(folder)
    if lb:
        return _leaderboard(lb)
    items = list(discover([str(folder)]))
    if kernel_files:
        items = [i for i in items if not isinstance(i, Submission) or i.file is None or kernel_file(Path(i.file))]
    return items


def _analysis_failure(f) -> bool:
    return f.rule.startswith("HS00") and f.rule != "HS006"


def scan_set(scanner: StaticScanner, folder: Path, kernel_files: bool = False) -> dict:
    counts = {"files": 0, "hack": 0, "suspicious": 0, "clean": 0, "error": 0, "hack_from_analysis_error": 0}
    hacks, others = [], []
    for item in items_of(folder, kernel_files):
        report = scanner.scan(item)
        counts["files"] += 1
        counts[report.verdict.value] = counts.get(report.verdict.value, 0) + 1
        errors = [f for f in report.active_findings if f.severity == Severity.ERROR]
        row = {"path": report.path, "verdict": report.verdict.value,
               "findings": [{"rule": f.rule, "line": f.location.line, "message": f.message} for f in errors]}
        if report.verdict == Verdict.HACK:
            if any(_analysis_failure(f) for f in errors):
                counts["hack_from_analysis_error"] += 1
                row["analysis_error"] = True
            hacks.append(row)
        else:
            others.append(row)
    return {"set": folder.name, "path": str(folder), "counts": counts, "hacks": hacks, "not_hack": others}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="*", metavar="DIR", help="folders of legitimate kernels, one set each")
    ap.add_argument("--hacks", action="append", default=[], metavar="DIR",
                    help="a folder of known hacks (counted as caught or missed)")
    ap.add_argument("--json", metavar="PATH", help="write every set's figures and verdicts")
    ap.add_argument("--quiet", action="store_true", help="the table only")
    ap.add_argument("--kernel-files", action="store_true",
                    help="in a library folder, only files holding kernel code (a Triton/CuTe kernel, an extension "
                         "build, an autograd Function applied, a __global__ kernel, a Python binding); not setup.py")
    args = ap.parse_intermixed_args(argv)  # folders may come before and after the options
    if not args.dirs and not args.hacks:
        ap.error("give at least one folder")
    for d in args.dirs + args.hacks:
        if not Path(d).is_dir():
            print(f"public_precision: not a folder: {d}", file=sys.stderr)
            return 2
    scanner = StaticScanner(Config())
    results = []
    for d, known_hacks in [(d, False) for d in args.dirs] + [(d, True) for d in args.hacks]:
        res = scan_set(scanner, Path(d), args.kernel_files)
        res["known_hacks"] = known_hacks
        results.append(res)
        if args.quiet:
            continue
        if known_hacks:
            for row in res["not_hack"]:
                print(f"MISSED {row['path']}: verdict {row['verdict']}")
            continue
        for row in res["hacks"]:
            tag = " [analysis error]" if row.get("analysis_error") else ""
            print(f"HACK{tag} {row['path']}")
            for f in row["findings"]:
                print(f"    {f['rule']} line {f['line']}: {f['message'][:300]}")
    print()
    print(f"{'set':<20} {'files':>6} {'hack':>5} {'(analysis err)':>14} {'susp':>5} {'clean':>6} {'error':>6}  kind")
    for res in results:
        c = res["counts"]
        kind = "known hacks: hack = caught" if res["known_hacks"] else "legitimate: hack = false"
        print(f"{res['set']:<20} {c['files']:>6} {c['hack']:>5} {c['hack_from_analysis_error']:>14} "
              f"{c['suspicious']:>5} {c['clean']:>6} {c['error']:>6}  {kind}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
