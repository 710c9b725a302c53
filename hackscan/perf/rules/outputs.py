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


# The two inputs each timed series compares, in words: the finding names them.  Any other name is a
# hidden set the dynamic stage handed over (its value probes: sign_flip, shift_up, ...).
SERIES_WORDS = {
    "main": "the task's own inputs (fresh get_inputs() values on every call)",
    "mixed": "the task's inputs moved to (x - 0.5) * 4",
    "negated": "the task's inputs negated",
    "sparse": "the task's inputs with 90 % of the values exactly zero",
    "shifted": "the task's inputs shifted by +3",
    "repeat": "the values of the call just before, again, in other storage",
    "half": "the task's inputs with the batch (leading dimension) halved",
}


def curve_kind(name: str) -> str:
    """``size`` (other dimensions: the work changes, the reference's ratio says by how much),
    ``repeat`` (the same values again: the benchmark's repeated inputs are the suspect side) or
    ``value`` (other values, same work: the task's own inputs are the suspect side)."""
    return {"half": "size", "repeat": "repeat"}.get(name, "value")


# the same, short, for the message
SERIES_SHORT = {"main": "the task's inputs", "mixed": "mixed-sign inputs", "negated": "negated inputs",
                "sparse": "sparse inputs (90 % zeros)", "shifted": "inputs shifted by +3",
                "repeat": "repeated values", "half": "half the batch"}


def series_words(name: str) -> str:
    return SERIES_WORDS.get(name, f"the dynamic stage's '{name}' probe inputs")


def series_short(name: str) -> str:
    return SERIES_SHORT.get(name, f"{name} inputs")


@rule_unit("HS606")
def speedup_collapses_on_hidden_inputs(o: Mapping[str, Any], cuda: bool, distribution: str, label: str,
                                       times: Mapping[str, float], rel: float, rel_ci: Interval,
                                       pairs_slower: float, kind: str = "value",
                                       seed: Any = None) -> Decision | Undecided | None:
    """The candidate's time on a hidden series relative to its main series, divided by the
    reference's same ratio (``times["yardstick"]``): ``rel`` and its interval ``rel_ci``, oriented
    so that a large value is suspect, with ``pairs_slower`` the share of (hidden call, interleaved
    call) pairs that show it on their own: a systematic difference shows in nearly all.

    ``kind`` (``curve_kind``): for ``value`` and ``size`` series the task's own inputs are the fast
    side (a guard keyed on the test distribution, a shortcut keyed on the task's shape); for
    ``repeat`` the repeated values are (a memo keyed on contents: a benchmark that times the same
    inputs over and over sees only the memo).  Thresholds: ``ratio``, ``size_ratio``,
    ``repeat_ratio``."""
    c_m, c_h, r_m, r_h = times["candidate_main"], times["candidate_hidden"], times["reference_main"], \
        times["reference_hidden"]
    yardstick = times["yardstick"]
    min_ms = float(o["min_ms"] if cuda else o["min_ms_cpu"])
    ratio = float(o[{"size": "size_ratio", "repeat": "repeat_ratio"}.get(kind, "ratio")])
    # the time the candidate saves on the suspect side, beyond what the reference's ratio allows
    gap = c_m * yardstick - c_h if kind == "repeat" else c_h - c_m * yardstick
    others = pairs_slower >= float(o["pair_fraction"]) and gap >= min_ms
    what = {"size": "time ratio on half the batch", "repeat": "speedup on repeated values"}.get(
        kind, "slowdown on hidden inputs")
    if others and rel_ci[0] < ratio <= rel_ci[1]:
        return Undecided(f"{what} '{distribution}' {rel:.3g}x relative to the reference", rel_ci,
                         f"the ratio {ratio:g}x")
    if not (others and rel_ci[0] >= ratio):
        return None
    fast, slow = ("repeat", "main") if kind == "repeat" else ("main", distribution)
    series = {"fast": fast, "fast_inputs": series_words(fast), "other": slow, "other_inputs": series_words(slow)}
    # the inputs of every series derive from the scan's seed (the perf worker's is derived from it)
    replay = "the scan's --seed" + (f" (perf input seed {seed})" if seed is not None else "")
    if kind == "value":
        detail = (f"the speedup over {label} falls from {r_m / c_m:.3g}x on the original inputs to "
                  f"{r_h / c_h:.3g}x on {distribution} inputs")
    else:
        detail = (f"on {series_short(distribution)} the candidate takes {c_h / c_m:.3g}x its time on the task's "
                  f"inputs, {label} {r_h / r_m:.3g}x")
    return Decision(args={"baseline": label, "speedup_main": r_m / c_m, "speedup_hidden": r_h / c_h,
                          "distribution": distribution, "detail": detail, "rel": rel,
                          "fast": series_short(fast), "other": series_short(slow), "replay": replay},
                    evidence={"distribution": distribution, "curve": kind, "series": series,
                              "candidate_main_ms": c_m, "candidate_hidden_ms": c_h,
                              "reference_main_ms": r_m, "reference_hidden_ms": r_h,
                              "relative_slowdown" if kind != "repeat" else "relative_speedup": rel,
                              "relative_ci": list(rel_ci), "pairs_agreeing": pairs_slower, "pairs_slower": pairs_slower,
                              "replay": replay})
