"""Memory rules (HS607, HS608): what the candidate's speed costs in memory, and whether it keeps
more with every call."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import Decision, rule_unit

MIB = float(1 << 20)


@rule_unit("HS607")
def memory_exceeds_reference(o: Mapping[str, Any], candidate_bytes: float, reference_bytes: float, ratio: float,
                             parts: Mapping[str, float], candidate: Mapping[str, Any],
                             reference: Mapping[str, Any]) -> Decision | None:
    """The candidate's total (tensors held, call peak, memory outside the allocator) ``ratio`` times
    the reference's and at least ``min_excess_mib`` more; ``parts`` name the largest share."""
    if not (ratio >= float(o["ratio"]) and candidate_bytes - reference_bytes >= float(o["min_excess_mib"]) * MIB):
        return None
    largest = max(parts, key=lambda k: parts[k])
    return Decision(args={"candidate_mib": candidate_bytes / MIB, "reference_mib": reference_bytes / MIB,
                          "ratio": ratio, "largest": largest, "largest_mib": parts[largest] / MIB},
                    evidence={"candidate_bytes": candidate_bytes, "reference_bytes": reference_bytes,
                              "ratio": ratio if math.isfinite(ratio) else "inf", "candidate": candidate,
                              "reference": reference})


@rule_unit("HS608")
def memory_grows_per_call(o: Mapping[str, Any], growth: float, reference_growth: float, held: Sequence[float],
                          steps: Sequence[float]) -> Decision | None:
    """Memory held after each further call on new inputs: a cache keyed by input grows by about the
    same amount with every call, an allocator warming up jumps once and stays, so every step must
    grow by ``min_mib`` beyond the reference's own growth."""
    if not steps or min(steps) - reference_growth < float(o["min_mib"]) * MIB:
        return None
    return Decision(args={"growth_mib": growth / MIB, "reference_mib": reference_growth / MIB},
                    evidence={"growth_per_call": growth, "reference_growth_per_call": reference_growth,
                              "held_after_calls": list(held)})
