"""Candidates per hour for the whole pipeline (static, dynamic, performance) on a fixed sample.

    python benchmarks/throughput.py                      # the sample in throughput_sample.txt, CPU
    python benchmarks/throughput.py --device cuda        # on a GPU host
    python benchmarks/throughput.py --jobs 4 --json out.json

The sample (``benchmarks/throughput_sample.txt``) mixes level-1 records of the shared CUDA-L1
corpus whose ModelNew is plain PyTorch with bundled C++ candidates (one extension build each), so
that it runs on the CPU here.  Builds start cold: a fresh extension cache folder per run (pass
``--build-cache DIR`` to reuse one).  It prints the wall time, candidates per hour, each
candidate's verdict, and the split of the time the dynamic stage spent: build, start-up (worker
server, reference and candidate import), probes and timing.  The split is summed over candidates,
so with several jobs it can exceed the wall time: that excess is the overlap.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"
if not CORPUS.exists():
    CORPUS = Path("/work/shared/corpora/cuda-l1/a100.jsonl")
SAMPLE = Path(__file__).with_name("throughput_sample.txt")


def sample_paths(folder: Path, sample: Path = SAMPLE, corpus: Path | None = None) -> list[str]:
    """The sample as paths hackscan scans: the corpus records as one JSONL file in ``folder``."""
    corpus = corpus or CORPUS
    entries = [ln.strip() for ln in sample.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    rows = corpus.read_text().splitlines() if corpus.exists() else []
    picked = []
    paths: list[str] = []
    for e in entries:
        if e.startswith("corpus:"):
            if not rows:
                print(f"skipping {e}: no corpus at {corpus}", file=sys.stderr)
                continue
            picked.append(rows[int(e.split(":", 1)[1])])
        else:
            paths.append(str(ROOT / e))
    if picked:
        out = folder / "sample.jsonl"
        out.write_text("\n".join(picked) + "\n")
        paths.insert(0, str(out))
    return paths


PHASES = {
    # the build farm's time (farm.py) is build time too, spent before the candidate took a device
    "build": ("compile_s", "farm_s"),
    "startup": ("startup_s", "preload_s", "reference_load_s", "candidate_import_s"),
    "probes": ("reference_probes_s", "candidate_probes_s", "reference_extras_s"),
    "timing": ("perf_s", "perf_outside_clock_s", "perf_compile_s"),
}


def split(timings: dict) -> dict[str, float]:
    t = dict(timings)
    # the candidate's load includes its builds: what is left is its import and construction
    t["candidate_import_s"] = max(float(t.get("candidate_load_s", 0.0)) - float(t.get("compile_s", 0.0)), 0.0)
    return {k: sum(float(t.get(n, 0.0)) for n in names) for k, names in PHASES.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--jobs", type=int, default=1, help="hackscan's --jobs")
    ap.add_argument("--perf", default=None, help="performance mode (quick, thorough) where supported")
    ap.add_argument("--build-cache", default=None, help="extension cache folder (default: a fresh one)")
    ap.add_argument("--build-farm", default=None, choices=["auto", "on", "off"],
                    help="hackscan's --build-farm (default: its own default, off)")
    ap.add_argument("--cuda-arch", default=None, help="hackscan's --cuda-arch")
    ap.add_argument("--sample", type=Path, default=SAMPLE)
    ap.add_argument("--corpus", type=Path, default=None, help="the CUDA-L1 JSONL (default ../shared/corpora/...)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--json", type=Path, default=None, help="write per-candidate results here")
    args = ap.parse_args(argv)

    from hackscan.config import load_config
    from hackscan.inputs import InputOptions
    from hackscan.pipeline import RunOptions, run

    with tempfile.TemporaryDirectory(prefix="hackscan-throughput-") as tmp:
        folder = Path(tmp)
        cache = args.build_cache or str(folder / "cache")
        os.environ["HACKSCAN_CACHE_DIR"] = cache
        paths = sample_paths(folder, args.sample, args.corpus)
        extra = {}
        if args.perf:
            extra["perf_mode"] = args.perf
        if args.build_cache:
            extra["build_cache"] = args.build_cache
        if args.build_farm:
            extra["build_farm"] = args.build_farm
        if args.cuda_arch:
            extra["cuda_arch"] = args.cuda_arch
        opts = RunOptions(device=args.device, seed=args.seed, jobs=args.jobs, extra=extra)
        t0 = time.perf_counter()
        reports = run(paths, load_config(start=ROOT), InputOptions(), opts)
        wall = time.perf_counter() - t0
    n = len(reports)
    total = {k: 0.0 for k in PHASES}
    rows = []
    for r in reports:
        dyn = r.dynamic if isinstance(r.dynamic, dict) else {}
        s = split(dyn.get("timings") or {})
        for k in total:
            total[k] += s[k]
        perf = r.performance if isinstance(r.performance, dict) else {}
        rows.append({"path": r.path, "record": getattr(r, "record", None), "verdict": r.verdict.value,
                     "rules": sorted({f.rule for f in r.findings if not f.suppressed}),
                     "ran": dyn.get("ran"), "reason": dyn.get("reason"), "measured": perf.get("measured"),
                     **{k: round(v, 2) for k, v in s.items()}})
    for row in rows:
        name = Path(str(row["path"])).name + (f"#{row['record']}" if row["record"] is not None else "")
        print(f"{name:40} {row['verdict']:10} {','.join(row['rules']) or '-':28} build {row['build']:6.1f}  "
              f"start {row['startup']:5.1f}  probes {row['probes']:5.1f}  timing {row['timing']:5.1f}"
              + (f"  ({row['reason']})" if row["reason"] and not row["ran"] else ""))
    summed = sum(total.values())
    farm = f", build farm {args.build_farm}" if args.build_farm else ""
    print(f"\n{n} candidates in {wall:.1f} s wall ({args.device}, jobs {args.jobs}{farm}, {os.cpu_count()} cores): "
          f"{n / wall * 3600:.0f} candidates/hour")
    print("time split (summed over candidates): " + ", ".join(
        f"{k} {v:.1f} s ({v / summed:.0%})" if summed else f"{k} {v:.1f} s" for k, v in total.items()))
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "candidates": n, "per_hour": n / wall * 3600,
                                         "split": total, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
