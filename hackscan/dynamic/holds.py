"""A candidate's holds on its device's gate (schedule.py) during its dynamic run: the shared work
hold while it loads and is probed, the exclusive hold while it is timed, and the device given back
while fresh timing workers get ready.  A mixin of ``stage.DynamicRun``."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..model import Finding


class DeviceHolds:
    """``DynamicRun``'s holds on ``self.slot.gate`` (none when the candidate runs alone)."""

    def _hold_work(self) -> None:
        """Loading, building and probing share the device with other candidates' (schedule.py)."""
        if self.slot is not None and self._work_held is None:
            self._work_held = self.slot.gate.work(self.slot.key, self.sub.path)
            self._work_held.__enter__()

    def _release_work(self) -> None:
        if self._work_held is not None:
            held, self._work_held = self._work_held, None
            held.__exit__(None, None, None)

    def _exclusive(self, zygote: Any, fn: Callable[[], list[Finding]]) -> list[Finding]:
        """``fn`` (the timing) with the device to itself: this candidate's work share is given up
        first (else two candidates waiting to be timed would wait on each other), and on the CPU the
        spare workers still importing torch are waited for, as their start-up is CPU work too.
        Inside ``fn``, ``_between_timings`` gives the device back while fresh timing workers load."""
        if self.slot is None:
            return fn()
        self._release_work()
        self._timing_zygote = zygote
        t = time.perf_counter()
        try:
            self._take_timing()
            self.timings["timing_wait_s"] = time.perf_counter() - t
            return fn()
        finally:
            self._drop_timing()
            self._hold_work()

    def _take_timing(self) -> None:
        held = self.slot.gate.timing(self.slot.key, self.sub.path)
        held.__enter__()
        self._timing_held = held
        if self.slot.key == "cpu" and hasattr(self._timing_zygote, "quiet"):
            self._timing_zygote.quiet()

    def _drop_timing(self) -> None:
        if self._timing_held is not None:
            held, self._timing_held = self._timing_held, None
            held.__exit__(None, None, None)

    @contextmanager
    def _between_timings(self) -> Iterator[None]:
        """Inside ``_exclusive``: the device shared again while a fresh pair of timing workers is
        started, loaded and given its inputs (GPU work, but no measurement), then taken back
        exclusively for that pair's rounds.  Held through the readying, the exclusive gate kept
        every other candidate's probes off the GPU for 6-9 s per pair (25.6 s of a 38 s exclusive
        hold were the fresh pairs); only the rounds need the device alone."""
        if self.slot is None or self._timing_held is None:
            yield
            return
        self._drop_timing()
        self._hold_work()
        try:
            yield
        finally:
            self._release_work()
            t = time.perf_counter()
            self._take_timing()
            self.timings["timing_wait_s"] = self.timings.get("timing_wait_s", 0.0) + time.perf_counter() - t
