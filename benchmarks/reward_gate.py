#!/usr/bin/env python3
"""The reward gate's latency: the static gate per sample, against KernelGuard on the same samples,
and the full verification per candidate with a warm ``Verifier``.

    python benchmarks/reward_gate.py [CORPUS.jsonl] [--limit N] [--dynamic N] [--device cpu|cuda]

Static gate: ``Scanner(mode="gate").scan(code, reference)`` per record, the way a training loop
calls it, after one warm-up pass over the records (imports, rule loading and tree-sitter query
compilation paid once, as in a long-running loop).  KernelGuard (``pip install kernelguard``;
``kernelguard.analyze_code(code)``, its per-sample API, without its structural hash as its own bulk
mode runs it) is timed on the same records in the same run, the two alternating record by record
so that both see the same machine load.  Printed: p50 / p99 / mean per sample in wall time and in
CPU time, samples per second, and the ratio of the two throughputs (CPU time is the fair figure
on a shared machine: wall time counts other jobs' turns).

Full verification (``--dynamic N``): N candidates through one ``Verifier(perf="quick")`` after a
warm-up candidate (worker server and build farm started, as in a training loop that has run one
step): per-candidate wall time p50 / p99 / mean and the verdicts.  On a GPU (``--device cuda``) the
candidates are the corpus's first N records; on the CPU the corpus's CUDA kernels cannot run, so
they are the pure-PyTorch fixtures of fixtures/dynamic (no compile), and the gate leaves the
no-kernel class out so that the accepted ones are timed as accepted kernels are on a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan import Scanner  # noqa: E402

DEFAULT = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _row(name: str, wall: list[float], cpu: list[float]) -> str:
    ms = 1e3
    return (f"  {name:<12} wall p50 {_pct(wall, .5) * ms:7.2f} ms  p99 {_pct(wall, .99) * ms:7.2f} ms  "
            f"mean {statistics.fmean(wall) * ms:7.2f} ms | cpu p50 {_pct(cpu, .5) * ms:7.2f} ms  "
            f"p99 {_pct(cpu, .99) * ms:7.2f} ms  mean {statistics.fmean(cpu) * ms:7.2f} ms | "
            f"{len(cpu) / sum(cpu):7.1f} samples/s (cpu)")


def _records(path: Path, limit: int | None) -> list[tuple[str, str]]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            code = rec.get("custom_code")
            if isinstance(code, str) and code.strip() not in ("", "None"):
                out.append((code, rec.get("ref_code") or ""))
            if limit is not None and len(out) >= limit:
                break
    return out


def static_gate(records: list[tuple[str, str]], repeat: int) -> None:
    try:
        import kernelguard
    except ImportError:
        kernelguard = None
        print("kernelguard is not installed (pip install kernelguard): hackscan alone is timed")
    # cold: the default scanner keeps the last 8 references, so each record's reference is parsed
    # and analysed again; warm: the Verifier's cache holds the task set, as from a training loop's
    # second step on (a GRPO group shares its reference, every epoch repeats the tasks)
    from hackscan.rl.verifier import REFERENCE_CACHE

    cold, warm = Scanner(mode="gate"), Scanner(mode="gate", reference_cache_size=max(REFERENCE_CACHE, len(records)))
    for code, ref in records:  # warm-up: imports, rules, tree-sitter queries
        cold.scan(code, ref)
        warm.scan(code, ref)
        if kernelguard is not None:
            kernelguard.analyze_code(code, compute_structural_hash=False)
    t: dict[str, tuple[list[float], list[float]]] = {"hackscan cold": ([], []), "hackscan warm": ([], []),
                                                      "KernelGuard": ([], [])}

    def timed(name: str, fn, *args, **kw) -> None:
        w0, c0 = time.perf_counter(), time.process_time()
        fn(*args, **kw)
        t[name][0].append(time.perf_counter() - w0)
        t[name][1].append(time.process_time() - c0)

    for _ in range(repeat):
        for code, ref in records:  # the three alternate record by record: the same load for each
            timed("hackscan cold", cold.scan, code, ref)
            timed("hackscan warm", warm.scan, code, ref)
            if kernelguard is not None:
                timed("KernelGuard", kernelguard.analyze_code, code, compute_structural_hash=False)
    print(f"static gate, {len(records)} records x {repeat} (per sample, after a warm-up pass; reference cold = "
          "analysed again for each record, warm = kept from an earlier step):")
    for name, (wall, cpu) in t.items():
        if cpu:
            print(_row(name, wall, cpu))
    if kernelguard is not None:
        kg_wall, kg_cpu = t["KernelGuard"]
        for name in ("hackscan cold", "hackscan warm"):
            wall, cpu = t[name]
            print(f"  throughput {name} / KernelGuard: {sum(kg_cpu) / sum(cpu):.1f}x in CPU time, "
                  f"{sum(kg_wall) / sum(wall):.1f}x in wall time (p50 {_pct(kg_cpu, .5) / _pct(cpu, .5):.1f}x, "
                  f"p99 {_pct(kg_cpu, .99) / _pct(cpu, .99):.1f}x in CPU time)")


def _fixture_candidates() -> list[tuple[str, str]]:
    """Pure-PyTorch candidates of fixtures/dynamic with their references (nothing to compile)."""
    out = []
    for ref in sorted((ROOT / "fixtures" / "dynamic").glob("*/reference.py")):
        for cand in sorted(ref.parent.glob("*.py")):
            text = cand.read_text()
            if cand.name == "reference.py" or any(w in text for w in ("load_inline", "cpp_extension", "triton")):
                continue
            out.append((text, ref.read_text()))
    return out


def full_verification(n: int, device: str, records: list[tuple[str, str]], jobs: int) -> None:
    import hackscan

    candidates = records[: n + 1] if device != "cpu" else _fixture_candidates()[: n + 1]
    if len(candidates) < 2:
        print("full verification: not enough candidates")
        return
    t0 = time.perf_counter()
    # on the CPU the candidates are pure PyTorch: a gate that rejected no-kernel would time none of
    # them (--perf quick leaves a rejected candidate untimed), so there it rejects the other classes
    gate = ("gaming", "integrity", "precision", "task", "meta") if device == "cpu" else None
    with hackscan.Verifier(device=device, perf="quick", jobs=jobs, reject_classes=gate) as v:
        warm = v.verify(*candidates[0])
        t_warm = time.perf_counter() - t0
        times: list[float] = []
        verdicts: dict[str, int] = {}
        t1 = time.perf_counter()
        futures = []
        for code, ref in candidates[1:]:
            futures.append((time.perf_counter(), v.submit(code, ref)))
        for start, f in futures:
            r = f.result()
            times.append(time.perf_counter() - start)
            key = f"{r.verdict}{'' if r.accepted else ' (rejected)'}"
            verdicts[key] = verdicts.get(key, 0) + 1
        batch = time.perf_counter() - t1
    print(f"full verification (--perf quick, device {device}, jobs {jobs}), {len(futures)} candidates after a "
          f"warm-up candidate ({t_warm:.1f} s, {warm.verdict}):")
    if jobs == 1:
        # one at a time: a candidate's latency is its own run plus the queue before it; its cost is the gap
        ends = sorted(times)
        per = [b - a for a, b in zip([0.0, *ends[:-1]], ends, strict=True)]
    else:
        per = times
    print(f"  per candidate: p50 {_pct(per, .5):.1f} s  p99 {_pct(per, .99):.1f} s  mean {statistics.fmean(per):.1f} s; "
          f"batch {batch:.1f} s = {batch / len(futures):.1f} s per candidate")
    print("  verdicts: " + ", ".join(f"{k} {c}" for k, c in sorted(verdicts.items())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", default=str(DEFAULT))
    ap.add_argument("--limit", type=int, default=None, help="the first N records of the corpus")
    ap.add_argument("--repeat", type=int, default=1, help="timed passes over the records")
    ap.add_argument("--dynamic", type=int, default=0, metavar="N", help="also verify N candidates fully")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    path = Path(args.corpus)
    if not path.is_file():
        sys.exit(f"reward_gate: error: no corpus at {path}")
    records = _records(path, args.limit)
    if not records:
        sys.exit(f"reward_gate: error: no records with code in {path}")
    static_gate(records, max(1, args.repeat))
    if args.dynamic > 0:
        full_verification(args.dynamic, args.device, records, args.jobs)


if __name__ == "__main__":
    main()
