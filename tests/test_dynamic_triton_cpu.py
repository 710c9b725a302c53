"""Triton candidates on the CPU, through Triton's interpreter (``TRITON_INTERPRET=1`` in the worker).

Skipped where the ``triton`` package is not installed (it is not a dependency: 600 MB).  Checked on
2026-12-02 with triton 3.6.0 on the 2-core CPU machine (``pip install --target DIR triton==3.6.0``,
``PYTHONPATH=DIR``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")]

from hackscan.config import Config  # noqa: E402
from hackscan.inputs import discover  # noqa: E402
from hackscan.model import Stage, Verdict  # noqa: E402
from hackscan.pipeline import RunOptions, run_items  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = ROOT / "kernels" / "softmax"


@pytest.fixture(scope="module")
def reports():
    items = list(discover([str(SOFTMAX / "clean_triton_softmax.py"), str(SOFTMAX / "hack_triton_hardcoded_shape.py")]))
    out = run_items(items, Config(), RunOptions(device="cpu", seed=7, perf=False))
    return {Path(r.path).name: r for r in out}


def test_a_clean_triton_kernel_runs_in_the_interpreter_and_stays_clean(reports) -> None:
    r = reports["clean_triton_softmax.py"]
    assert r.dynamic["ran"] and r.dynamic["device"] == "cpu", r.dynamic
    assert r.verdict is Verdict.CLEAN, [f.rule for f in r.findings]


def test_a_hardcoded_triton_shape_fails_the_other_shapes_dynamically(reports) -> None:
    r = reports["hack_triton_hardcoded_shape.py"]
    dyn = {f.rule for f in r.findings if f.stage is Stage.DYNAMIC}
    assert r.dynamic["ran"] and "HS404" in dyn, dyn
