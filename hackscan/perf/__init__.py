"""The performance stage: honest speed and memory of a candidate that passed correctness.

Two halves that never share a process:

* the *worker side* (``worker_side`` with ``timing``, ``plan``, ``fingerprint``, ``clock``,
  ``baselines``, ``memory``, ``bounds``) runs inside the isolated workers of the dynamic stage (or
  ``child``, the worker of the standalone runner), imports torch, and returns plain JSON-able dicts
  of raw measurements;
* the *parent side* (``parent_side`` with ``compare``, ``stats``, ``options``, ``render``, and the
  standalone runner ``standalone``) turns those dicts into ``Report.performance`` and HS6xx
  findings.  It never imports torch and never unpickles anything.

Importing this package imports neither half: the static path stays torch-free.  The contract with
the dynamic stage is written down in ``hackscan/dynamic/PROTOCOL.md`` (section "perf").
"""

from __future__ import annotations

from .options import SCHEMA  # noqa: F401  (defined with the options: both sides import them)
