"""Worker side of the performance stage: timing, clocks, memory, baselines and bounds, run inside a
dynamic-stage worker (``hackscan.dynamic.worker.perf``) or the standalone runner's ``child``.
Imports torch; the parent never imports it (tests/test_sides.py)."""
