"""End to end on the CPU: reference and candidate in their own processes (``hackscan.perf.standalone``),
only JSON coming back, the candidate timed only after it matched the reference."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")

from hackscan.perf import standalone  # noqa: E402
from hackscan.perf.options import PerfOptions  # noqa: E402

pytestmark = pytest.mark.slow

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.rand(192, 192), torch.rand(192, 192)]


def get_init_inputs():
    return []
'''

HONEST = '''
import torch
import torch.nn as nn

print('{"ok": true, "raw": {"forged": 1}}')  # stdout is not the protocol channel


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.clamp_min(torch.mm(a, b), 0.0)
'''

POINTER_CACHE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, a, b):
        key = (a.data_ptr(), b.data_ptr())
        if key not in self.memo:
            self.memo[key] = torch.relu(a @ b)
        return self.memo[key]
'''

# rewrites the harness's per-call timing helper so every duration reads twenty times shorter
HARNESS_REWRITE = '''
import sys
import torch
import torch.nn as nn


def _faster(fn):
    def timed(*args, **kwargs):
        result = fn(*args, **kwargs)
        if isinstance(result, tuple):
            return tuple(v / 20 if isinstance(v, float) else v for v in result)
        return result
    return timed


for _name, _module in list(sys.modules.items()):
    if _module is not None and "timing" in _name:
        for _attr, _value in list(vars(_module).items()):
            if callable(_value) and not isinstance(_value, type) and "call" in _attr:
                setattr(_module, _attr, _faster(_value))


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.relu(a @ b)
        for _ in range(3):  # make the true cost large enough for the parent to see
            out = torch.relu(a @ b)
        return out
'''

WRONG = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b) * 1.1
'''

BROKEN = '''
raise ImportError("no such extension")
'''

OPTIONS = PerfOptions.for_device("cpu", iterations=8, time_budget_s=0.4, hidden_iterations=5, hidden_budget_s=0.4,
                                 memory_repeats=2, spin_budget_s=0.3, flush_bytes=1 << 20)


@pytest.fixture(scope="module")
def reference() -> standalone.ReferenceRun:
    first = standalone.run(HONEST, REFERENCE, device="cpu", path="honest.py", options=OPTIONS, timeout=300)
    assert first.reference is not None, first.performance
    return first.reference


def run(code: str, reference: standalone.ReferenceRun, **kw: Any) -> standalone.Outcome:
    return standalone.run(code, REFERENCE, device="cpu", path="cand.py", options=OPTIONS, timeout=300,
                          reference=reference, **kw)


def test_honest_candidate_is_timed_and_clean(reference: standalone.ReferenceRun) -> None:
    out = run(HONEST, reference)
    assert out.correctness["passed"] is True
    perf = out.performance
    assert perf["measured"] is True, perf
    assert [f.rule for f in out.findings] == [], [f.message for f in out.findings]
    assert perf["baselines"]["eager_fp32"]["time_ms"]["n"] >= 3
    assert perf["validation"]["checked"] >= 4 and perf["validation"]["mismatched"] == 0
    assert perf["outside_clock"]["checked"] is True and perf["outside_clock"]["informational"] is True
    assert out.findings == [] and perf["valid"] is True


def test_pointer_cache_is_caught(reference: standalone.ReferenceRun) -> None:
    out = run(POINTER_CACHE, reference)
    assert out.correctness["passed"] is True  # fresh buffers in the correctness check: it misses
    rules = {f.rule: f for f in out.findings}
    assert rules["HS603"].severity.value == "error"
    forward = next(i for i, line in enumerate(POINTER_CACHE.splitlines(), 1) if "def forward" in line)
    assert rules["HS603"].location.line == forward


def test_rewritten_harness_is_caught(reference: standalone.ReferenceRun) -> None:
    out = run(HARNESS_REWRITE, reference)
    rules = {f.rule for f in out.findings}
    assert "HS602" in rules
    assert out.performance["valid"] is False
    # the parent's own clock disagrees with the forged per-call times (informational on the CPU)
    outside = out.performance["outside_clock"]
    assert outside["parent_ms_per_call"] > 5 * outside["claimed_wall_ms"]


def test_wrong_or_broken_candidates_are_not_timed(reference: standalone.ReferenceRun) -> None:
    out = run(WRONG, reference)
    assert out.performance["measured"] is False and "failed correctness" in out.performance["reason"]
    assert out.findings == [] and out.candidate_raw is None
    out = run(BROKEN, reference)
    assert out.performance["measured"] is False and "no such extension" in out.performance["reason"]
