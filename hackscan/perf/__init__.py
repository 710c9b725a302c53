"""The performance stage: honest speed and memory of a candidate that passed correctness.

Two halves that never share a process:

* the *worker side* (``worker_side``, ``timing``, ``baselines``, ``memory``, ``bounds``, ``clock``,
  ``plan``, ``fingerprint``) runs inside the isolated children of the dynamic stage, imports torch,
  and returns plain JSON-able dicts of raw measurements;
* the *parent side* (``parent_side``, ``render``, ``stats``, ``options``) turns those dicts into
  ``Report.performance`` and HS6xx findings.  It never imports torch and never unpickles anything.

Importing this package imports neither half: the static path stays torch-free.
"""

from __future__ import annotations

SCHEMA = "hackscan.perf/1"
