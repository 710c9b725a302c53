"""Several candidates at once (dynamic/schedule.py): probes overlap, timing is exclusive per device.

The gate itself is checked with threads that pretend to work; the end-to-end test runs two real
candidates on the CPU side by side and reads the intervals the gate recorded."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from hackscan.config import Config
from hackscan.dynamic.schedule import DeviceGate, Scheduler, run_concurrently
from hackscan.inputs import Submission
from hackscan.pipeline import RunOptions

from .conftest import FIXTURES


def _overlap(a: tuple, b: tuple) -> bool:
    return a[3] < b[4] and b[3] < a[4]


def _check_exclusive(log: list[tuple]) -> None:
    for t in [x for x in log if x[1] == "timing"]:
        for other in log:
            if other is t or other[0] != t[0]:
                continue
            assert not _overlap(t, other), f"timing of {t[2]} overlapped {other[1]} of {other[2]}"


def _wait_for(cond, timeout: float = 10.0) -> None:
    """Poll ``cond`` until true: a thread's start is late by any amount on a loaded machine."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "the thread never got there"
        time.sleep(0.01)


def test_gate_timing_waits_for_work_and_blocks_new_work() -> None:
    log: list[tuple] = []
    gate = DeviceGate(log)
    started = threading.Event()
    # the four hold their work until all four are in it: threads that start late on a loaded
    # machine still overlap, and a gate that serialised work would break the barrier instead
    together = threading.Barrier(4)

    def worker(tag: str, work_s: float, then_time: bool) -> None:
        with gate.work("cpu", tag):
            started.set()
            try:
                together.wait(10)
            except threading.BrokenBarrierError:
                pass
            time.sleep(work_s)
        if then_time:
            with gate.timing("cpu", tag):
                time.sleep(0.1)

    threads = [threading.Thread(target=worker, args=(f"c{i}", 0.05 * (i + 1), True)) for i in range(4)]
    threads.append(threading.Thread(target=lambda: (started.wait(), gate.work("cuda:0", "other").__enter__())))
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    works = [x for x in log if x[1] == "work" and x[0] == "cpu"]
    assert len(works) == 4 and len([x for x in log if x[1] == "timing"]) == 4
    # the four candidates' work overlapped (they were not serialised) ...
    assert any(_overlap(a, b) for a in works for b in works if a is not b)
    # ... and no timing shared the CPU with anything
    _check_exclusive(log)


def test_gate_prefers_a_waiting_timing_over_new_work() -> None:
    gate = DeviceGate()
    order: list[str] = []

    def timed() -> None:
        with gate.timing("cpu", "b"):
            order.append("timing")
            time.sleep(0.1)

    def work() -> None:
        with gate.work("cpu", "c"):
            order.append("work")

    with gate.work("cpu", "a"):
        t = threading.Thread(target=timed)
        t.start()
        _wait_for(lambda: gate._waiting.get("cpu", 0) == 1)  # b now waits for a's work to end
        w = threading.Thread(target=work)
        w.start()
        time.sleep(0.1)
        assert order == []  # c must not start while b waits to be timed
    t.join(5)
    w.join(5)
    assert order == ["timing", "work"]


def test_scheduler_spreads_candidates_over_every_gpu() -> None:
    sched = Scheduler("cuda", gpus=["0", "1", "2"])
    seen: list[str] = []
    lock = threading.Lock()

    def one(i: int, slot: Any) -> str:
        with lock:
            seen.append(slot.gpu)
        time.sleep(0.1)
        return slot.key

    got: dict[int, str] = {}
    run_concurrently(list(range(6)), one, 3, sched, lambda i, r: got.__setitem__(i, r))
    assert sorted(set(seen)) == ["0", "1", "2"]
    assert set(got.values()) == {"cuda:0", "cuda:1", "cuda:2"}
    # one GPU: the workers keep the launcher's own setting (no CUDA_VISIBLE_DEVICES of ours)
    with Scheduler("cuda", gpus=["3"]).slot() as s:
        assert s.gpu is None and s.key == "cuda:3"


@pytest.mark.slow
def test_two_real_candidates_overlap_probes_and_time_alone() -> None:
    pytest.importorskip("torch")
    from hackscan.dynamic import run_dynamic_stage
    from hackscan.dynamic.pool import WorkerPool
    from hackscan.engine import StaticScanner
    from hackscan.inputs import discover

    folder = FIXTURES / "dynamic" / "relu"
    subs = [s for s in discover([str(folder)]) if isinstance(s, Submission)
            and Path(s.path).name in ("legit.py", "legit_tuned_fast_path.py")]
    assert len(subs) == 2
    log: list[tuple] = []
    sched = Scheduler("cpu", gate=DeviceGate(log), gpus=[])
    sched.share = 2
    pool = WorkerPool(spares=4)
    opts = RunOptions(device="cpu", timeout=120.0, seed=7, jobs=2)
    reports: dict[int, Any] = {}
    try:
        def one(i: int, slot: Any) -> Any:
            return run_dynamic_stage(subs[i], StaticScanner(Config()).scan(subs[i]), opts, Config(), pool=pool,
                                     slot=slot)

        run_concurrently([0, 1], one, 2, sched, reports.__setitem__)
    finally:
        pool.close()
    for r in reports.values():
        assert r.dynamic.get("ran"), r.dynamic
        assert r.performance and r.performance.get("measured"), r.performance
    timings = [x for x in log if x[1] == "timing"]
    _check_exclusive(log)
    for s, r in zip(subs, (reports[0], reports[1]), strict=True):
        own = sorted((x for x in log if x[2] == s.path), key=lambda x: x[3])
        held = [x for x in own if x[1] == "timing"]
        # one exclusive hold per pair of timing workers: a fresh pair is readied under a work share
        # between them (stage._between_timings), so each hold after the first follows a work
        # interval of the same candidate
        assert len(held) == (r.performance.get("paired") or {}).get("processes") >= 2, (len(held), r.performance.get("paired"))
        for prev, nxt in zip(held, held[1:], strict=False):
            assert any(x[1] == "work" and prev[4] <= x[3] <= nxt[3] for x in own), (prev, nxt)
    assert len(timings) >= 2
    first_works = [min((x for x in log if x[1] == "work" and x[2] == s.path), key=lambda x: x[3]) for s in subs]
    # both candidates loaded and probed at the same time (their first work intervals overlap)
    assert _overlap(first_works[0], first_works[1])


def test_build_cache_option_is_checked_before_any_work(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = CliRunner().invoke(app, ["scan", "--static", "--build-cache", str(blocker / "cache"),
                                   str(FIXTURES / "dynamic" / "relu" / "legit.py")])
    assert res.exit_code != 0
    assert "--build-cache" in res.output and "Traceback" not in res.output
    ok = CliRunner().invoke(app, ["scan", "--static", "--build-cache", str(tmp_path / "cache"),
                                  str(FIXTURES / "dynamic" / "relu" / "legit.py")])
    assert ok.exit_code in (0, 1), ok.output
    assert (tmp_path / "cache").is_dir()
