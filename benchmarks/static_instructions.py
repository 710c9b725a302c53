#!/usr/bin/env python3
"""Instructions per scanned file (callgrind): the static scan's cost, independent of machine load.

    PYTHONHASHSEED=0 python benchmarks/static_instructions.py [CORPUS.jsonl] [--files 60] [--batch] [--root DIR]

The development machine's speed swings by 20 % within minutes, which hides a 5 % change in
``static_speed.py``'s files per second.  This counts the instructions the interpreter executes
instead: it runs the first ``--files`` submissions under ``valgrind --tool=callgrind`` twice, once
with a warm-up pass only and once with two more passes, and prints the difference per file, so
start-up, imports and tree-sitter query compilation cancel out.  Set ``PYTHONHASHSEED=0``: set
iteration order moves the count by about 3 % between runs otherwise.  Needs valgrind (Debian:
``apt-get install valgrind``); each run takes a few minutes.  Counts compare only between runs of
one interpreter build (a PGO build runs fewer instructions for the same work): the line printed
names it.  ``--root`` scans with the ``hackscan`` package of another tree (a ``git archive`` of an
older commit, say), so that two versions are measured by the same program in the same session.
The records scanned are chosen by this tree's ``discover`` (the first ``--files`` it reads as
submissions) and the other tree scans exactly those: an older tree may read a record as a
submission that this one reports as unreadable (code that is the literal string ``"None"``), and
taking the other tree's own first N would then compare different files.  The records are printed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"

_PROGRAM = r"""
import sys
sys.path.insert(0, {root!r})
from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
records = {records!r}
subs = [i for i in discover([{corpus!r}]) if isinstance(i, Submission) and i.record in records]
assert [s.record for s in subs] == sorted(records), "the measured tree does not read every chosen record"
scanner = StaticScanner(Config(mode="audit"))
for s in subs:
    scanner.scan(s)
for _ in range({passes}):
    if {batch}:
        scanner.scan_many(subs)
    else:
        for s in subs:
            scanner.scan(s)
"""


def _records(corpus: str, files: int) -> list[int]:
    """The JSONL records of the first ``files`` submissions this tree's ``discover`` reads."""
    sys.path.insert(0, str(ROOT))
    try:
        from hackscan.inputs import Submission, discover
    finally:
        sys.path.remove(str(ROOT))
    return [i.record for i in discover([corpus]) if isinstance(i, Submission)][:files]  # type: ignore[misc]


def _instructions(corpus: str, records: list[int], passes: int, batch: bool, root: Path = ROOT) -> int:
    program = _PROGRAM.format(root=str(root), corpus=corpus, records=records, passes=passes, batch=batch)
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                           sys.executable, "-c", program], capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or m is None:
        raise RuntimeError(f"callgrind run failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT))
    ap.add_argument("--files", type=int, default=60, help="first N readable submissions (default 60)")
    ap.add_argument("--batch", action="store_true", help="time scan_many instead of one scan per call")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the tree whose hackscan package is measured (default: this one)")
    args = ap.parse_args()
    root = args.root.resolve()
    if not (root / "hackscan" / "engine.py").is_file():
        print(f"no hackscan package under {root}", file=sys.stderr)
        return 2
    if not Path(args.corpus).is_file():
        print(f"corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    if os.environ.get("PYTHONHASHSEED") != "0":
        print("note: PYTHONHASHSEED is not 0; counts vary by about 3% between runs", file=sys.stderr)
    records = _records(args.corpus, args.files)
    try:
        base = _instructions(args.corpus, records, 0, args.batch, root)
        more = _instructions(args.corpus, records, 2, args.batch, root)
    except RuntimeError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    per_file = (more - base) / (2 * len(records))
    mode = "batch (scan_many)" if args.batch else "one scan per call"
    print(f"{per_file / 1e6:.2f} M instructions per file ({mode}, first {len(records)} submissions of {args.corpus}, "
          f"records {_spans(records)}; hackscan of {root}; {sys.executable}, Python {sys.version.split()[0]})")
    return 0


def _spans(records: list[int]) -> str:
    """``1-3,5-9,12`` for [1, 2, 3, 5, ..., 9, 12]."""
    out: list[str] = []
    for r in records:
        if out and int(out[-1].rsplit("-", 1)[-1]) == r - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
