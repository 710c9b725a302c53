"""Does a timing figure hold still?  Issue 17's done-when: the same clean kernel, scanned five times
through the real pipeline on this machine, gives speedups that stay within the spread the reports
state.

Each run is a separate ``hackscan`` process (fresh workers, fresh sandboxes, the same ``--seed``),
as a user re-running an audit would do.  The figure is the headline speedup, a paired statistic
(candidate and baseline in alternating blocks, the median of per-round ratios in each of several
pairs of fresh worker processes, the geometric mean over the pairs).  Every report states two
spreads for it: the 95 % interval of the speedup (``speedup_ci``) and where a re-run's figure
should land (``speedup_rerun_ci``: a 99 % prediction interval over the pairs of worker processes,
``stats.between_processes``; ``speedup_rerun_confidence`` says which).

"Stays within the spread" means, precisely: for each of the R(R-1) ordered pairs of runs (i, j),
i != j, run i's headline speedup lies inside run j's stated re-run interval (stats.agreement).  A
trial of R runs passes only when all R(R-1) checks do.  The benchmark also counts the checks
against the speedup intervals themselves and against the first run's interval only (looser), and
prints the median relative half-width of the stated intervals, which must stay near the +-5 %
target for the intervals to be of use.  Absolute times are printed too: they move with the load
and are not comparable across runs (not part of the criterion).

    python benchmarks/timing_repeat.py                         # rowsum legit on the CPU, 5 runs, 1 trial
    python benchmarks/timing_repeat.py --trials 3              # how many of 3 trials pass
    python benchmarks/timing_repeat.py kernels/relu/clean_cpp_relu.py --ref kernels/relu/reference.py

Exit status 0 when every trial passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hackscan.perf.stats import agreement  # pure math: no torch in this process

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CANDIDATE = ROOT / "fixtures" / "dynamic" / "rowsum" / "legit.py"
DEFAULT_REFERENCE = ROOT / "fixtures" / "dynamic" / "rowsum" / "reference.py"
KEEP: Path | None = None  # --keep DIR: every run's JSON report is kept there


def one_run(candidate: Path, reference: Path, device: str, seed: int, perf: str | None,
            config: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "hackscan.cli", str(candidate), "--ref", str(reference), "--device", device,
               "--seed", str(seed), "--format", "json", "-o", str(out), "--no-progress"]
        if perf:
            cmd += ["--perf", perf]
        if config:
            cmd += ["--config", str(config)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
        if not out.exists():
            raise SystemExit(f"timing_repeat: the scan wrote no report (exit {proc.returncode}): {proc.stderr[-500:]}")
        data = json.loads(out.read_text())
        if KEEP is not None:
            KEEP.mkdir(parents=True, exist_ok=True)
            (KEEP / f"report_{len(list(KEEP.glob('report_*.json'))) + 1:03d}.json").write_text(out.read_text())
    reports = data.get("results", data) if isinstance(data, dict) else data
    report = reports[0]
    perf_block = report.get("performance") or {}
    if not perf_block.get("measured"):
        raise SystemExit(f"timing_repeat: not measured: {perf_block.get('reason')}")
    head = perf_block.get("headline_baseline")
    conv = perf_block.get("convergence") or {}
    cand = perf_block.get("candidate") or {}
    return {"speedup": perf_block["speedup"][head], "ci": perf_block.get("speedup_ci", {}).get(head),
            "rerun_ci": (perf_block.get("speedup_rerun_ci") or {}).get(head),
            "unpaired": (perf_block.get("unpaired_speedup") or {}).get(head),
            "candidate_ms": cand.get("claimed_ms"), "candidate_ms_spread": _spread_of(cand.get("wall_ms")),
            "baseline": head, "convergence": conv, "wall_s": wall,
            "findings": sorted(f["rule"] for f in report.get("findings", []))}


def _spread_of(stats: dict | None) -> str:
    if not isinstance(stats, dict) or not stats.get("n"):
        return "-"
    ci = stats.get("min_ci")
    return f"min-interval {ci[0]:.3g}-{ci[1]:.3g} ms" if ci else "-"


def half_width(point: float, ci: list | None) -> float | None:
    """The larger side of ``ci`` relative to ``point``: the "+-x %" the report states."""
    if not ci or not point:
        return None
    return max(point - ci[0], ci[1] - point) / point


def describe(conv: dict) -> str:
    parts = []
    for side, c in sorted(conv.items()):
        if isinstance(c, dict) and "spread" in c:
            state = "ok" if c.get("converged") else "NOT converged"
            procs = f" in {c['processes']} process pairs" if c.get("processes") else ""
            parts.append(f"{side} +-{c['spread']:.1%} {state} ({c.get('calls')} {c.get('unit') or 'calls'}{procs}, "
                         f"{c.get('elapsed_s') or 0:.1f} s)")
    return "; ".join(parts) or "-"


def one_trial(args: argparse.Namespace, trial: int) -> tuple[bool, list[dict]]:
    runs = []
    for i in range(args.runs):
        r = one_run(args.candidate, args.ref, args.device, args.seed, args.perf, args.config)
        runs.append(r)
        ci, rr = r["ci"], r["rerun_ci"]
        ci_s = f"{ci[0]:.3f}-{ci[1]:.3f}x" if ci else "none"
        rr_s = f"{rr[0]:.3f}-{rr[1]:.3f}x" if rr else "none"
        unp = f"{r['unpaired']:.3f}x" if isinstance(r["unpaired"], (int, float)) else "-"
        ms = f"{r['candidate_ms']:.4g} ms" if isinstance(r["candidate_ms"], (int, float)) else "-"
        print(f"trial {trial} run {i + 1}: speedup {r['speedup']:.3f}x vs {r['baseline']}  interval {ci_s}  "
              f"re-run interval {rr_s}  (unpaired {unp}; candidate {ms}, {r['candidate_ms_spread']}: absolute, "
              f"not comparable across runs)  findings {','.join(r['findings']) or '-'}  "
              f"[{describe(r['convergence'])}]  {r['wall_s']:.0f} s", flush=True)
    pts = [r["speedup"] for r in runs]
    rerun = agreement(pts, [r["rerun_ci"] for r in runs])
    plain = agreement(pts, [r["ci"] for r in runs])
    print(f"trial {trial}: point estimates {min(pts):.3f}-{max(pts):.3f}x (max/min {max(pts) / min(pts):.3f}); "
          f"inside the others' re-run intervals {rerun['inside']}/{rerun['total']}, inside the others' 95% intervals "
          f"{plain['inside']}/{plain['total']}, inside the first run's re-run interval "
          f"{rerun['inside_first']}/{rerun['total_first']}")
    for i, j in rerun["misses"]:
        rr = runs[j]["rerun_ci"]
        print(f"  run {i + 1}'s {pts[i]:.3f}x outside run {j + 1}'s re-run interval "
              + (f"{rr[0]:.3f}-{rr[1]:.3f}x" if rr else "(none)"))
    same = len({tuple(r["findings"]) for r in runs}) == 1
    print("  findings identical in every run" if same else "  findings DIFFER between runs", flush=True)
    return rerun["holds"] and same, runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidate", nargs="?", type=Path, default=DEFAULT_CANDIDATE)
    ap.add_argument("--ref", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--perf", default=None, help="passed to hackscan --perf (default: hackscan's default)")
    ap.add_argument("--config", type=Path, default=None, help="passed to hackscan --config (a pyproject.toml)")
    ap.add_argument("--keep", type=Path, default=None, help="keep every run's JSON report in this folder")
    args = ap.parse_args(argv)
    global KEEP
    KEEP = args.keep
    if not args.candidate.is_file() or not args.ref.is_file():
        print(f"timing_repeat: no such file: {args.candidate if not args.candidate.is_file() else args.ref}",
              file=sys.stderr)
        return 2
    passed = 0
    widths: list[float] = []
    rerun_widths: list[float] = []
    converged = total = 0
    for t in range(args.trials):
        ok, runs = one_trial(args, t + 1)
        passed += ok
        for r in runs:
            for out, key in ((widths, "ci"), (rerun_widths, "rerun_ci")):
                w = half_width(r["speedup"], r[key])
                if w is not None:
                    out.append(w)
            pc = (r["convergence"] or {}).get("paired") or {}
            total += 1
            converged += bool(pc.get("converged"))
    print(f"trials passing (every run's speedup inside every other run's re-run interval): {passed}/{args.trials}; "
          f"median stated half-width: 95% interval +-{statistics.median(widths):.1%}, re-run interval "
          f"+-{statistics.median(rerun_widths):.1%}; paired measurement converged to the target in "
          f"{converged}/{total} runs" if widths and rerun_widths else f"trials passing: {passed}/{args.trials}")
    return 0 if passed == args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
