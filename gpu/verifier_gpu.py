#!/usr/bin/env python3
"""The verified reward on a GPU: a small batch through ``Verifier(device="cuda")``, as a TRL reward
function receives it, and the rewards it gives.

    PYTHONPATH=. python gpu/verifier_gpu.py [--n 6] [--jobs 1] [--seed 7] [--perf quick] [--ray local]

The batch: the first N CUDA-L1 records of ../shared/corpora/cuda-l1/a100.jsonl (their generated
kernels against their references), then the two generations that must score the floor (an empty
one and "None"), then a bundled kernel from kernels/ (a real CUDA extension).  Prints one line per
candidate (verdict, accepted, rejected for, correct, speedup against the best baseline with its
interval, reward, seconds) and the batch's wall time; the same batch through the TRL adapter
(``hackscan.rl.trainers.trl_reward``) must give the same rewards for the same seed, which it checks
(timings differ from run to run, so that check compares verdicts and the floors, and prints both
reward columns).  With ``--ray local`` the batch also goes through a private Ray cluster on this
host and its verdicts are compared with the local ones.  Writes $OUT/verifier_gpu.json when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hackscan  # noqa: E402
from hackscan.rl.reward import RewardPolicy  # noqa: E402
from hackscan.rl.trainers import trl_reward  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpora" / "cuda-l1" / "a100.jsonl"


def batch(n: int) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    if CORPUS.is_file():
        with CORPUS.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                rec = json.loads(line)
                out.append((f"a100.jsonl:{i}", rec.get("custom_code") or "", rec.get("ref_code") or ""))
                if len(out) >= n:
                    break
    else:
        print(f"no corpus at {CORPUS}: the bundled kernels only")
    ref = (ROOT / "kernels" / "relu" / "reference.py")
    if ref.is_file():
        for cand in sorted(ref.parent.glob("*.py"))[:2]:
            if cand.name != "reference.py":
                out.append((str(cand.relative_to(ROOT)), cand.read_text(), ref.read_text()))
    r0 = out[0][2] if out else ""
    out += [("empty", "", r0), ("None", "None", r0)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--perf", default="quick", choices=("off", "quick", "target", "thorough"))
    ap.add_argument("--ray", default=None, help="also run the batch on Ray (local, auto or an address)")
    args = ap.parse_args()
    items = batch(args.n)
    policy = RewardPolicy()
    rows = []
    with hackscan.Verifier(device="cuda", jobs=args.jobs, seed=args.seed, perf=args.perf) as v:
        t0 = time.perf_counter()
        starts = {}
        futures = []
        for name, code, ref in items:
            starts[name] = time.perf_counter()
            futures.append((name, v.submit(code, ref)))
        results = []
        for name, f in futures:
            r = f.result()
            results.append(r)
            sp = r.speedup(policy.baseline)
            rows.append({"candidate": name, "verdict": r.verdict, "accepted": r.accepted,
                         "rejected_for": list(r.rejected_for), "correct": r.correct,
                         "speedup": sp.to_dict() if sp else None, "reward": round(policy(r), 4),
                         "seconds": round(time.perf_counter() - starts[name], 1), "reason": r.reason})
        wall = time.perf_counter() - t0
        print(f"{'candidate':<34} {'verdict':<10} {'acc':<5} {'rejected for':<22} {'correct':<7} "
              f"{'speedup (low-high)':<22} {'reward':>7}")
        for row in rows:
            sp = row["speedup"]
            sps = f"{sp['value']:.2f}x ({sp['low'] or 0:.2f}-{sp['high'] or 0:.2f})" if sp else "-"
            print(f"{row['candidate'][:34]:<34} {row['verdict']:<10} {row['accepted']!s:<5} "
                  f"{','.join(row['rejected_for'])[:22]:<22} {row['correct']!s:<7} {sps:<22} {row['reward']:>7.3f}")
            if row["verdict"] == "error" or not row["accepted"] and row["reason"]:
                print(f"    {str(row['reason'])[:150]}")
        print(f"batch of {len(items)} in {wall:.1f} s (jobs {args.jobs}, --perf {args.perf})")
        # the TRL adapter on the same verifier and seed
        reward = trl_reward(v)
        trl = reward(prompts=[n for n, _, _ in items], completions=[c for _, c, _ in items],
                     reference=[r for _, _, r in items])
        print("TRL adapter rewards:", [round(x, 3) for x in trl])
        same = all((a == 0.0) == (row["reward"] == 0.0) for a, row in zip(trl, rows, strict=True))
        print(f"TRL adapter floors match the direct run: {same}")
    ray_rows = None
    if args.ray:
        with hackscan.Verifier(device="cuda", seed=args.seed, perf=args.perf, ray=args.ray) as rv:
            t0 = time.perf_counter()
            remote = rv.map([(c, r) for _, c, r in items])
            print(f"Ray ({args.ray}): batch in {time.perf_counter() - t0:.1f} s")
        ray_rows = [{"verdict": r.verdict, "accepted": r.accepted, "reward": round(policy(r), 4)} for r in remote]
        agree = all(a.verdict == b.verdict and a.accepted == b.accepted for a, b in zip(remote, results, strict=True))
        print(f"Ray verdicts and acceptance equal the local run's: {agree}")
        print("Ray rewards:", [r["reward"] for r in ray_rows])
    out = os.environ.get("OUT")
    if out:
        Path(out, "verifier_gpu.json").write_text(json.dumps({"rows": rows, "ray": ray_rows}, indent=1))


if __name__ == "__main__":
    main()
