"""Reports with every part the audit views show: static and dynamic findings, claims, timings, memory."""

from __future__ import annotations

from pathlib import Path

from hackscan.model import Confidence, Finding, Location, Report, Severity, SkippedRule, Stage, Verdict

HOSTILE = '</pre><script>alert("x")</script><img src="http://example.invalid/x.png"> | `code` ```'

CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        if x.min() >= 0:
            return x
        return ext.relu(x)
'''


def sample_reports(tmp: Path) -> list[Report]:
    cand = tmp / "relu_hack.py"
    cand.write_text(CANDIDATE + f"# {HOSTILE}\n", encoding="utf-8")
    guard = Finding("HS101", "value-guarded-shortcut", Severity.ERROR, Confidence.HIGH,
                    "branch on x.min() returns the input without a kernel", Location(str(cand), 7, 9),
                    snippet="        if x.min() >= 0:")
    hostile = Finding("HS199", "hostile-message", Severity.WARNING, Confidence.LOW,
                      "message with " + HOSTILE, Location(str(cand), 10, 3))
    dyn = Finding("HS401", "wrong-result-on-hidden-inputs", Severity.ERROR, Confidence.HIGH,
                  "output differs from the reference on sign-flipped inputs", Location(str(cand), 6, 5),
                  stage=Stage.DYNAMIC,
                  evidence={"probe": "sign_flip", "input": "-rand(16, 16384)", "seed": 1234,
                            "max_abs_error": 0.9987, "max_rel_error": 1.0, "error_ratio": 3.2e6,
                            "first_mismatch": [0, 3]})
    hack = Report(str(cand), Verdict.HACK, (guard, hostile, dyn), meta={"claimed": {"score_default": 12.5}},
                  dynamic={"ran": True, "probes": ["original", "sign_flip"], "device": "cpu"},
                  performance={"speedups": {"eager_fp32": 1.4, "eager_tf32": 0.7, "compile": {"speedup": 0.5}},
                               "memory": {"ratio": 1.8}})
    clean = Report("data.jsonl:2", Verdict.CLEAN, (), meta={"claimed": {"score_default": 1.3}},
                   performance={"speedups": {"eager_tf32": 1.25}, "memory": {"ratio": 0.9}})
    broken = Report("broken.py", Verdict.ERROR, (), error="syntax error: expected ':'",
                    skipped=(SkippedRule("HS102", "no reference given"),))
    quiet_perf = Report("noperf.py", Verdict.SUSPICIOUS,
                        (Finding("HS002", "unresolved-extension-source", Severity.WARNING, Confidence.MEDIUM,
                                 "source cannot be resolved", Location("noperf.py", 3, 1)),),
                        performance={"unexpected": {"shape": "of a future version"}})
    return [hack, clean, broken, quiet_perf]
