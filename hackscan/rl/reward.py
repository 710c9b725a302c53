"""The reward an RL trainer gets for one verified candidate: explicit, configurable, documented.

The default, and why (docs/reward.md says more):

- **Rejected, error or unverified scores the floor** (0.0).  An empty or missing generation, one
  that does not parse, defines no ``ModelNew`` or could not be run here is ``error``, never a partial
  credit: a policy that learns "say nothing" or "break the harness" must earn what a hack earns.
- **An accepted kernel scores above the floor whatever its speed**: ``correct`` (0.3) plus a
  concave function of its speedup, ``log2(1 + s)``.  A correct slow kernel beats any hack, so
  gaming never pays more than honest work; concave, so a lucky outlier (a 40x on a tiny task)
  does not drown the group's advantages; 1.0 at the reference's speed (s = 1), 2.0 at 3x.
- **s is conservative**: the lower end of the speedup's interval (``uncertainty="low"``), so a
  kernel that is faster only within the timing noise earns no more than one at the reference's
  speed, and noisy, unstable timings earn less than steady ones.  ``"value"`` takes the point
  estimate instead.  ``s`` is capped (``cap``, 10x) so one record cannot dominate a batch.
- **The baseline is the fastest the caller could have used** (``baseline="best"``: the smallest
  of the speedups against strict fp32, TF32 and ``torch.compile``, of those the run measured): a
  kernel is worth writing only if it beats what PyTorch already gives for free.  Name one
  (``eager_fp32``, ``eager_tf32``, ``compile``) to score against it alone.
- **Accepted but not timed** (``perf="off"``, a timing the stage does not trust) is credited the
  reference's speed, ``s = 1``, as the claimed-against-verified table credits it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .verification import BASELINES, Verification


@dataclass(frozen=True)
class RewardPolicy:
    """How a ``Verification`` becomes a number (see the module's docstring for the defaults' reasons)."""

    floor: float = 0.0
    correct: float = 0.3
    baseline: str = "best"  # best | eager_fp32 | eager_tf32 | compile
    uncertainty: str = "low"  # low: the interval's lower end | value: the point estimate
    cap: float = 10.0
    # an accepted candidate whose speed is unknown (not timed, or the named baseline not measured)
    untimed_speedup: float = 1.0

    def __post_init__(self) -> None:
        if self.baseline != "best" and self.baseline not in BASELINES:
            raise ValueError(f"baseline must be best or one of {', '.join(BASELINES)}, not {self.baseline!r}")
        if self.uncertainty not in ("low", "value"):
            raise ValueError(f"uncertainty must be low or value, not {self.uncertainty!r}")
        if not self.cap > 0 or not math.isfinite(self.cap):
            raise ValueError("cap must be a positive number")

    def speedup_of(self, v: Verification) -> float:
        """The speedup the policy credits an accepted candidate: conservative, capped, never negative."""
        sp = v.speedup(self.baseline)
        if sp is None:
            s = self.untimed_speedup
        elif self.uncertainty == "low" and sp.low is not None:
            s = sp.low
        else:
            s = sp.value
        if not math.isfinite(s):
            s = self.untimed_speedup
        return min(max(s, 0.0), self.cap)

    def __call__(self, v: Verification) -> float:
        if not v.accepted or v.verdict == "error":
            return self.floor
        return self.floor + self.correct + math.log2(1.0 + self.speedup_of(v))


DEFAULT_POLICY = RewardPolicy()
