"""Does a timing figure hold still?  Issue 17's done-when: the same clean kernel, scanned five times
through the real pipeline on this machine, gives speedups that stay within the intervals the
reports state.

Each run is a separate ``hackscan`` process (fresh workers, fresh sandboxes, the same ``--seed``),
as a user re-running an audit would do.  Prints per run the headline speedup, its stated interval,
how the measurement ended (converged or not, calls, seconds), then for every ordered pair of runs
whether run i's point estimate lies inside run j's stated interval, and the fraction.

    python benchmarks/timing_repeat.py                       # rowsum legit on the CPU, 5 runs
    python benchmarks/timing_repeat.py kernels/relu/clean_cpp_relu.py --ref kernels/relu/reference.py
    python benchmarks/timing_repeat.py --runs 5 --perf thorough

Exit status 0 when every point estimate lies within every other run's interval, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CANDIDATE = ROOT / "fixtures" / "dynamic" / "rowsum" / "legit.py"
DEFAULT_REFERENCE = ROOT / "fixtures" / "dynamic" / "rowsum" / "reference.py"


def one_run(candidate: Path, reference: Path, device: str, seed: int, perf: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "hackscan.cli", str(candidate), "--ref", str(reference), "--device", device,
               "--seed", str(seed), "--format", "json", "-o", str(out), "--no-progress"]
        if perf:
            cmd += ["--perf", perf]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
        if not out.exists():
            raise SystemExit(f"timing_repeat: the scan wrote no report (exit {proc.returncode}): {proc.stderr[-500:]}")
        data = json.loads(out.read_text())
    reports = data.get("results", data) if isinstance(data, dict) else data
    report = reports[0]
    perf_block = report.get("performance") or {}
    if not perf_block.get("measured"):
        raise SystemExit(f"timing_repeat: not measured: {perf_block.get('reason')}")
    head = perf_block.get("headline_baseline")
    conv = perf_block.get("convergence") or {}
    return {"speedup": perf_block["speedup"][head], "ci": perf_block.get("speedup_ci", {}).get(head),
            "baseline": head, "convergence": conv, "wall_s": wall,
            "findings": sorted(f["rule"] for f in report.get("findings", []))}


def describe(conv: dict) -> str:
    parts = []
    for side, c in sorted(conv.items()):
        if isinstance(c, dict) and "spread" in c:
            state = "ok" if c.get("converged") else "NOT converged"
            parts.append(f"{side} +-{c['spread']:.1%} {state} ({c.get('calls')} calls, {c.get('elapsed_s', 0):.1f} s)")
    return "; ".join(parts) or "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidate", nargs="?", type=Path, default=DEFAULT_CANDIDATE)
    ap.add_argument("--ref", type=Path, default=DEFAULT_REFERENCE)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--perf", default=None, help="passed to hackscan --perf (default: hackscan's default)")
    args = ap.parse_args(argv)
    if not args.candidate.is_file() or not args.ref.is_file():
        print(f"timing_repeat: no such file: {args.candidate if not args.candidate.is_file() else args.ref}",
              file=sys.stderr)
        return 2
    runs = []
    for i in range(args.runs):
        r = one_run(args.candidate, args.ref, args.device, args.seed, args.perf)
        runs.append(r)
        ci = r["ci"]
        ci_s = f"{ci[0]:.3f}-{ci[1]:.3f}x" if ci else "none"
        print(f"run {i + 1}: speedup {r['speedup']:.3f}x vs {r['baseline']}  interval {ci_s}  "
              f"findings {','.join(r['findings']) or '-'}  [{describe(r['convergence'])}]  {r['wall_s']:.0f} s",
              flush=True)
    inside = total = 0
    misses = []
    for i, a in enumerate(runs):
        for j, b in enumerate(runs):
            if i == j or not b["ci"]:
                continue
            total += 1
            if b["ci"][0] <= a["speedup"] <= b["ci"][1]:
                inside += 1
            else:
                misses.append(f"run {i + 1}'s {a['speedup']:.3f}x outside run {j + 1}'s {b['ci'][0]:.3f}-{b['ci'][1]:.3f}x")
    pts = [r["speedup"] for r in runs]
    print(f"point estimates {min(pts):.3f}-{max(pts):.3f}x (max/min {max(pts) / min(pts):.3f}); "
          f"inside the others' stated intervals: {inside}/{total} ({inside / max(total, 1):.0%})")
    for m in misses:
        print("  " + m)
    same = len({tuple(r["findings"]) for r in runs}) == 1
    print("findings identical in every run" if same else "findings DIFFER between runs")
    return 0 if inside == total and same else 1


if __name__ == "__main__":
    sys.exit(main())
