"""Score the red-team sets (``../shared/redteam``): per set, hacks caught by the static stage alone
and by static + dynamic, false hacks among the look-alikes, and one line per case.

Each case is scored under a neutral name (a JSONL record: no file name gives the answer away),
with its problem as the reference.  The static stage sees every case; the dynamic stage runs the
cases this host can execute (``--device cpu``: those labelled ``runs: cpu``) in ONE hackscan batch.
A case labelled ``invalid`` is skipped, as the sets' README asks.

    python benchmarks/redteam.py                  # static + dynamic (CPU cases), --jobs 2, --perf quick
    python benchmarks/redteam.py --static         # static verdicts only (seconds)
    python benchmarks/redteam.py --set set2 --seed 7 --jobs 2
    python benchmarks/redteam.py --device auto --redteam DIR   # a GPU host: every case, CUDA/Triton too

A case counts as caught when its verdict is ``hack`` (label ``hack``), at least ``suspicious``
(label ``flag``); a look-alike (label ``clean``) is a false hack when its verdict is ``hack``.
``error`` is a rejection, so it counts as caught for a hack and as a false hack for a look-alike.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REDTEAM = ROOT.parent / "shared" / "redteam"


def cases(set_dir: Path) -> list[tuple[str, dict]]:
    labels = json.loads((set_dir / "labels.json").read_text())
    return [(name, meta) for name, meta in labels.items()
            if isinstance(meta, dict) and "invalid" not in meta]


def _records(set_dir: Path, chosen: list[tuple[str, dict]], path: Path) -> None:
    with path.open("w") as out:
        for name, meta in chosen:
            code = (set_dir / "cases" / f"{name}.py").read_text()
            ref = (set_dir / "problems" / f"{meta['problem']}.py").read_text()
            out.write(json.dumps({"custom_code": code, "ref_code": ref}) + "\n")


def _hackscan(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "hackscan", *args, "-f", "json"],
                          capture_output=True, text=True, cwd=ROOT)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        sys.exit(f"hackscan failed (exit {proc.returncode}): {proc.stderr[-2000:]}")


def verdicts(set_dir: Path, chosen: list[tuple[str, dict]], extra: list[str]) -> dict[str, dict]:
    """Verdict and error-finding rules per case name, from one hackscan batch."""
    if not chosen:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.jsonl"
        _records(set_dir, chosen, records)
        report = _hackscan([str(records), *extra])
    out = {}
    for (name, _), result in zip(chosen, sorted(report["results"], key=lambda r: r.get("record", 0)), strict=True):
        errors = [f for f in result.get("findings", []) if f.get("severity") == "error" and not f.get("suppressed")]
        rules = sorted({f["rule"] for f in errors})
        out[name] = {"verdict": result["verdict"], "rules": rules, "classes": sorted({f.get("class", "") for f in errors}),
                     "reason": (result.get("dynamic") or {}).get("reason")}
    return out


def runs_of(meta: dict) -> list[str]:
    """Where a case runs: a word (``cpu``) or a list of them (``["cuda"]``), as sets spell it."""
    runs = meta.get("runs") or []
    return [runs] if isinstance(runs, str) else list(runs)


def set_aside(result: dict, classes: set[str]) -> str:
    """The verdict with the error findings of ``classes`` left out (``no-kernel``: a pure-PyTorch
    set is a torch fallback by the taxonomy, whatever else it does)."""
    if not classes or result["verdict"] != "hack":
        return result["verdict"]
    return "hack" if any(c not in classes for c in result["classes"]) else "not-hack"


def caught(label: str, verdict: str) -> bool:
    if label == "flag":
        return verdict in ("hack", "suspicious", "error")
    return verdict in ("hack", "error")


def score(set_name: str, static_only: bool, jobs: int, seed: int | None, perf: str, device: str = "cpu",
          root: Path = REDTEAM, aside: frozenset[str] = frozenset()) -> dict:
    set_dir = root / set_name
    chosen = cases(set_dir)
    static = verdicts(set_dir, chosen, ["--static"])
    runnable = [(n, m) for n, m in chosen if device != "cpu" or "cpu" in runs_of(m)]
    dynamic = {}
    if not static_only:
        extra = ["--device", device, "--jobs", str(jobs), "--perf", perf]
        if seed is not None:
            extra += ["--seed", str(seed)]
        dynamic = verdicts(set_dir, runnable, extra)
    rows, tally = [], {"hacks": 0, "static": 0, "both": 0, "both_of": 0, "looks": 0, "false": 0}
    for name, meta in chosen:
        label, s = meta["label"], static[name]
        d = dynamic.get(name)
        final = set_aside(d if d else s, set(aside))
        if label == "clean":
            tally["looks"] += 1
            tally["false"] += final in ("hack", "error")
        else:
            tally["hacks"] += 1
            tally["static"] += caught(label, set_aside(s, set(aside)))
            if d is not None:
                tally["both_of"] += 1
                tally["both"] += caught(label, final)
        ok = (final not in ("hack", "error")) if label == "clean" else caught(label, final)
        rows.append(f"  {'ok ' if ok else 'MISS'} {name:40s} {label:5s} {','.join(runs_of(meta)):6s} "
                    f"static={s['verdict']:10s} dynamic={(d or {}).get('verdict', '-'):10s} "
                    f"{','.join((d or s)['rules'])}"
                    + (f"  [{d['reason']}]" if d and d.get("reason") else ""))
    return {"set": set_name, "rows": rows, "tally": tally}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", help="a set's folder name under --redteam (default: set1, set2)")
    ap.add_argument("--static", action="store_true", help="static verdicts only")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--perf", default="quick")
    ap.add_argument("--device", default="cpu", choices=["cpu", "auto"],
                    help="cpu: the CPU cases only, on the CPU; auto: every case where it runs (a GPU host)")
    ap.add_argument("--redteam", type=Path, default=REDTEAM, help="the folder holding set1/ and set2/")
    ap.add_argument("--set-aside", action="append", default=[], metavar="CLASS",
                    help="leave the error findings of this verdict class out of the verdict (e.g. no-kernel)")
    args = ap.parse_args(argv)
    if not args.redteam.is_dir():
        print(f"no red-team sets at {args.redteam}", file=sys.stderr)
        return 2
    for set_name in args.set or ["set1", "set2"]:
        if not (args.redteam / set_name / "labels.json").is_file():
            print(f"no set {set_name} (labels.json) under {args.redteam}", file=sys.stderr)
            return 2
        r = score(set_name, args.static, args.jobs, args.seed, args.perf, args.device, args.redteam,
                  frozenset(args.set_aside))
        t = r["tally"]
        print(f"{set_name}: hacks {t['hacks']} (hack or flag), static {t['static']}/{t['hacks']}"
              + ("" if args.static else f", static+dynamic on the {'CPU ' if args.device == 'cpu' else ''}cases "
                                         f"{t['both']}/{t['both_of']}")
              + f"; false hacks {t['false']}/{t['looks']}")
        print("\n".join(r["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
