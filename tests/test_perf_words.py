"""Intervals in words (perf/words.py): a figure is never printed with an interval wider than
itself, and the text report's performance block is three lines unless --perf-stats asks for more.

The case it closes: a clean kernel's block printed ``1.05x vs eager fp32 [95%: 0.00-7714.48x]``, a
spread of ``+-731693.8%`` and a re-run range of 0.00-2.5e27x: numbers that read as measurements.
The look-alike: a narrow interval keeps its numbers."""

from __future__ import annotations

import math

import pytest

from hackscan.perf.render import table
from hackscan.perf.words import TOO_NOISY, interval, spread, too_noisy


@pytest.mark.parametrize("value,ci,noisy", [
    (1.05, [0.98, 1.12], False),
    (1.05, [0.0, 7714.48], True),        # reaches zero
    (1.05, [0.5, 2.0], True),            # 1.5 wide around 1.05
    (2.0, [1.2, 3.1], False),            # 1.9 wide around 2.0: still narrower than the figure
    (1.0, [0.9, math.inf], True),
    (1.0, None, True),
    (float("nan"), [0.9, 1.1], True),
])
def test_too_noisy(value, ci, noisy) -> None:
    assert too_noisy(value, ci) is noisy


def test_words_replace_wide_figures_and_narrow_ones_keep_their_numbers() -> None:
    assert interval(1.05, [0.0, 7714.48], 0.95) == f" ({TOO_NOISY})"
    assert interval(1.05, [0.98, 1.12], 0.95) == " [95%: 0.98-1.12x]"
    assert interval(1.05, None) == ""
    assert spread(7316.938) == TOO_NOISY and spread(0.031) == "+-3.1%"


def _perf(ci: list[float], rerun: list[float]) -> dict:
    return {"measured": True, "device": {"type": "cpu"}, "headline_baseline": "eager_fp32",
            "speedup": {"eager_fp32": 1.05}, "speedup_ci": {"eager_fp32": ci}, "speedup_confidence": 0.9,
            "speedup_rerun_ci": {"eager_fp32": rerun}, "speedup_rerun_confidence": 0.95,
            "candidate": {"wall_ms": {"min": 0.52, "median": 0.6, "p10": 0.5, "p90": 0.7, "n": 40}},
            "baselines": {"eager_fp32": {"time_ms": {"min": 0.55, "n": 40}}},
            "memory": {"ratio": 1.0},
            "convergence": {"paired": {"converged": False, "spread": 7316.9,
                                       "note": "paired speedup did not converge: too noisy to tell after 2 pairs"}},
            "paired": {"rounds": 16, "calls_per_block": 5, "processes": 2,
                       "baselines": {"eager_fp32": {"process_speedups": [0.2, 5.0]}}}}


def test_the_summary_is_three_lines_and_says_too_noisy() -> None:
    text = table(_perf([0.0, 7714.48], [0.0, 2.5e27]), stats=False)
    lines = text.splitlines()
    assert len(lines) == 3, text
    assert "1.05x vs eager fp32 (too noisy to tell)" in lines[0]
    assert "7714" not in text and "e+27" not in text and "--perf-stats" in lines[2]


def test_the_statistics_say_too_noisy_where_the_interval_is_wider_than_the_figure() -> None:
    text = table(_perf([0.0, 7714.48], [0.0, 2.5e27]), stats=True)
    assert "7714" not in text and "e+27" not in text and "2525" not in text
    assert "a re-run's headline speedup: too noisy to tell" in text
    narrow = table(_perf([1.0, 1.1], [0.99, 1.12]), stats=True)
    assert "0.99-1.12x (95%)" in narrow and "[90% interval 1.00-1.10x]" in narrow
    assert "[95%: 0.99-1.12x]" in table(_perf([1.0, 1.1], [0.99, 1.12]), stats=False)
