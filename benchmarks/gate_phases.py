#!/usr/bin/env python3
"""Where the static gate's time goes: CPU time per sample by phase, reference cold and warm.

    python benchmarks/gate_phases.py [CORPUS.jsonl] [--limit N] [--repeat 3]

Scans the corpus's records with ``Scanner(mode="gate")`` as ``reward_gate.py`` does (a warm-up pass
first; cold = a fresh analysis of each record's reference, warm = references kept from an earlier
step) and splits each sample's CPU time into the phases that a speed-up has to target:

* parse: ``HostModule.parse``, the Python ``ast`` of the candidate (and, cold, of the reference)
  with the extraction of its CUDA / C++ sources;
* value flow: ``build_model_flow``, the def-use analysis of the model (and, cold, of the
  reference's when a rule asks for it);
* C++ facts: ``build_cuda_facts``, the tree-sitter parse of the C++ units and the facts read from it;
* reference facts: ``build_reference_facts`` (cold only: warm it is cached);
* the rest: the rules themselves, the smaller lazy facts (the node index, the pattern facts, the
  C++ data flow), the findings and the report.

Two floors are printed beside them, measured alone: ``ast.parse`` of the candidates and the
tree-sitter parse of their C++ units (C code that no change to hackscan makes cheaper).  Each phase
is timed by wrapping its builder with two ``time.process_time`` calls (about a microsecond each), so
the split costs no more than that.
"""

from __future__ import annotations

import argparse
import ast
import gc
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from reward_gate import DEFAULT, _records  # noqa: E402

from hackscan import Scanner  # noqa: E402

PHASES = ("parse", "value flow", "C++ facts", "reference facts")


def _wrap(spent: Counter, name: str, fn):
    def timed(*args, **kw):
        t0 = time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            spent[name] += time.process_time() - t0
    return timed


def _instrument(spent: Counter) -> None:
    import hackscan.cuda.builder as builder
    import hackscan.python.reference as reference
    import hackscan.python.valueflow as valueflow
    from hackscan.python.module import HostModule

    # each builder is looked up by name at its call site (a function-level import or a class
    # attribute), so replacing the module attribute is enough
    HostModule.parse = staticmethod(_wrap(spent, "parse", HostModule.parse))  # type: ignore[method-assign]
    valueflow.build_model_flow = _wrap(spent, "value flow", valueflow.build_model_flow)
    builder.build_cuda_facts = _wrap(spent, "C++ facts", builder.build_cuda_facts)
    reference.build_reference_facts = _wrap(spent, "reference facts", reference.build_reference_facts)


def _floors(records: list[tuple[str, str]], repeat: int) -> tuple[float, float]:
    from hackscan.python.module import HostModule

    units = []
    for code, _ in records:
        try:
            units += [u.text for u in HostModule.parse(code, "<floor>").units if u.language in ("cuda", "cpp")]
        except (SyntaxError, ValueError):
            pass
    gc.disable()  # as a scan runs (``engine.scan_gc``): a parse with the collector on costs half as much again
    try:
        return _timed_floors(records, units, repeat)
    finally:
        gc.enable()


def _timed_floors(records: list[tuple[str, str]], units: list[str], repeat: int) -> tuple[float, float]:
    from hackscan.cuda.parser import parse as ts_parse

    best_ast = best_ts = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for code, _ in records:
            try:
                ast.parse(code)
            except SyntaxError:
                pass
        best_ast = min(best_ast, time.process_time() - t0)
        t0 = time.process_time()
        for text in units:
            ts_parse(text)
        best_ts = min(best_ts, time.process_time() - t0)
    return best_ast / len(records), best_ts / len(records)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT))
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="timed passes over the records")
    args = ap.parse_args()
    path = Path(args.corpus)
    if not path.is_file():
        print(f"gate_phases: error: no corpus at {path}", file=sys.stderr)
        return 2
    records = _records(path, args.limit)
    if not records:
        print(f"gate_phases: error: no records with code in {path}", file=sys.stderr)
        return 2
    spent: dict[str, Counter] = {"cold": Counter(), "warm": Counter()}
    total = {"cold": 0.0, "warm": 0.0}
    scanners = {"cold": Scanner(mode="gate"), "warm": Scanner(mode="gate", reference_cache_size=len(records))}
    for code, ref in records:  # warm-up: imports, rules, tree-sitter queries, the warm scanner's cache
        for s in scanners.values():
            s.scan(code, ref)
    live: Counter = Counter()
    _instrument(live)
    repeat = max(1, args.repeat)
    for _ in range(repeat):
        for code, ref in records:  # the two alternate record by record: the same load for each
            for name, s in scanners.items():
                live.clear()
                t0 = time.process_time()
                s.scan(code, ref)
                total[name] += time.process_time() - t0
                spent[name].update(live)
    n = repeat * len(records)
    ast_floor, ts_floor = _floors(records, repeat)
    print(f"static gate by phase, {len(records)} records x {repeat}, CPU time per sample (ms and share):")
    print(f"  {'phase':<18}{'cold':>16}{'warm':>16}")
    for phase in (*PHASES, "the rest"):
        cells = []
        for name in ("cold", "warm"):
            v = total[name] - sum(spent[name].values()) if phase == "the rest" else spent[name][phase]
            cells.append(f"{v / n * 1e3:8.3f} {100 * v / total[name]:5.1f}%")
        print(f"  {phase:<18}" + "".join(f"{c:>16}" for c in cells))
    print(f"  {'total':<18}" + "".join(f"{total[k] / n * 1e3:8.3f} {'':>6}" for k in ("cold", "warm")))
    print(f"  floors, measured alone: ast.parse of the candidates {ast_floor * 1e3:.3f} ms, tree-sitter parse of "
          f"their C++ units {ts_floor * 1e3:.3f} ms per sample")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
