"""Defensive reading of the workers' raw measurements, parent side: a field of the wrong type or
not finite reads as missing, never as an exception (both workers ran untrusted code)."""
from __future__ import annotations

import math
from typing import Any


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _f(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _floats(x: Any) -> list[float]:
    if not isinstance(x, list):
        return []
    return [v for v in (_f(e) for e in x[:100_000]) if v is not None]


def _s(x: Any, limit: int = 500) -> str:
    return str(x)[:limit] if x is not None else ""


def _spread_words(spread: float | None, goal: str | None = None) -> str:
    """``spread +-3.1% > target +-5%``; "too noisy to tell" for a spread of 100 % or more (a
    figure like +-731693.8% says nothing a reader can use); "spread unknown" without one."""
    from .words import TOO_NOISY
    from .words import spread as spread_text

    if spread is None:
        return "spread unknown"
    shown = spread_text(spread)
    if shown == TOO_NOISY:
        return TOO_NOISY
    return f"spread {shown}" + (f" > target {goal}" if goal else "")
