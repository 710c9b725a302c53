"""Run the performance stage over the real corpus where it can run here, and count what fires.

On a CPU-only machine only the pure-PyTorch candidates can run (CUDA extensions and Triton need a
GPU); on a GPU machine pass ``--device cuda --all`` to run every record.  Each record goes through
``hackscan.perf.standalone`` (reference and candidate in their own processes, the candidate timed
only when its outputs match), with a small time budget.  Prints one line per record and, at the
end, the firing count per HS6xx rule, the reasons for records not measured, and the speedups.

    python benchmarks/perf_corpus.py [--limit N] [--device cpu|cuda] [--all] [--max-input-mib 64]
                                     [--jsonl PATH] [--out results.json]
    python benchmarks/perf_corpus.py --reevaluate results.json   # the parent side again, no workers

``--out`` keeps both workers' raw measurements, so a change to the parent side (thresholds, rules)
can be checked against the same measurements with ``--reevaluate``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.perf import standalone  # noqa: E402
from hackscan.perf.options import PerfOptions  # noqa: E402
from hackscan.python.module import HostModule  # noqa: E402
from hackscan.python.reference import build_reference_facts  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"
_GPU_ONLY = re.compile(r"load_inline|cpp_extension|triton|cupy|\bcuda\b|\.cuda\(|CUDAGraph|torch\.cuda", re.I)
_DTYPE_BYTES = {"float64": 8, "int64": 8, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "bool": 1}


def input_bytes(ref_code: str) -> int | None:
    """Bytes of get_inputs() as the static reference facts see them; None when unknown."""
    try:
        facts = build_reference_facts(HostModule.parse(ref_code, "<reference>"))
    except Exception:
        return None
    total = 0
    for spec in facts.inputs:
        if spec.shape is None:
            continue
        if any(d is None for d in spec.shape):
            return None
        n = 1
        for d in spec.shape:
            n *= int(d)  # type: ignore[arg-type]
        total += n * _DTYPE_BYTES.get(spec.dtype, 4)
    return total


def reevaluate(path: Path) -> int:
    from hackscan.perf.parent_side import evaluate

    fired: Counter[str] = Counter()
    for row in json.loads(path.read_text()):
        if not row.get("candidate_raw") or not row.get("reference_raw"):
            continue
        perf, findings = evaluate(row["candidate_raw"], row["reference_raw"])
        rules = sorted(f"{f.rule}:{f.severity.value}" for f in findings)
        fired.update(f.rule for f in findings)
        print(f"{row['task']:>10} {perf.get('headline', '')[:60]:<60} {' '.join(rules)}")
    print("findings per rule:", dict(sorted(fired.items())) or "none")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jsonl", default=str(CORPUS))
    ap.add_argument("--limit", type=int, default=40)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--all", action="store_true", help="also records that need a GPU")
    ap.add_argument("--max-input-mib", type=float, default=64.0)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--out")
    ap.add_argument("--reevaluate", help="a --out file: evaluate its raw measurements again")
    args = ap.parse_args()
    if args.reevaluate:
        return reevaluate(Path(args.reevaluate))
    path = Path(args.jsonl)
    if not path.is_file():
        print(f"no corpus at {path}")
        return 2
    opts = PerfOptions.for_device(args.device, iterations=10, time_budget_s=0.5, hidden_iterations=5,
                                  hidden_budget_s=0.5, memory_repeats=3, spin_budget_s=0.3, deadline_s=30.0)
    fired: Counter[str] = Counter()
    severities: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    not_measured: Counter[str] = Counter()
    speedups: list[float] = []
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    ran = 0
    for lineno, line in enumerate(path.open(), 1):
        if ran >= args.limit:
            break
        rec = json.loads(line)
        code, ref = rec.get("custom_code"), rec.get("ref_code")
        name = f"L{rec.get('level_id')}/{rec.get('task_id')}"
        if not code or not ref:
            skipped["no code"] += 1
            continue
        if not args.all and args.device == "cpu" and _GPU_ONLY.search(code):
            skipped["needs a GPU"] += 1
            continue
        nbytes = input_bytes(ref)
        if nbytes is None or nbytes > args.max_input_mib * (1 << 20):
            skipped["inputs too large or unknown for this machine"] += 1
            continue
        ran += 1
        out = standalone.run(code, ref, device=args.device, path=f"{path.name}:{lineno}", options=opts,
                             timeout=args.timeout)
        perf = out.performance
        rules = sorted(f.rule for f in out.findings)
        for f in out.findings:
            fired[f.rule] += 1
            severities[f"{f.rule} {f.severity.value}"] += 1
        if perf.get("measured"):
            sp = perf.get("headline_speedup")
            if isinstance(sp, (int, float)):
                speedups.append(sp)
            status = f"{sp:.2f}x" if isinstance(sp, (int, float)) else "timed"
        else:
            reason = str(perf.get("reason", "?"))
            key = reason.split(":")[0][:60]
            not_measured[key] += 1
            status = "not measured: " + reason[:120].replace("\n", " ")
        print(f"{name:>10} {out.seconds:6.1f}s {status:<40} {' '.join(rules)}", flush=True)
        rows.append({"record": lineno, "task": name, "status": status, "findings": [f.to_dict() for f in out.findings],
                     "claimed": rec.get("score_default") or rec.get("score"), "performance": perf,
                     "candidate_raw": out.candidate_raw, "reference_raw": out.reference_raw})
    print()
    print(f"ran {ran} records in {time.perf_counter() - t0:.0f} s; skipped: {dict(skipped)}")
    print(f"not measured: {dict(not_measured)}")
    if speedups:
        print(f"headline speedups: n={len(speedups)} median {statistics.median(speedups):.2f}x, "
              f"min {min(speedups):.2f}x, max {max(speedups):.2f}x")
    print("findings per rule:", dict(sorted(fired.items())) or "none")
    print("by severity:", dict(sorted(severities.items())) or "none")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
