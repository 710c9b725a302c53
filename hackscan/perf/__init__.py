"""The performance stage: honest speed and memory of a candidate that passed correctness.

Two halves that never share a process:

* the *worker side*, the package ``worker/`` (``measure`` with ``timing``, ``plan``,
  ``fingerprint``, ``clock``, ``baselines``, ``memory``, ``bounds``), runs inside the isolated
  workers of the dynamic stage (or ``worker/child``, the worker of the standalone runner), imports
  torch, and returns plain JSON-able dicts of raw measurements;
* the *parent side*, the modules here (``parent_side`` with ``reading``, ``paired``, ``compare``, ``stats``, ``outside``,
  ``render``, and the standalone runner ``standalone``), turns those dicts into
  ``Report.performance`` and HS6xx findings.  It never imports torch and never unpickles anything.

``options`` (with ``SCHEMA``) is the one module both halves import.  Importing this package
imports neither half: the static path stays torch-free (tests/test_sides.py).  The contract with
the dynamic stage is written down in ``hackscan/dynamic/PROTOCOL.md`` (section "perf").
"""

from __future__ import annotations

from .options import SCHEMA  # noqa: F401  (defined with the options: both sides import them)
