"""Issue 16, item 5: a task whose outputs are over the parent's memory budget runs anyway.

Large replies are received into the spill folder (``hackscan/dynamic/spill.py``) and compared a
chunk at a time; the budget for them is the spill folder's.  Here the ReLU task's 16 MiB outputs
are made "large" (the spill threshold lowered to 1 MiB) and the memory budget set far below them:
before, the stage was skipped ("too large to compare here"); now it runs, with the same verdict and
findings as a run with room to spare, and a spill budget it does not fit still skips with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "kernels" / "relu"


def _scan(tmp_path: Path, name: str, extra: dict[str, Any]) -> Any:
    pytest.importorskip("torch")
    from hackscan.config import Config
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover
    from hackscan.pipeline import RunOptions

    folder = tmp_path / name
    folder.mkdir()
    (folder / "reference.py").write_text((RELU / "reference.py").read_text())
    (folder / "candidate.py").write_text((RELU / "hack_value_guard.py").read_text())
    sub = next(s for s in discover([str(folder / "candidate.py")]))
    pool = WorkerPool(cache_root=str(tmp_path / "cache"))
    opts = RunOptions(device="cpu", timeout=240.0, seed=5, perf=False, extra=extra)
    try:
        return run_dynamic_stage(sub, StaticScanner(Config()).scan(sub), opts, Config(), pool=pool)
    finally:
        pool.close()


def _rows(r: Any) -> list[tuple[str, int]]:
    return sorted((f.rule, f.location.line) for f in r.findings)


@pytest.mark.slow
def test_outputs_over_the_memory_budget_are_compared_from_the_spill_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hackscan.dynamic import spill

    monkeypatch.setenv("HACKSCAN_SPILL_DIR", str(tmp_path / "spill"))
    roomy = _scan(tmp_path, "roomy", {})
    assert roomy.dynamic.get("ran"), roomy.dynamic
    monkeypatch.setattr(spill, "SPILL_BYTES", 1 << 20)
    # 0.01 GiB: below one probe's 16 MiB output, let alone the three that always run
    tight = _scan(tmp_path, "tight", {"memory_budget_gb": 0.01})
    assert tight.dynamic.get("ran"), tight.dynamic
    assert tight.verdict == roomy.verdict and _rows(tight) == _rows(roomy)
    # every probe of the roomy run ran (the spill budget, half the folder's free disk, may admit more),
    # save one the time budget dropped: the plan measures the reference's speed, which load moves
    timed_out = {s["probe"] for s in tight.dynamic.get("skipped", []) if "time budget" in s.get("reason", "")}
    assert {p["id"] for p in roomy.dynamic["probes"]} - timed_out <= {p["id"] for p in tight.dynamic["probes"]}
    assert not any("memory budget" in s.get("reason", "") for s in tight.dynamic.get("skipped", []))
    assert list((tmp_path / "spill").iterdir()) == []  # every frame's file was unlinked when made
    # a spill budget the task does not fit: skipped, with the reason, as a memory budget was before
    full = _scan(tmp_path, "full", {"memory_budget_gb": 0.01, "spill_budget_gb": 0.01})
    assert not full.dynamic.get("ran") and "too large to compare" in full.dynamic["reason"], full.dynamic
    assert "spill folder" in full.dynamic["reason"]
