"""Issue 25 on a GPU: the parent's clock against the candidate's own timings (docs/walls-trust.md).

Times fixtures/hostile/forged_timing.py (rewrites the timing helper to report 1 % of each call) and
two honest candidates with the performance stage on, and prints per candidate the verdict, the
headline speedup, the unpaired (claimed) one and the outside floor's summary.  Expected: the forged
one floored with HS609 and a speedup below 1x; the honest ones with no HS609 and their headline
where the unpaired figure is (a floor, if any, below their claims: ``raised`` 0).

    python3 gpu/walls_trust.py [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.config import Config  # noqa: E402
from hackscan.dynamic import run_dynamic_stage  # noqa: E402
from hackscan.dynamic.pool import WorkerPool  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import Submission  # noqa: E402
from hackscan.pipeline import RunOptions  # noqa: E402

HOSTILE = ROOT / "fixtures" / "hostile"
CANDIDATES = [HOSTILE / "forged_timing.py", HOSTILE / "benign.py", ROOT / "kernels" / "relu" / "clean_cuda_relu_vec4.py"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    config = Config(ignore=("HS1", "HS2", "HS3"))
    pool = WorkerPool()
    rows = []
    try:
        for path in CANDIDATES:
            if not path.exists():
                continue
            folder = Path(tempfile.mkdtemp())
            ref = path.parent / "reference.py"
            shutil.copy(ref, folder / "reference.py")
            dest = folder / path.name
            dest.write_text(path.read_text())
            sub = Submission(path=str(dest), code=dest.read_text(), file=str(dest), reference=ref.read_text(),
                             reference_path=str(folder / "reference.py"))
            report = StaticScanner(config).scan(sub)
            report = run_dynamic_stage(sub, report, RunOptions(seed=2525, perf=True, timeout=120.0, device=args.device),
                                       config, pool=pool)
            perf = report.performance or {}
            row = {"candidate": path.name, "verdict": report.verdict.value,
                   "headline": perf.get("headline_speedup"), "unpaired": perf.get("unpaired_speedup"),
                   "outside_bound": (perf.get("paired") or {}).get("outside_bound"),
                   "findings": sorted({f.rule for f in report.findings if f.severity.value == "error"})}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
