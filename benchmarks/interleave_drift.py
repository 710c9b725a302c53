"""Would interleaving candidate and reference calls (ABAB) hold a speedup stiller than timing one
side after the other (AAAA then BBBB), as the dynamic stage does today?

Two identical CPU calls (so the true ratio is 1.00) are timed as the performance stage times them
(single thread, cache flushed, the minimum of the wall clock), in blocks and interleaved, ``--trials``
times each.  Prints how far the ratio strays from 1 in each order: the between-trial spread that
drift on a shared host causes.

    python benchmarks/interleave_drift.py [--calls 200] [--trials 12]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--trials", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.rand(256, 4096)
    flush = torch.empty(32 << 20, dtype=torch.uint8)

    def one() -> float:
        flush.zero_()
        t0 = time.perf_counter()
        x.sum(dim=1)
        return time.perf_counter() - t0

    def blocked() -> float:
        a = [one() for _ in range(args.calls)]
        b = [one() for _ in range(args.calls)]
        return min(a) / min(b)

    def interleaved() -> float:
        a, b = [], []
        for _ in range(args.calls):
            a.append(one())
            b.append(one())
        return min(a) / min(b)

    for _ in range(20):
        one()
    results: dict[str, list[float]] = {"blocked (AAAA BBBB)": [], "interleaved (ABAB)": []}
    for _ in range(args.trials):
        results["blocked (AAAA BBBB)"].append(blocked())
        results["interleaved (ABAB)"].append(interleaved())
    for name, ratios in results.items():
        logs = [abs(math.log(r)) for r in ratios]
        print(f"{name:22s} ratio of two identical calls: {min(ratios):.3f}-{max(ratios):.3f}, "
              f"median |log ratio| {statistics.median(logs):.3f}, worst {max(logs):.3f}")


if __name__ == "__main__":
    main()
