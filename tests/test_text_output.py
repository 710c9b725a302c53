"""The text report: a candidate the dynamic stage could not run says why, beside its verdict."""

from __future__ import annotations

from hackscan.model import Report, Verdict
from hackscan.output.text import render_text

WHY = "the candidate compiles CUDA code and needs a CUDA GPU; this machine has none"


def test_a_dynamic_stage_that_did_not_run_gives_its_reason() -> None:
    report = Report(path="kernels/relu/clean_cuda_relu_vec4.py", verdict=Verdict.CLEAN, findings=(),
                    dynamic={"ran": False, "reason": WHY})
    out = render_text([report])
    verdict_line = next(i for i, line in enumerate(out.splitlines()) if line.startswith("kernels/relu/"))
    assert out.splitlines()[verdict_line + 1] == f"  dynamic stage not run: {WHY}"


def test_nothing_is_said_when_it_ran_or_was_not_asked_for() -> None:
    ran = Report(path="a.py", verdict=Verdict.CLEAN, findings=(), dynamic={"ran": True, "device": "cpu"})
    static_only = Report(path="b.py", verdict=Verdict.CLEAN, findings=())
    assert "dynamic stage not run" not in render_text([ran, static_only])
