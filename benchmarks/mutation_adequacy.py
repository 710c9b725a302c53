"""Mutation adequacy of hackscan: the fraction of injected hacks each stage detects, per hack class.

    python benchmarks/mutation_adequacy.py [--dynamic] [--dynamic-limit N] [--readme docs/measured.md] [--json OUT]

Same machinery as ``hackscan mutate`` (hackscan/measure/adequacy.py), plus wall-clock cost per stage.
Seeds: the bundled CPU seeds, the ``ok_*.py`` fixtures and the demo ``kernels/**/clean_*.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.measure.adequacy import AdequacyOptions, render_adequacy, run_adequacy, write_readme_section  # noqa: E402
from hackscan.measure.seeds import default_seed_paths  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dynamic", action="store_true", help="run CPU-runnable mutants in the dynamic stage")
    ap.add_argument("--dynamic-limit", type=int, default=60)
    ap.add_argument("--compile-limit", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--readme", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--show-missed", action="store_true", help="list the mutants no stage caught, by family")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the static scans")
    args = ap.parse_args(argv)
    opts = AdequacyOptions(dynamic=args.dynamic, dynamic_limit=args.dynamic_limit, compile_limit=args.compile_limit,
                           timeout=args.timeout, jobs=args.jobs)
    t0 = time.perf_counter()
    result = run_adequacy(default_seed_paths(), opts)
    elapsed = time.perf_counter() - t0
    print(render_adequacy(result, "text", show_missed=args.show_missed))
    ran = sum(r.dynamic_ran for r in result.results)
    print(f"{len(result.results)} mutants of {len(result.seeds)} seeds in {elapsed:.1f} s "
          f"({ran} run in the dynamic stage)")
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    if args.readme:
        write_readme_section(args.readme, result)
        print(f"wrote the table into {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
