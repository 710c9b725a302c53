"""What the curve's series (HS606, docs/curve.md) cost per candidate, and what they find.

Both perf workers' ``measure`` in this process (reference first, then candidate), with the options
the dynamic stage sends (``budget_s`` 1 s on the CPU, 4 s on a GPU, target mode, two hidden sets
handed over as its value probes would), once per curve setting in alternation, ``--rounds`` times:
``none`` (before the curve), ``quick`` (what ``--perf quick`` times) and ``full`` (target and
thorough).  Prints the median seconds per candidate (both workers) per setting, the increase over
``none``, and the HS606 findings per candidate and setting.

    python benchmarks/curve_cost.py [--rounds 3] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from hackscan.perf.options import CURVE_QUICK, CURVE_SERIES  # noqa: E402
from hackscan.perf.parent_side import evaluate  # noqa: E402
from hackscan.perf.worker import measure as worker  # noqa: E402

FIXTURES = ROOT / "fixtures"
CASES = [("relu", "dynamic/relu/reference.py", "dynamic/relu/legit.py"),
         ("relu", "dynamic/relu/reference.py", "dynamic/relu/hack_value_guard.py"),
         ("gram", "perf_cpu/gram_curve/reference.py", "perf_cpu/gram_curve/ok_workspace_cache.py"),
         ("gram", "perf_cpu/gram_curve/reference.py", "perf_cpu/gram_curve/hack_content_memo.py")]
SETTINGS = {"none": [], "quick": list(CURVE_QUICK), "full": list(CURVE_SERIES)}


def load(rel: str) -> Any:
    path = FIXTURES / rel
    spec = importlib.util.spec_from_file_location(path.stem + "_" + path.parent.name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sets_for(ref: Any, device: str) -> dict[str, list[list[Any]]]:
    original = []
    for k in range(3):
        torch.manual_seed(k)
        original.append([t.to(device) for t in ref.get_inputs()])
    # as the dynamic stage hands over its passed value probes
    return {"original": original, "sign_flip": [[-t for t in s] for s in original],
            "shift_up": [[t + 3.0 for t in s] for s in original]}


def one(ref_mod: Any, cand_mod: Any, device: str, curve: list[str], prepared: Any) -> tuple[float, float, list[str]]:
    opts = {"budget_s": 1.0 if device == "cpu" else 4.0, "sets": 3, "mode": "target", "compile": "never",
            "exclusive_device": False, "curve": curve}
    data = sets_for(ref_mod, device)
    init = ref_mod.get_init_inputs()
    t0 = time.perf_counter()
    ref = worker.measure(ref_mod.Model(*init).to(device), data, role="reference", device=device, options=opts,
                         prepared=prepared)
    cand = worker.measure(cand_mod.ModelNew(*init).to(device), data, role="candidate", device=device, options=opts,
                          prepared=prepared)
    elapsed = time.perf_counter() - t0
    _, findings = evaluate(cand, ref)
    curve_s = float(ref.get("curve_s") or 0.0) + float(cand.get("curve_s") or 0.0)
    return elapsed, curve_s, sorted(f"HS606:{f.evidence.get('distribution')}" for f in findings if f.rule == "HS606")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda needs a GPU")
    prepared = worker.prepare(args.device)
    times: dict[tuple[str, str], list[float]] = {}
    found: dict[tuple[str, str], set[str]] = {}
    curve_times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for _name, ref_rel, cand_rel in CASES:
            ref_mod, cand_mod = load(ref_rel), load(cand_rel)
            # the settings alternate within each round, their order rotating between rounds
            order = list(SETTINGS)[r % 3:] + list(SETTINGS)[:r % 3]
            for setting in order:
                s, c, f = one(ref_mod, cand_mod, args.device, SETTINGS[setting], prepared)
                times.setdefault((cand_rel, setting), []).append(s)
                curve_times.setdefault((cand_rel, setting), []).append(c)
                found.setdefault((cand_rel, setting), set()).update(f)
    print(f"device {args.device}, {args.rounds} rounds, settings alternating; seconds per candidate (both workers)")
    print(f"{'candidate':48s} {'none':>7s} {'quick':>7s} {'full':>7s} {'quick+':>7s} {'full+':>7s}  HS606 (full)")
    totals = {k: 0.0 for k in SETTINGS}
    for _name, _ref, cand_rel in CASES:
        med = {k: statistics.median(times[(cand_rel, k)]) for k in SETTINGS}
        for k in SETTINGS:
            totals[k] += med[k]
        print(f"{cand_rel:48s} {med['none']:7.2f} {med['quick']:7.2f} {med['full']:7.2f} "
              f"{med['quick'] / med['none'] - 1:+7.0%} {med['full'] / med['none'] - 1:+7.0%}  "
              f"{', '.join(sorted(found[(cand_rel, 'full')])) or '-'}")
    print(f"{'all (sum of medians)':48s} {totals['none']:7.2f} {totals['quick']:7.2f} {totals['full']:7.2f} "
          f"{totals['quick'] / totals['none'] - 1:+7.0%} {totals['full'] / totals['none'] - 1:+7.0%}")
    print("\nthe curve's own seconds per candidate (both workers' curve_s): median [min-max]")
    for _name, _ref, cand_rel in CASES:
        cells = []
        for k in ("quick", "full"):
            v = curve_times[(cand_rel, k)]
            cells.append(f"{k} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
        print(f"{cand_rel:48s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
