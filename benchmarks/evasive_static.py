"""Static detection of the evasive mutants alone, per class, per family and per variant (issue 19).

    python benchmarks/evasive_static.py [--class 3,8,12] [--family indirect-call,namespace-write] [--json OUT]

``hackscan mutate`` scans the plain and the evasive mutants together and prints per-class tables;
working on the static analysis of one evasion family needs the evasive half only, and per variant
(which spelling got through).  This runs the same machinery (``measure.adequacy.run_adequacy``) with
the mutant list cut to the asked-for families, static stage only, and prints detected / all per
class, family and variant.  The Python-side families of issue 19 over all classes take about a
minute here (two cores).  Counts are of the default seeds (``measure.seeds.default_seed_paths``), so
an ``ok_*`` fixture added to the tree adds its mutants.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.measure import adequacy  # noqa: E402
from hackscan.measure.evasive import FAMILIES  # noqa: E402
from hackscan.measure.seeds import default_seed_paths  # noqa: E402
from hackscan.measure.suite import mutants_of  # noqa: E402

PYTHON_FAMILIES = ("indirect-call", "dispatch-table", "namespace-write", "other-library")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--class", dest="classes", default="", help="hack classes, comma-separated (default: all)")
    ap.add_argument("--family", default=",".join(PYTHON_FAMILIES),
                    help=f"evasion families, comma-separated (default: the Python-side ones; all: {','.join(FAMILIES)})")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="every mutant's new findings, for a diff between branches")
    args = ap.parse_args(argv)
    families = set(args.family.split(","))
    unknown = families - set(FAMILIES)
    if unknown:
        ap.error(f"unknown families: {', '.join(sorted(unknown))}")
    classes = tuple(int(c) for c in args.classes.split(",") if c)

    def evasive_only(seed, classes=(), evasive=True):  # type: ignore[no-untyped-def]
        return [m for m in mutants_of(seed, classes, evasive) if m.evasive and m.family in families]

    adequacy.mutants_of = evasive_only  # the run below builds its mutant list through this name
    t0 = time.perf_counter()
    result = adequacy.run_adequacy(default_seed_paths(), adequacy.AdequacyOptions(classes=classes, jobs=args.jobs))
    elapsed = time.perf_counter() - t0
    tables: dict[str, dict[object, list[int]]] = {"class": defaultdict(lambda: [0, 0]),
                                                  "family": defaultdict(lambda: [0, 0]),
                                                  "variant": defaultdict(lambda: [0, 0])}
    rows = []
    for r in result.results:
        m = r.mutant
        for name, key in (("class", m.klass), ("family", m.family), ("variant", f"{m.klass} {m.family}/{m.variant}")):
            tables[name][key][0] += int(r.static)
            tables[name][key][1] += 1
        rows.append({"seed": m.seed, "class": m.klass, "family": m.family, "variant": m.variant, "new": r.static_new})
    for name, table in tables.items():
        for key in sorted(table, key=lambda k: (str(type(k)), k)):
            hit, n = table[key]
            print(f"{name:8} {key!s:55} {hit:5}/{n:<5} {100 * hit // max(n, 1):3d} %")
    print(f"{len(result.results)} evasive mutants of {len(result.seeds)} seeds in {elapsed:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
