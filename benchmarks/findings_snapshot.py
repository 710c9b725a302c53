#!/usr/bin/env python3
"""Canonical snapshot of every static finding, to prove an optimisation changed none.

    python benchmarks/findings_snapshot.py --write /tmp/base.json    # before a change
    python benchmarks/findings_snapshot.py --check /tmp/base.json    # after: exit 1 and a diff if anything moved

Scans the corpus (default the CUDA-L1 A100 dataset), every file under ``fixtures/`` and ``kernels/``
with the static stage, in audit and in gate mode, and records per submission its verdict, error,
skipped rules and every finding with all its fields (rule, location, severity, confidence, message,
evidence, snippet, suppression).  Tracebacks in ``analysis-failure`` evidence are dropped: they name
hackscan's own line numbers, which move with any edit.  ``--fresh`` scans with the reference cache
off, to check that caching does not change a result either.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import discover  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if k != "traceback"}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "value") and hasattr(type(value), "__members__"):  # enum
        return value.value
    if dataclasses.is_dataclass(value):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def snapshot(paths: list[str], fresh: bool) -> dict:
    out = {}
    for mode in ("audit", "gate"):
        scanner = StaticScanner(Config(mode=mode), reference_cache_size=0 if fresh else 8)
        # audit mode scans item by item, gate mode as one batch (``scan_many``): both paths are covered
        reports = scanner.scan_many(discover(paths)) if mode == "gate" else map(scanner.scan, discover(paths))
        for r in reports:
            findings = [_plain(f) for f in r.findings]
            out[f"{mode} {r.path}"] = {
                "verdict": r.verdict.value,
                "error": r.error,
                "skipped": sorted([s.rule, s.reason] for s in r.skipped) if r.skipped else [],
                "findings": findings,
            }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", default=[str(DEFAULT), str(ROOT / "fixtures"), str(ROOT / "kernels")])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="JSON")
    g.add_argument("--check", metavar="JSON")
    ap.add_argument("--fresh", action="store_true", help="reference cache off")
    args = ap.parse_args()
    snap = snapshot(args.paths, args.fresh)
    text = json.dumps(snap, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    n = sum(len(v["findings"]) for v in snap.values())
    if args.write:
        Path(args.write).write_text(text)
        print(f"wrote {len(snap)} reports, {n} findings to {args.write}")
        return 0
    base = Path(args.check).read_text()
    if base == text:
        print(f"identical: {len(snap)} reports, {n} findings")
        return 0
    diff = difflib.unified_diff(base.splitlines(), text.splitlines(), "baseline", "now", lineterm="", n=2)
    for i, line in enumerate(diff):
        if i >= 200:
            print("... (diff truncated)")
            break
        print(line)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
