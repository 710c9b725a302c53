"""What the differential checks cost per candidate in the dynamic stage: the environment check
(HS414: one call per process condition), the shared-state snapshot (HS509: before the import,
compared after import, construction and each probe batch; the ATen dispatch tables when an
extension loads) and the seeded input search (HS415: a few searched inputs through both workers).

Runs the same candidates twice through the real dynamic stage, ``HACKSCAN_DIFFERENTIAL=0`` (the
checks off) and on, interleaved, and prints per candidate the dynamic stage's total time
(``dynamic.timings.total_s``) and the candidate worker's share (load + probes) with and without,
and the median increase.  The acceptance bound is +25 % per candidate.

    python benchmarks/differential_cost.py                 # pure-PyTorch fixtures, --no-perf
    python benchmarks/differential_cost.py --perf quick    # with the performance stage (its budget)
    python benchmarks/differential_cost.py --rounds 3 FILE...   # other candidates (a reference.py beside)
    python benchmarks/differential_cost.py --sandbox off   # a host where bubblewrap cannot start workers
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["fixtures/dynamic/relu/legit.py", "fixtures/dynamic/softmax/legit_online.py",
           "fixtures/dynamic/layernorm/legit_affine.py", "fixtures/dynamic/rowsum/legit.py"]


def run(paths: list[str], on: bool, perf: str | None, seed: int, sandbox: str = "required") -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "hackscan", *paths, "--device", "cpu", "--jobs", "1", "--seed", str(seed),
               "-f", "json", "-o", str(out), "--no-progress", "--sandbox", sandbox]
        cmd += ["--perf", perf] if perf else ["--no-perf"]
        env = dict(os.environ, HACKSCAN_DIFFERENTIAL="1" if on else "0")
        subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        report = json.loads(out.read_text())
    res = {}
    for r in report["results"]:
        t = (r.get("dynamic") or {}).get("timings") or {}
        vary = [i for i in (r.get("dynamic") or {}).get("integrity", []) if i.get("kind") == "vary"]
        res[r["path"]] = {"total": float(t.get("total_s", "nan")), "vary": float(vary[0].get("cost_s", 0)) if vary else 0.0,
                          "search": float(t.get("search_s", 0) or 0),
                          "candidate": float(t.get("candidate_load_s", 0)) + float(t.get("candidate_probes_s", 0)),
                          "perf": float((r.get("performance") or {}).get("seconds", 0) or 0)}
    return res


def _snapshot_cost() -> tuple[float, float, float]:
    """The shared-state snapshot in a process like the worker's (torch imported): take, compare,
    and the dispatch tables, median of 5."""
    code = (
        "import time, statistics, torch, torch.nn\n"
        "from hackscan.dynamic.worker.world import World\n"
        "a, b, c = [], [], []\n"
        "for _ in range(5):\n"
        "    t = time.perf_counter(); w = World(); a.append(time.perf_counter() - t)\n"
        "    t = time.perf_counter(); w.changes(); b.append(time.perf_counter() - t)\n"
        "    t = time.perf_counter(); w.take_dispatch(); c.append(time.perf_counter() - t)\n"
        "print(statistics.median(a), statistics.median(b), statistics.median(c))\n")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, capture_output=True, text=True)
    x, y, z = (float(v) for v in out.stdout.split())
    return x, y, z


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=DEFAULT)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--perf", choices=["quick", "target", "thorough"])
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--sandbox", choices=["required", "no-seccomp", "off"], default="required")
    args = ap.parse_args(argv)
    samples: dict[str, dict[bool, list[dict]]] = {}
    for _ in range(args.rounds):
        for on in (False, True):  # interleaved: load drift hits both alike
            for path, t in run(args.paths, on, args.perf, args.seed, args.sandbox).items():
                samples.setdefault(path, {False: [], True: []})[on].append(t)
    print(f"{'candidate':48s} {'total off':>10s} {'total on':>10s} {'+%':>7s} {'cand off':>9s} {'cand on':>8s} "
          f"{'search':>7s}")
    ratios = []
    for path, s in samples.items():
        off = statistics.median(x["total"] for x in s[False])
        on = statistics.median(x["total"] for x in s[True])
        c_off = statistics.median(x["candidate"] for x in s[False])
        c_on = statistics.median(x["candidate"] for x in s[True])
        ratios.append(on / off - 1)
        search = statistics.median(x["search"] for x in s[True])
        print(f"{path[-48:]:48s} {off:10.2f} {on:10.2f} {100 * (on / off - 1):+6.1f}% {c_off:9.2f} {c_on:8.2f} "
              f"{search:7.3f}")
    print(f"median dynamic-stage increase per candidate: {100 * statistics.median(ratios):+.1f}% "
          f"(bound +25%), rounds {args.rounds}, perf {args.perf or 'off'}")
    # the added work itself, free of the scheduling noise in the totals above
    vary = [statistics.median(x["vary"] for x in s[True]) for s in samples.values()]
    snap, diff, tables = _snapshot_cost()
    totals = [statistics.median(x["total"] for x in s[False]) for s in samples.values()]
    search = [statistics.median(x["search"] for x in s[True]) for s in samples.values()]
    added = [v + snap + 3 * diff + q for v, q in zip(vary, search, strict=True)]
    print(f"added work per candidate: environment check {statistics.median(vary):.3f} s (median of its 8 calls' "
          f"wall), input search {statistics.median(search):.3f} s (its inputs through both workers), "
          f"snapshot {snap:.3f} s + {diff:.3f} s per comparison (x3 or more), ATen dispatch tables "
          f"{tables:.3f} s twice when an extension loads; {100 * statistics.median(a / t for a, t in zip(added, totals, strict=True)):.1f}% "
          f"of the dynamic stage (without extension)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
