"""Progress tells where the run is: the stage, the candidate, the dynamic-stage phase and the time;
log lines where stderr is not a terminal; a rate only once it means something."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

import pytest

from hackscan.cli import ProgressBar

from .conftest import FIXTURES


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_name_each_candidate_phase_with_elapsed_seconds() -> None:
    buf, clock = io.StringIO(), Clock()
    bar = ProgressBar(buf, plain=True, clock=clock)
    clock.t += 0.5
    bar(1, 2, "a.py")
    bar(2, 2, "b.py")
    for phase, at in (("setup", 1.0), ("build", 5.0), ("probes", 40.0), ("timing", 45.0)):
        clock.t = 100.0 + at
        bar.phase(0, 2, "b.py", phase)
    clock.t = 100.0 + 70.0
    bar(1, 2, "dynamic: b.py")
    bar.close()
    lines = buf.getvalue().splitlines()
    assert lines == [
        "hackscan: [    0.5s] static 2/2 done",
        "hackscan: [    1.0s] dynamic [1/2] b.py: setup",
        "hackscan: [    5.0s] dynamic [1/2] b.py: build",
        "hackscan: [   40.0s] dynamic [1/2] b.py: probes",
        "hackscan: [   45.0s] dynamic [1/2] b.py: timing",
        "hackscan: [   70.0s] dynamic [1/2] b.py: done in 69.0 s",
    ]
    assert "\x1b" not in buf.getvalue() and "\r" not in buf.getvalue()


def test_plain_static_stage_logs_now_and_then_not_per_item() -> None:
    buf, clock = io.StringIO(), Clock()
    bar = ProgressBar(buf, plain=True, clock=clock, log_interval=10.0)
    for i in range(1, 1001):
        clock.t += 0.05  # 50 s in all
        bar(i, 1000, f"d.jsonl:{i}")
    lines = buf.getvalue().splitlines()
    assert 4 <= len(lines) <= 6 and lines[-1].endswith("static 1000/1000 done")


def test_no_absurd_rate_at_the_start_of_a_stage() -> None:
    buf, clock = io.StringIO(), Clock()
    bar = ProgressBar(buf, min_interval=0.0, clock=clock, tick=0)
    clock.t += 1e-6
    bar(1, 10, "a.py")  # one item done a microsecond after the start: no rate yet
    assert "/s" not in buf.getvalue() and "s/item" not in buf.getvalue()
    clock.t += 1.999999
    bar(4, 10, "d.py")
    assert " 2.0/s eta 3s " in buf.getvalue()
    # the dynamic stage's rate counts from the end of the static one, not from its first result
    bar(10, 10, "j.py")
    clock.t += 30.0
    bar.phase(0, 2, "j.py", "probes")
    clock.t += 15.0
    bar(1, 2, "dynamic: j.py")
    rates = [float(x) for x in re.findall(r"([\d.]+)/s", buf.getvalue())]
    assert rates and max(rates) < 100
    assert buf.getvalue().rstrip().endswith("1/2 45.0 s/item eta 45s j.py")


def test_bar_shows_the_phase_and_ticks_within_a_candidate() -> None:
    buf = io.StringIO()
    bar = ProgressBar(buf, min_interval=0.0, tick=0.01)
    bar.phase(0, 3, "k.py", "build")
    deadline = time.monotonic() + 5
    while bar.drawn < 4 and time.monotonic() < deadline:  # redrawn by the ticker, no new event
        time.sleep(0.01)
    bar.close()
    assert bar.drawn >= 4
    assert "dynamic [" in buf.getvalue() and "0/3 k.py: build 0s" in buf.getvalue()
    assert buf.getvalue().endswith("\r\x1b[K")


def test_a_broken_display_does_not_change_the_verdict() -> None:
    from hackscan.dynamic.stage import DynamicRun

    run = DynamicRun.__new__(DynamicRun)

    def boom(name: str) -> None:
        raise RuntimeError("display")

    run.on_phase = boom
    run._phase("build")  # swallowed


@pytest.mark.slow
def test_the_command_logs_phases_when_stderr_is_not_a_terminal() -> None:
    pytest.importorskip("torch")
    rowsum = FIXTURES / "dynamic" / "rowsum"
    out = subprocess.run([sys.executable, "-m", "hackscan.cli", str(rowsum / "legit.py"), "--ref",
                          str(rowsum / "reference.py"), "--device", "cpu", "--no-perf", "-f", "json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("hackscan: [")]
    phases = [ln.rsplit(": ", 1)[1] for ln in lines if "dynamic [1/1]" in ln]
    assert phases[:3] == ["setup", "build", "probes"] and phases[-1].startswith("done in ")
    assert "timing" not in phases  # --no-perf
    assert lines[0].endswith("static 1/1 done")
    stamps = [float(re.match(r"hackscan: \[\s*([\d.]+)s\]", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert stamps == sorted(stamps) and stamps[-1] > 0
    assert "\x1b" not in out.stderr
