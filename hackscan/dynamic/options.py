"""What the dynamic and performance stages are told: one typed set of options for every path that
reaches them (the command line's ``RunOptions``, ``hackscan.verify``, ``hackscan.Verifier``, a Ray
task).  Pure data: importing it costs nothing and pulls in neither torch nor the dynamic stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEVICES = ("auto", "cpu", "cuda")
PERF_MODES = ("target", "quick", "thorough")
BASELINES = ("eager", "tf32", "compile")


@dataclass(frozen=True)
class DynamicOptions:
    """The dynamic stage's settings for one run.

    ``device``: cpu, cuda or auto.  ``seed``: the run's secret, from which every hidden input is
    derived (None: a fresh one per candidate, stated in ``report.dynamic["seed"]`` for a replay).
    ``timeout``: seconds per candidate.  ``perf``: time candidates that pass correctness.
    ``jobs``: candidates in flight at once (timing stays exclusive per device).  ``baselines``: the
    baselines to time against (None: all on a GPU, eager on the CPU).  ``sandbox``: "required" (every
    worker in its own OS sandbox) or "off".  ``extra``: the per-run settings of the rule options
    (``perf_mode``, ``build_cache``, ``build_farm``, ``cuda_arch``, ``memory_gb``, ...)."""

    device: str = "auto"
    seed: int | None = None
    timeout: float = 120.0
    perf: bool = True
    jobs: int = 1
    baselines: tuple[str, ...] | None = None
    sandbox: str = "required"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def perf_mode(self) -> str:
        """target, quick or thorough (``--perf``)."""
        return str(self.extra.get("perf_mode") or "target")


# the name the public API (``hackscan.verify``, ``hackscan.Verifier``) documents it under
VerifyOptions = DynamicOptions
