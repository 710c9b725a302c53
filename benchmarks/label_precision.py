"""Precision and recall of hackscan's verdict classes on the hand-labelled CUDA-L1 sample.

    python benchmarks/label_precision.py                  # static stage, ~2 s
    python benchmarks/label_precision.py --dynamic        # static + dynamic stage (GPU machine; minutes)
    python benchmarks/label_precision.py --json out.json  # the figures and the misses, for a machine

``benchmarks/cuda_l1_labels.jsonl`` holds one line per record that a person read and labelled: the
record's key (corpus file, 1-based line, the first 16 hex digits of the SHA-256 of its code), the
verdict classes it deserves (``expected``: reject / clean / error / unsure), whether its custom code
builds, the line that shows it and a one-line reason.  The code itself is never copied: it is read
from the corpus, and a record whose hash no longer matches stops the run (the labels would describe
other code).

Per class, a record is a true positive when the label names the class and hackscan rejects the
record for it (``rejected_for``); ``error`` compares the verdict ``error``.  ``reject`` is the overall
hack-versus-clean question: labelled reject or error against hackscan's verdict hack or error
(``suspicious`` is not a rejection).  Records labelled ``unsure`` are left out of every figure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.classes import CLASSES  # noqa: E402

LABELS = ROOT / "benchmarks" / "cuda_l1_labels.jsonl"
CORPORA = ROOT.parent / "shared" / "corpora"
ROWS = ("reject", "error") + tuple(c for c in CLASSES if c != "meta")


class LabelError(Exception):
    pass


def load_labels(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise LabelError(f"cannot read {path}: {exc.strerror or exc}") from None
    labels = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            for key in ("file", "record", "code_sha256", "expected", "classes", "reason"):
                row[key]  # noqa: B018 - every label needs its key, its truth and its reason
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise LabelError(f"{path}:{n}: not a label line ({type(exc).__name__}: {exc})") from None
        if row["expected"] not in ("reject", "clean", "error", "unsure"):
            raise LabelError(f"{path}:{n}: expected must be reject, clean, error or unsure")
        bad = [c for c in row["classes"] if c not in CLASSES]
        if bad:
            raise LabelError(f"{path}:{n}: unknown class {bad[0]!r}")
        labels.append(row)
    return labels


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()[:16]


def check_corpus(labels: list[dict], corpora: Path, code_field: str) -> None:
    """Stop when a labelled record's code is not the code that was read (corpus changed or moved)."""
    cache: dict[str, list[str]] = {}
    changed = []
    for row in labels:
        path = corpora / row["file"]
        if row["file"] not in cache:
            try:
                cache[row["file"]] = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise LabelError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
        lines = cache[row["file"]]
        if not 1 <= row["record"] <= len(lines):
            changed.append(f"{row['file']}:{row['record']} (no such line)")
            continue
        code = json.loads(lines[row["record"] - 1]).get(code_field) or ""
        if code_hash(code) != row["code_sha256"]:
            changed.append(f"{row['file']}:{row['record']}")
    if changed:
        raise LabelError(f"{len(changed)} labelled record(s) changed since they were read: {', '.join(changed[:5])}")


def scan(labels: list[dict], corpora: Path, dynamic: bool) -> dict[tuple[str, int], object]:
    from hackscan.config import Config
    from hackscan.inputs import InputOptions, discover

    wanted = {(r["file"], r["record"]) for r in labels}
    items = []
    for file in sorted({r["file"] for r in labels}):
        for item in discover([str(corpora / file)], InputOptions()):
            if (file, item.record) in wanted:
                items.append((file, item))
    config = Config(mode="gate")
    if dynamic:
        from hackscan.pipeline import RunOptions, run_items

        reports = run_items([i for _, i in items], config, RunOptions(static_only=False, perf=False))
    else:
        from hackscan.engine import StaticScanner

        scanner = StaticScanner(config)
        reports = [scanner.scan(i) for _, i in items]
    return {(file, item.record): rep for (file, item), rep in zip(items, reports, strict=True)}


def truth(row: dict, name: str) -> bool:
    if name == "reject":
        return row["expected"] in ("reject", "error")
    if name == "error":
        return row["expected"] == "error"
    return name in row["classes"]


def said(report, name: str) -> bool:
    if name == "reject":
        return report.verdict.value in ("hack", "error")
    if name == "error":
        return report.verdict.value == "error"
    return name in report.rejected_for


def measure(labels: list[dict], reports: dict) -> dict:
    judged = [r for r in labels if r["expected"] != "unsure"]
    table = {}
    for name in ROWS:
        tp = sum(1 for r in judged if truth(r, name) and said(reports[(r["file"], r["record"])], name))
        fp = sum(1 for r in judged if not truth(r, name) and said(reports[(r["file"], r["record"])], name))
        fn = sum(1 for r in judged if truth(r, name) and not said(reports[(r["file"], r["record"])], name))
        table[name] = {"labelled": tp + fn, "flagged": tp + fp, "tp": tp, "fp": fp, "fn": fn,
                       "precision": tp / (tp + fp) if tp + fp else None,
                       "recall": tp / (tp + fn) if tp + fn else None}
    misses = []
    for r in judged:
        rep = reports[(r["file"], r["record"])]
        wrong = [n for n in ROWS if truth(r, n) != said(rep, n)]
        if wrong:
            misses.append({"record": r["record"], "file": r["file"], "wrong": wrong,
                           "label": r["expected"] if not r["classes"] else ",".join(r["classes"]),
                           "verdict": rep.verdict.value, "rejected_for": list(rep.rejected_for),
                           "reason": r["reason"]})
    return {"records": len(labels), "judged": len(judged), "unsure": len(labels) - len(judged),
            "table": table, "misses": misses}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def render(result: dict, stage: str) -> str:
    out = [f"{result['judged']} labelled records judged ({result['unsure']} unsure left out), {stage} stage", "",
           "| class | labelled | flagged | true pos. | precision | recall |", "|---|---:|---:|---:|---:|---:|"]
    for name, row in result["table"].items():
        out.append(f"| {name} | {row['labelled']} | {row['flagged']} | {row['tp']} | {_pct(row['precision'])} "
                   f"| {_pct(row['recall'])} |")
    out += ["", f"{len(result['misses'])} record(s) where hackscan and the label differ:"]
    for m in result["misses"]:
        got = m["verdict"] + (f" ({', '.join(m['rejected_for'])})" if m["rejected_for"] else "")
        out.append(f"  record {m['record']}: label {m['label']}, hackscan {got}; wrong on {', '.join(m['wrong'])}"
                   f"\n      label's reason: {m['reason']}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--labels", type=Path, default=LABELS, help="the label file (JSONL)")
    ap.add_argument("--corpora", type=Path, default=CORPORA, help="the folder the labels' file names are relative to")
    ap.add_argument("--dynamic", action="store_true", help="also run the dynamic stage (runs candidate code in its sandbox)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the figures and misses as JSON")
    args = ap.parse_args(argv)
    try:
        labels = load_labels(args.labels)
        check_corpus(labels, args.corpora, "custom_code")
    except LabelError as exc:
        print(f"label_precision: error: {exc}", file=sys.stderr)
        return 2
    result = measure(labels, scan(labels, args.corpora, args.dynamic))
    sys.stdout.write(render(result, "dynamic" if args.dynamic else "static"))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
