"""What the timed calls returned (HS603, HS606, HS610): the candidate behaves the same when timed,
and is as fast on inputs unlike the test's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...model import Confidence, Severity
from . import Decision, Undecided, rule_unit

Interval = tuple[float, float]

_REASONS = {"shape": "wrong shape", "count": "wrong number of outputs", "sum": "sums differ",
            "nonfinite": "non-finite values differ"}


@rule_unit("HS610")
def failed_while_timed(error: str | None, indices: Sequence[int], warmup: Sequence[int]) -> Decision | None:
    """The main timed series ended in an error: at which call, and its first line."""
    if not error:
        return None
    call = (indices[-1] + 1) if indices else (warmup[-1] + 1 if warmup else 0)
    first_line = error.strip().splitlines()[0] if error.strip() else "error"
    return Decision(args={"call": call, "error": first_line[:300]}, evidence={"call": call, "error": error[:1500]})


@rule_unit("HS603")
def timed_output_mismatch(o: Mapping[str, Any], checked: int, checked_keys: Sequence[str], bad: Sequence[str],
                          first: int | None, worst: Any, gross: bool, out: dict[str, Any]) -> Decision | None:
    """Fingerprints of the timed calls' outputs against the reference's on the same calls (``bad``:
    the calls that disagree, ``worst`` the worst ``compare.Agreement``).  Slightly off on every call
    from the first is precision, noted in ``out`` (the validation row), not behaviour when timed."""
    if not bad or worst is None:
        return None
    out["first"] = first
    out["calls"] = [int(k) for k in bad[:50] if str(k).isdigit()]
    reason = _REASONS.get(worst.reason, worst.reason)
    if worst.reason == "values":
        reason = f"{worst.bad_fraction:.0%} of sampled values outside tolerance (worst {worst.worst_excess:.3g}x)"
    uniform = checked_keys[0] in bad and len(bad) >= 0.8 * checked
    if not gross and uniform:
        # slightly off on every call from the very first: a precision difference, which the dynamic
        # stage judges against an fp64 reference; not behaviour that changes when timed
        out["note"] = f"outputs differ slightly on every call ({reason}): precision, not timing behaviour"
        return None
    atol, rtol = float(o["atol"]), float(o["rtol"])
    return Decision(args={"bad": len(bad), "checked": checked, "first": first, "reason": reason},
                    evidence={"calls": out["calls"], "checked": checked, "first_mismatch": first,
                              "reason": worst.reason, "worst_excess": worst.worst_excess, "details": worst.details,
                              "atol": atol, "rtol": rtol},
                    severity=None if gross else Severity.WARNING, confidence=None if gross else Confidence.MEDIUM)


@rule_unit("HS606")
def speedup_collapses_on_hidden_inputs(o: Mapping[str, Any], cuda: bool, distribution: str, label: str,
                                       times: Mapping[str, float], rel: float, rel_ci: Interval,
                                       pairs_slower: float) -> Decision | Undecided | None:
    """The candidate's slowdown on a hidden distribution relative to the reference's (``rel``, its
    interval ``rel_ci``), with ``pairs_slower`` the share of (hidden call, interleaved call) pairs
    in which the candidate was ``ratio`` times slower: a systematic slowdown shows in nearly all."""
    c_m, c_h, r_m, r_h = times["candidate_main"], times["candidate_hidden"], times["reference_main"], \
        times["reference_hidden"]
    yardstick = times["yardstick"]
    min_ms = float(o["min_ms"] if cuda else o["min_ms_cpu"])
    ratio = float(o["ratio"])
    others = pairs_slower >= float(o["pair_fraction"]) and c_h - c_m * yardstick >= min_ms
    if others and rel_ci[0] < ratio <= rel_ci[1]:
        return Undecided(f"slowdown on hidden inputs '{distribution}' {rel:.3g}x relative to the reference", rel_ci,
                         f"the ratio {ratio:g}x")
    if not (others and rel_ci[0] >= ratio):
        return None
    return Decision(args={"baseline": label, "speedup_main": r_m / c_m, "speedup_hidden": r_h / c_h,
                          "distribution": distribution},
                    evidence={"distribution": distribution, "candidate_main_ms": c_m, "candidate_hidden_ms": c_h,
                              "reference_main_ms": r_m, "reference_hidden_ms": r_h, "relative_slowdown": rel,
                              "pairs_slower": pairs_slower})
