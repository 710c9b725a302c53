#!/usr/bin/env python3
"""The rule units decide what the inlined code they replaced decided: old against new, same facts.

    python benchmarks/units_unchanged.py [--base b1fe58a] [--scenarios 1500] [--perf]

Judge: ``--scenarios`` random synthetic runs (probe records of every family and status, every
integrity check with right, wrong, stale, NaN and decoy outputs, raised and unanswered checks, an
op census, global changes) go through ``hackscan/dynamic/judge.py`` as of ``--base`` and as now;
the findings (rule, message, evidence, severity, confidence), the integrity rows, the records and
the global changes must be identical.  ``--perf``: every ``parent_side.evaluate`` call the
performance and confirm tests make is replayed through the ``--base`` version too (a pytest
plugin wraps it); the performance blocks and findings must be identical.  Prints one row per part
with the rules that fired, exits 1 on the first difference.  The base's files are read with
``git show`` and loaded beside the current package, so the base must be a commit whose
``judge.py`` / ``parent_side.py`` import what the current tree still has.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from hackscan.dynamic import judge as new_judge  # noqa: E402
from hackscan.dynamic.compare import Tolerance  # noqa: E402
from hackscan.model import Confidence, Finding, Location, Severity, Stage  # noqa: E402

# the probe families' rules, as the base's shared/probes.py held them before the units took them over
FAMILY_RULES = ('{"original": "HS401", "value": "HS402", "magnitude": "HS403", "shape": "HS404", '
                '"layout": "HS405", "params": "HS407"}')
FAMS = ["original", "original", "value", "magnitude", "shape", "layout", "params"]


def base_module(base: str, path: str, name: str, folder: Path):
    text = subprocess.run(["git", "show", f"{base}:{path}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    text = text.replace("from .shared.probes import FAMILY_RULES", f"FAMILY_RULES = {FAMILY_RULES}")
    file = folder / Path(path).name
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(name, file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _maker(out: list):
    def make(rule, message, evidence=None, severity=None, confidence=None, stage="dynamic"):
        out.append((rule, message, repr(evidence), severity, confidence))
        return Finding(rule=rule, name=rule.lower(), severity=severity or Severity.WARNING,
                       confidence=confidence or Confidence.MEDIUM, message=message, location=Location("c.py", 5, 1),
                       stage=Stage.DYNAMIC, evidence=evidence or {})
    return make


def _out(rng, base, kind):
    return {"pass": lambda: base.astype(np.float32),
            "half": lambda: (base + rng.normal(0, 2e-4, base.shape)).astype(np.float32),
            "wrong": lambda: (base * 2 + 1).astype(np.float32),
            "nan": lambda: np.full(base.shape, np.nan, np.float32),
            "decoy": lambda: np.full(base.shape, 1234.5, np.float32),
            "inf": lambda: np.full(base.shape, np.inf, np.float32)}[kind]()


def scenario(seed: int):
    rng, r = np.random.default_rng(seed), random.Random(seed)
    refs, cands, specs, ids = {}, {}, {}, []
    for k in range(r.randint(1, 8)):
        fam = "original" if k == 0 else r.choice(FAMS)
        pid = f"{fam}_{k}" if k else "original"
        ids.append(pid)
        base = rng.uniform(0.5, 2, 32) * r.choice([1, 1e3])
        refs[pid] = {"skipped": "no"} if r.random() < 0.1 else {"out32": [base.astype(np.float32)], "out64": [base],
                                                                 "structure": "T"}
        specs[pid] = {"id": pid, "family": fam, "description": f"d{k}", "seed": k,
                      "match_method": r.choice(["constructed-equal", "loaded", None])}
        if r.random() < 0.2:
            specs[pid]["reduced_from"] = "x"
        kind = r.choice(["pass", "pass", "half", "wrong", "nan", "inf", "raise"])
        cands[pid] = ({"id": pid, "error": {"message": "boom", "line": 3}} if kind == "raise" else
                      {"id": pid, "out": [_out(rng, base, kind)], "structure": "T", "t": 0.1,
                       "mutated": r.choice([[], [], [0], [0, 1]]), "aliases_input": r.random() < 0.2})
    orig = refs.get("original", {})
    if r.random() < 0.5:
        b = orig.get("out32", [np.zeros(32, np.float32)])[0]
        refs["original_b"] = {"out32": [b if r.random() < 0.3 else b * 1.1], "structure": "T"}
    if "out32" in orig:
        orig["out32b"] = [orig["out32"][0] * (1 + r.choice([0, 1e-7]))]
    base = (orig["out32"][0] if "out32" in orig else np.ones(32, np.float32)).astype(np.float64)
    integrity = []
    for kind in ["repeat", "follow", "poison", "decoy", "census", "vary"]:
        if r.random() < 0.3:
            continue
        it = {"kind": kind, "probe": "original", "wall": 0.01}
        if r.random() < 0.15:
            it["error"] = {"message": "raised in check"}
            if r.random() < 0.5:
                it["unanswered"] = "no answer"
        elif kind == "repeat":
            it["outs"] = [[_out(rng, base, r.choice(["pass", "half", "wrong"]))] for _ in range(3)]
            it["reuses_output"], it["clobbered"] = r.random() < 0.2, r.random() < 0.1
        elif kind == "follow":
            it["other"], it["order"] = ids[-1], ["original", ids[-1], "original", ids[-1]]
            it["outs"] = [[_out(rng, base, r.choice(["pass", "pass", "wrong"]))] for _ in range(4)]
        elif kind in ("poison", "decoy"):
            it["out"] = [_out(rng, base, r.choice(["pass", "nan", "decoy", "wrong"]))]
        elif kind == "census":
            it["census"] = {"ops": {"aten.mm": {"seconds": r.random(), "work": r.choice([0, 10, 50, 90])},
                                    "aten.add": {"seconds": 0.1, "work": 5}}, "method": "dispatch"}
            if "out32" in orig:
                orig["census"] = {"ops": {"aten.mm": {"seconds": 1.0, "work": 100}}, "method": "dispatch"}
        elif kind == "vary":
            it["conditions"] = [{"threads": 1}, {"threads": 2}]
            it["outs"] = [[_out(rng, base, r.choice(["pass", "wrong"]))] for _ in range(2)]
            it["errors"] = [None, r.choice([None, "err"])]
        integrity.append(it)
    changes = [{"name": r.choice(["a", "b", "torch.backends.cudnn.benchmark"]),
                "kind": r.choice(["function", "world", "flag", "precision-flag"]), "before": "0",
                "after": r.choice(["1", "2"]), "phase": "import"} for _ in range(r.randint(0, 4))]
    return (specs, refs, cands, integrity, {"changes": changes}, changes[:1] if r.random() < 0.3 else [],
            r.random() < 0.5, r.random() < 0.5)


def judged(mod, sc):
    specs, refs, cands, integrity, cand_load, ref_changes, self_reference, custom = copy.deepcopy(sc)
    made: list = []
    j = mod.Judge(_maker(made), Tolerance(), 7, self_reference, custom, {"fallback_warning": 0.3})
    records = {pid: j.record(specs[pid], refs.get(pid), cands.get(pid)) for pid in specs}
    res = j.judge(records, refs, cands, integrity, cand_load, ref_changes)
    return (made, repr(res.integrity), repr([(k, r.status, r.reason) for k, r in res.records.items()]),
            res.passed_original, repr(res.global_changes))


PLUGIN = '''
import copy, importlib.util, sys
import hackscan.perf.parent_side as new
spec = importlib.util.spec_from_file_location("hackscan.perf._base_parent_side", {file!r})
old = importlib.util.module_from_spec(spec); sys.modules[spec.name] = old; spec.loader.exec_module(old)
_new, STATS = new.evaluate, {{"calls": 0, "diffs": 0, "rules": {{}}}}

def evaluate(*args, **kw):
    a2, k2 = copy.deepcopy(args), copy.deepcopy(kw)
    res = _new(*args, **kw)
    STATS["calls"] += 1
    for f in res[1]:
        STATS["rules"][f.rule] = STATS["rules"].get(f.rule, 0) + 1
    if repr(res) != repr(old.evaluate(*a2, **k2)):
        STATS["diffs"] += 1
    return res

new.evaluate = evaluate

def pytest_sessionfinish(session, exitstatus):
    print("\\nPERF", STATS["calls"], STATS["diffs"], sorted(STATS["rules"].items()))
'''
PERF_TESTS = ["tests/test_perf_parent.py", "tests/test_perf_interval.py", "tests/test_perf_paired.py",
              "tests/test_perf_processes.py", "tests/test_perf_target.py", "tests/test_perf_support.py",
              "tests/test_confirm.py"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="b1fe58a")
    ap.add_argument("--scenarios", type=int, default=1500)
    ap.add_argument("--perf", action="store_true", help="also replay the perf tests' evaluate calls")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="units_unchanged_"))
    try:
        old = base_module(args.base, "hackscan/dynamic/judge.py", "hackscan.dynamic._base_judge", folder)
    except subprocess.CalledProcessError as exc:
        print(f"units_unchanged: cannot read {args.base}: {exc.stderr.strip()}", file=sys.stderr)
        return 2
    fired: dict[str, int] = {}
    for s in range(args.scenarios):
        sc = scenario(s)
        a, b = judged(old, sc), judged(new_judge, sc)
        if a != b:
            print(f"judge: scenario {s} differs\n  base: {a}\n  now:  {b}")
            return 1
        for f in b[0]:
            fired[f[0]] = fired.get(f[0], 0) + 1
    print(f"{'part':<8} {'cases':>6} {'differ':>6}  rules fired")
    print(f"{'judge':<8} {args.scenarios:>6} {0:>6}  {len(fired)}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(fired.items())))
    if not args.perf:
        return 0
    file = folder / "parent_side.py"
    file.write_text(subprocess.run(["git", "show", f"{args.base}:hackscan/perf/parent_side.py"], cwd=ROOT,
                                   capture_output=True, text=True, check=True).stdout)
    (folder / "units_replay.py").write_text(textwrap.dedent(PLUGIN.format(file=str(file))))
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "units_replay", "-m", "not slow", *PERF_TESTS],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("PERF ")), None)
    if line is None or out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-2000:])
        return 1
    _, calls, diffs, rules = line.split(" ", 3)
    print(f"{'perf':<8} {calls:>6} {diffs:>6}  {rules}")
    return 0 if diffs == "0" else 1


if __name__ == "__main__":
    raise SystemExit(main())
