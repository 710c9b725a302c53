"""The parent's own clock (HS609), shared by the dynamic stage and the standalone runner.

The parent asks the candidate's worker for ``spin``: ``calls`` back-to-back calls with one
device-wide synchronisation at the end, and times the request with its own clock (which the
candidate cannot reach), minus the round trip of a request that does no work.  Back-to-back calls
are no slower than separately timed ones, so a per-call time well above what the worker reported
means the report is not true.  Parent side: no torch.
"""

from __future__ import annotations

from typing import Any

from .stats import median_of, summarize

MAX_CALLS = 500
MIN_CALLS = 3


def spin_calls(candidate_raw: Any, budget_s: float) -> int | None:
    """How many back-to-back calls fill ``budget_s`` at the per-call wall time the candidate's
    worker reported (None when it reported none)."""
    if not isinstance(candidate_raw, dict):
        return None
    series = candidate_raw.get("series")
    main = series.get("main") if isinstance(series, dict) else None
    walls = main.get("wall_ms") if isinstance(main, dict) else None
    if not isinstance(walls, list):
        return None
    claimed = median_of(summarize([w for w in walls if isinstance(w, (int, float)) and not isinstance(w, bool)]))
    if claimed is None or claimed <= 0:
        return None
    return int(max(MIN_CALLS, min(MAX_CALLS, budget_s * 1e3 / claimed)))
