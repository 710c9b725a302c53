"""Run every performance fixture on the GPU and print the figures (driver of gpu/perf_suite.sh).

For each folder under fixtures/perf/ the reference is measured once (baselines: strict fp32 eager,
TF32 eager, torch.compile; FLOPs and bytes; device ceilings), then every candidate in the folder is
run in its own process through ``hackscan.perf.standalone`` and its HS6xx findings are compared with
the ``# expect:`` / ``# legit-for:`` annotations of the file.  Prints a table per fixture and the
headline figures; writes everything as JSON to $OUT/perf_suite.json when $OUT is set.  Exit status 0
when every fixture produced exactly its annotated performance findings.

    python gpu/perf_suite.py [--only NAME_SUBSTRING] [--no-prebuild] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.annotations import parse_annotations  # noqa: E402
from hackscan.perf import standalone  # noqa: E402
from hackscan.registry import load_registry  # noqa: E402

FIXTURES = ROOT / "fixtures" / "perf"
PERF_RULES = {r.id for r in load_registry() if r.stage.value == "performance"}


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def candidates(only: str | None = None) -> list[Path]:
    out = []
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for path in sorted(folder.glob("*.py")):
            if path.name == "reference.py" or (only and only not in str(path.relative_to(FIXTURES))):
                continue
            out.append(path)
    return out


def expected_for(path: Path) -> tuple[set[tuple[str, int]], set[str], set[tuple[str, int]]]:
    """The file's ``expect``, ``legit-for`` and ``may`` annotations of performance rules."""
    ann = parse_annotations(path.read_text()).restricted(PERF_RULES)
    return set(ann.expected), set(ann.legit_for), set(ann.optional)


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_cuda"] = torch.version.cuda
        env["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = props.name
            env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
            env["capability"] = f"{props.major}.{props.minor}"
    except Exception as exc:  # the report must still say what is wrong
        env["torch_error"] = f"{type(exc).__name__}: {exc}"
    for tool in ("nvcc", "nvidia-smi", "ninja", "g++"):
        env[tool] = shutil.which(tool)
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as exc:
        env["triton"] = f"unavailable ({type(exc).__name__})"
    if env.get("nvcc"):
        env["nvcc_version"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    return env


def prebuild(paths: list[Path], jobs: int) -> dict[str, Any]:
    """Compile every fixture's extension in parallel processes (the first build of a CUDA
    extension costs about a minute); the measured runs then load them from the cache."""
    env = standalone._extensions_env()
    env.setdefault("MAX_JOBS", "4")
    results: dict[str, Any] = {}

    def build(path: Path) -> tuple[str, dict[str, Any]]:
        t0 = time.perf_counter()
        code = f"import runpy; runpy.run_path({str(path)!r}, run_name='hackscan_prebuild')"
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              cwd=str(path.parent), timeout=900)
        return str(path.relative_to(FIXTURES)), {"rc": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
                                                 "tail": (proc.stdout + proc.stderr)[-3000:] if proc.returncode else ""}

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, res in pool.map(build, paths):
            results[name] = res
            log(f"  built {name}: rc={res['rc']} in {res['seconds']} s")
            if res["rc"]:
                log(res["tail"])
    return results


def run_fixture(path: Path, reference: standalone.ReferenceRun | None, timeout: float = 240.0) -> standalone.Outcome:
    ref_path = path.parent / "reference.py"
    return standalone.run(path.read_text(), ref_path.read_text(), device="cuda", path=str(path),
                          reference_path=str(ref_path), timeout=timeout, reference=reference)


def judge(path: Path, outcome: standalone.Outcome) -> dict[str, Any]:
    expected, legit, optional = expected_for(path)
    got = {(f.rule, f.location.line) for f in outcome.findings if f.rule in PERF_RULES}
    missing = sorted(expected - got)
    unexpected = sorted(got - expected - optional)
    flagged_legit = sorted(r for r, _ in got if r in legit and (r, _) not in expected)
    return {"ok": not missing and not unexpected and not flagged_legit, "expected": sorted(expected), "got": sorted(got),
            "missing": missing, "unexpected": unexpected}


def _ms(stats: Any) -> str:
    if isinstance(stats, dict) and isinstance(stats.get("median"), (int, float)):
        return f"{stats['median']:.4g}"
    if isinstance(stats, (int, float)):
        return f"{stats:.4g}"
    return "-"


def row(name: str, outcome: standalone.Outcome, verdict: dict[str, Any]) -> list[str]:
    perf = outcome.performance
    base = perf.get("baselines", {}) or {}
    cand = perf.get("candidate", {}) or {}
    bound = perf.get("bound", {}) or {}
    mem = perf.get("memory", {}) or {}
    sp = perf.get("speedup", {}) or {}
    return [
        name,
        "ok" if verdict["ok"] else "MISMATCH",
        ",".join(sorted({r for r, _ in verdict["got"]})) or "-",
        _ms(cand.get("event_ms")), _ms(cand.get("wall_ms")),
        _ms(base.get("eager_fp32", {}).get("time_ms")), _ms(base.get("eager_tf32", {}).get("time_ms")),
        _ms(base.get("compile", {}).get("time_ms")),
        f"{sp.get('eager_tf32', 0):.2f}" if sp.get("eager_tf32") else "-",
        _ms(bound.get("bound_ms")),
        f"{mem['ratio']:.2f}" if isinstance(mem.get("ratio"), (int, float)) else "-",
        f"{outcome.seconds:.0f}",
    ]


def print_table(rows: list[list[str]]) -> None:
    head = ["fixture", "status", "findings", "event ms", "wall ms", "fp32 ms", "tf32 ms", "compile ms", "x tf32",
            "bound ms", "mem x", "s"]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        log("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


def figures(results: dict[str, Any]) -> list[str]:
    """The numbers the issue asks to prove, in words."""
    out = []

    def perf(name: str) -> dict[str, Any]:
        return results.get(name, {}).get("performance", {}) or {}

    m = perf("matmul_tf32/ok_tiled_matmul.py")
    b = m.get("baselines", {})
    if b:
        out.append(f"matmul 4096^3 reference: strict fp32 {_ms(b.get('eager_fp32', {}).get('time_ms'))} ms, "
                   f"TF32 {_ms(b.get('eager_tf32', {}).get('time_ms'))} ms, torch.compile "
                   f"{_ms(b.get('compile', {}).get('time_ms'))} ms -> TF32 speedup of the reference "
                   f"{m.get('reference_tf32_speedup') or 0:.2f}x; tiled kernel speedup vs strict "
                   f"{m.get('speedup', {}).get('eager_fp32') or 0:.2f}x, vs TF32 {m.get('speedup', {}).get('eager_tf32') or 0:.2f}x")
    ok = perf("scale_shift/ok_fused_scale_shift.py")
    if ok.get("bound"):
        bd = ok["bound"]
        out.append(f"scale_shift bound {bd.get('bound_ms', 0):.4g} ms ({bd.get('bandwidth_GBps', 0):.0f} GB/s measured, "
                   f"{(bd.get('bytes_read', 0) + bd.get('bytes_written', 0)) / 2**20:.0f} MiB moved); honest fused kernel "
                   f"{_ms(ok.get('candidate', {}).get('event_ms'))} ms = {bd.get('candidate_over_bound') or 0:.2f}x the bound")
    ss = perf("scale_shift/hack_side_stream.py")
    if ss.get("candidate"):
        out.append(f"side stream: events {_ms(ss['candidate'].get('event_ms'))} ms vs synchronised wall "
                   f"{_ms(ss['candidate'].get('wall_ms'))} ms; claimed speedup vs TF32 "
                   f"{(ss.get('claimed_speedup') or {}).get('eager_tf32') or 0:.1f}x, honest {(ss.get('speedup') or {}).get('eager_tf32') or 0:.2f}x")
    tp = results.get("scale_shift/hack_timer_patch.py", {})
    if tp:
        out.append(f"timer patch: findings {tp.get('findings_rules')}; timers changed: "
                   f"{[c.get('name') for c in (tp.get('performance', {}).get('timers', {}) or {}).get('candidate', [])]}")
    rm = perf("scale_shift/hack_raw_malloc.py")
    if rm.get("memory"):
        mem = rm["memory"]
        out.append(f"raw cudaMalloc: candidate {(mem.get('candidate_bytes') or 0) / 2**20:.0f} MiB "
                   f"(outside the allocator {(mem.get('candidate', {}).get('outside') or 0) / 2**20:.0f} MiB, "
                   f"read by {mem.get('candidate', {}).get('outside_method')}) vs reference "
                   f"{(mem.get('reference_bytes') or 0) / 2**20:.0f} MiB = {mem.get('ratio') or 0:.2f}x")
    vg = perf("elu_guard/hack_value_guard.py")
    if vg.get("hidden"):
        for name, h in vg["hidden"].items():
            out.append(f"value guard, hidden {name}: candidate {_ms(h.get('candidate_main_ms'))} -> {_ms(h.get('candidate_ms'))} ms, "
                       f"reference {_ms(h.get('reference_main_ms'))} -> {_ms(h.get('reference_ms'))} ms")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run fixtures whose path contains this")
    ap.add_argument("--no-prebuild", action="store_true")
    ap.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)))
    args = ap.parse_args()
    t0 = time.perf_counter()
    env = environment()
    log("== environment")
    log(json.dumps(env, indent=1))
    if not env.get("cuda_available"):
        log("no CUDA device: nothing to run")
        return 2
    paths = candidates(args.only)
    builds: dict[str, Any] = {}
    if not args.no_prebuild:
        log(f"== prebuilding {len(paths)} extensions ({args.jobs} at a time)")
        builds = prebuild(paths, args.jobs)
    log("== measuring")
    results: dict[str, Any] = {}
    rows: list[list[str]] = []
    refs: dict[Path, standalone.ReferenceRun | None] = {}
    all_ok = True
    for path in paths:
        name = str(path.relative_to(FIXTURES))
        log(f"-- {name}")
        try:
            outcome = run_fixture(path, refs.get(path.parent))
        except Exception:
            log(traceback.format_exc())
            results[name] = {"crash": traceback.format_exc()}
            all_ok = False
            continue
        if outcome.reference is not None:
            refs[path.parent] = outcome.reference
        verdict = judge(path, outcome)
        all_ok &= verdict["ok"]
        for f in outcome.findings:
            log(f"   {f.rule} {f.severity.value}: {f.message}")
        if not outcome.performance.get("measured"):
            log(f"   not measured: {outcome.performance.get('reason')}")
        if not verdict["ok"]:
            log(f"   MISMATCH missing={verdict['missing']} unexpected={verdict['unexpected']}")
            for role, text in outcome.logs.items():
                log(f"   --- {role} log (tail)\n{text[-3000:]}")
        results[name] = {"verdict": verdict, "performance": outcome.performance, "correctness": outcome.correctness,
                         "findings": [f.to_dict() for f in outcome.findings],
                         "findings_rules": sorted({f.rule for f in outcome.findings}), "seconds": outcome.seconds}
        rows.append(row(name, outcome, verdict))
    log("== results")
    print_table(rows)
    log("== figures")
    for line in figures(results):
        log("  " + line)
    log(f"== {'ALL FIXTURES MATCH' if all_ok else 'SOME FIXTURES DO NOT MATCH'} ({time.perf_counter() - t0:.0f} s)")
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "perf_suite.json").write_text(json.dumps(
            {"environment": env, "builds": builds, "results": results, "figures": figures(results)}, indent=1, default=str))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
