"""What the dynamic stage costs per candidate, phase by phase and probe by probe.

    python benchmarks/dynamic_cost.py                 # the three built-in level-1-sized tasks
    python benchmarks/dynamic_cost.py --task relu --repeat 3
    python benchmarks/dynamic_cost.py --candidate my.py --reference ref.py
    python benchmarks/dynamic_cost.py --task relu --sandbox required   # only sandboxed (default: both)

For each task an honest candidate runs twice through ``run_dynamic_stage``: once with a fresh
worker pool ("cold": the zygote's ``import torch`` included) and then warm (the zygote reused, as
for every candidate after the first in a run).  The target is at most 3 s beyond compilation for a
level-1-sized CPU candidate.  Timings are wall clock on whatever else the machine is doing: run it
on a quiet machine, or compare the ``cpu_s`` column, which counts only this process tree's CPU.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS = {
    # KernelBench level 1 #19 (ReLU) and #23 (Softmax) at their sizes; a square matmul
    "relu": ("torch.relu(x)", "torch.clamp(x, min=0.0)", "x = torch.randn(batch_size, dim)",
             {"batch_size": 16, "dim": 16384}, "x"),
    "softmax": ("torch.softmax(x, dim=1)", "torch.exp(x - x.amax(1, keepdim=True)) / "
                "torch.exp(x - x.amax(1, keepdim=True)).sum(1, keepdim=True)",
                "x = torch.randn(batch_size, dim)", {"batch_size": 16, "dim": 16384}, "x"),
    "matmul": ("torch.matmul(A, B)", "torch.mm(A.contiguous(), B.contiguous())",
               "A = torch.randn(N, N)\n    B = torch.randn(N, N)", {"N": 1024}, "A, B"),
}


def _task_files(name: str, folder: Path) -> tuple[Path, Path]:
    ref_op, cand_op, draw, consts, args = TASKS[name]
    const_text = "\n".join(f"{k} = {v}" for k, v in consts.items())
    returned = "[" + args + "]"
    ref = textwrap.dedent(f"""\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, {args}):
        return {ref_op}


{const_text}


def get_inputs():
    {draw}
    return {returned}


def get_init_inputs():
    return []
""")
    cand = textwrap.dedent(f"""\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, {args}):
        return {cand_op}
""")
    (folder / f"{name}_ref.py").write_text(ref)
    (folder / f"{name}_cand.py").write_text(cand)
    return folder / f"{name}_cand.py", folder / f"{name}_ref.py"


def _cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _start_times(n: int, start_one) -> list[float]:
    """Seconds for each of ``n`` calls of ``start_one()``, which starts a worker, waits until it can
    answer, and returns a function that stops it (not timed)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        stop = start_one()
        times.append(time.perf_counter() - t0)
        stop()
    return times


def worker_startup(n: int) -> None:
    """What one worker costs to start, not overlapped with anything: a sandboxed one (a fresh
    interpreter in bubblewrap, importing torch and the worker code, until it says it is ready) and a
    fork of the unsandboxed forkserver (until it answers a ping)."""
    from hackscan.dynamic import sandbox
    from hackscan.dynamic.pool import Zygote

    print("\n== worker start-up (one worker, nothing else running)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if not sandbox.check().get("problem"):
            la = sandbox.Launcher("cpu", Path(tmp), warm=False)

            def sandboxed():
                h = la._start()
                la._wait_ready(h, 120)
                return h.destroy

            try:
                rows.append(("sandboxed (bwrap, fresh interpreter)", _start_times(n, sandboxed)))
            finally:
                la.close()
        z = Zygote("cpu", Path(tmp))

        def forked():
            s = z.spawn({"role": "reference", "path": "r.py", "device": "cpu"}, timeout=60)
            s.request({"cmd": "ping"})
            return s.close

        try:
            rows.append(("forked from the forkserver (--sandbox off)", _start_times(n, forked)))
        finally:
            z.close()
    print(f"{'worker':<42} {'min_s':>7} {'median_s':>9}")
    for name, times in rows:
        print(f"{name:<42} {min(times):>7.3f} {sorted(times)[len(times) // 2]:>9.3f}")


def measure(candidate: Path, reference: Path, repeat: int, budget: float | None, sandbox: str = "required") -> None:
    from hackscan.config import Config
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import Submission
    from hackscan.pipeline import RunOptions

    sub = Submission(path=str(candidate), code=candidate.read_text(), file=str(candidate),
                     reference=reference.read_text(), reference_path=str(reference))
    static = StaticScanner(Config()).scan(sub)
    extra = {"dynamic": {"budget_s": budget}} if budget else {}
    pool = WorkerPool(sandbox=sandbox)
    rows = []
    try:
        for i in range(repeat + 1):
            label = "cold" if i == 0 else f"warm {i}"
            cpu0, t0 = _cpu_seconds(), time.perf_counter()
            rep = run_dynamic_stage(sub, static, RunOptions(seed=11 + i, perf=False, timeout=300, extra=extra), Config(),
                                    pool=pool)
            wall = time.perf_counter() - t0
            dyn = rep.dynamic or {}
            tm = dyn.get("timings", {})
            compile_s = tm.get("compile_s", 0.0)
            rows.append((label, wall, wall - compile_s, _cpu_seconds() - cpu0, tm, dyn))
    finally:
        pool.close()
    print(f"\n== {candidate.name} against {reference.name} (--sandbox {sandbox})")
    phases = ["startup_s", "preload_s", "reference_load_s", "reference_probes_s", "candidate_load_s", "compile_s",
              "candidate_probes_s", "total_s"]
    print(f"{'run':<8} {'wall_s':>8} {'-compile':>9} {'cpu_s':>7} " + " ".join(f"{p[:-2]:>17}" for p in phases))
    for label, wall, beyond, cpu, tm, _dyn in rows:
        print(f"{label:<8} {wall:>8.2f} {beyond:>9.2f} {cpu:>7.2f} " +
              " ".join(f"{tm.get(p, 0.0):>17.3f}" for p in phases))
    dyn = rows[-1][5]
    if not dyn.get("ran"):
        print("   not run:", dyn.get("reason"))
        return
    print(f"\n{'probe':<22} {'family':<10} {'status':<8} {'ref_s':>8} {'cand_s':>8} {'call_ms':>8}  input")
    for p in dyn.get("probes", []):
        cost = p.get("cost_s", {})
        call = p.get("seconds")
        print(f"{p['id']:<22} {p['family']:<10} {p['status']:<8} {cost.get('reference', 0.0):>8.4f} "
              f"{cost.get('candidate', 0.0):>8.4f} {(call or 0.0) * 1e3:>8.2f}  {p['input'][:60]}")
    for row in dyn.get("integrity", []):
        print(f"{'integrity:' + row['kind']:<22} {'':<10} {str(row.get('status'))[:8]:<8} {'':>8} "
              f"{row.get('cost_s', 0.0):>8.4f}")
    for s in dyn.get("skipped", []):
        print(f"{s['probe']:<22} skipped: {s['reason']}")
    ref = dyn.get("reference", {})
    print(f"\nreference call: fp32 {1e3 * (ref.get('t32') or 0):.2f} ms, fp64 {1e3 * (ref.get('t64') or 0):.2f} ms; "
          f"estimate {dyn.get('estimate_s')} s of {dyn.get('budget_s')} s budget")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), action="append")
    ap.add_argument("--candidate", type=Path)
    ap.add_argument("--reference", type=Path)
    ap.add_argument("--repeat", type=int, default=1, help="warm runs after the cold one")
    ap.add_argument("--budget", type=float, default=None, help="probe budget in seconds (default: the rule option)")
    ap.add_argument("--sandbox", choices=("required", "off", "both"), default="both",
                    help="run candidates sandboxed, unsandboxed, or both one after the other (default)")
    ap.add_argument("--startup", type=int, default=3, help="worker start-ups to time (0: skip)")
    args = ap.parse_args()
    modes = ("required", "off") if args.sandbox == "both" else (args.sandbox,)
    if args.startup:
        worker_startup(args.startup)
    if args.candidate:
        if not args.reference:
            ap.error("--candidate needs --reference")
        for mode in modes:
            measure(args.candidate, args.reference, args.repeat, args.budget, mode)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.task or sorted(TASKS):
            cand, ref = _task_files(name, Path(tmp))
            for mode in modes:
                measure(cand, ref, args.repeat, args.budget, mode)


if __name__ == "__main__":
    main()
