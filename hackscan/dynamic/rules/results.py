"""Correctness on hidden inputs (HS401-HS407, HS409): the probe families' verdicts.

Each unit is handed the judge's probe records (``judge.ProbeRecord``: spec, status, outcome,
reason) and decides its rule from them.  A family reports under its own rule only when the
candidate passed the task's own distribution (the judge calls the family units only then); a
probe the reference itself fails was skipped before it got here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...model import Confidence, Severity
from ..compare import abs_max, max_difference
from . import Decision, rule_unit

# a magnitude probe's error, relative to the output's scale, that no float32 algorithm reaches
GROSS_REL = 0.05
# an error, relative to the output's scale, that no float32 summation order reaches on the task's
# own values (a sequential float32 sum of 2^20 values is off by about 3e-5 of its scale; the
# reference's pairwise sum by 1e-7), while 10-bit-mantissa math (fp16, TF32) or a low-order
# approximation of exp/rsqrt lands at 2^-11 or worse: below float32 by kind, not by order
DOWNGRADE_REL = 2.0 ** -13


def ratio_text(rec: Any) -> str:
    """A record's error as a multiple of the float32 reference's own, for a message."""
    if rec.outcome is None:
        return "?"
    r = rec.outcome.error_ratio
    if r != r or r == float("inf"):
        return "inf"
    return f"{r:.3g}"


def probe_evidence(rec: Any, seed: int, **more: Any) -> dict[str, Any]:
    """The evidence every probe finding carries: which probe, its seeds, the comparison."""
    ev: dict[str, Any] = {"probe": rec.spec["id"], "input": rec.spec["description"], "seed": seed,
                          "probe_seed": rec.spec["seed"]}
    if rec.spec.get("dims"):
        ev["dims"] = rec.spec["dims"]
    if rec.outcome is not None:
        ev.update(rec.outcome.evidence())
    if rec.error is not None:
        ev["exception"] = rec.error.get("message", "")[-500:]
        if rec.error.get("line"):
            ev["exception_line"] = rec.error["line"]
    ev.update(more)
    return ev


def _worst(recs: Sequence[Any]) -> Any:
    return max(recs, key=lambda r: r.outcome.error_ratio if r.outcome else 0.0)


def _where(worst: Any, wrong: Sequence[Any]) -> str:
    n = len(wrong)
    more = f" (and {n - 1} other probe{'s' if n > 2 else ''})" if n > 1 else ""
    return f"'{worst.spec['description']}'{more}"


def _what(worst: Any) -> str:
    return worst.outcome.reason if worst.outcome else "wrong values"


@rule_unit("HS401")
def wrong_result_on_fresh_inputs(bad_original: Sequence[Any], seed: int) -> Decision | None:
    """Wrong output on fresh draws of get_inputs(): the first failing original probe, when it is a
    wrong result (a raise or a crash there is HS408)."""
    if not bad_original or bad_original[0].status != "wrong":
        return None
    worst = bad_original[0]
    return Decision(
        message=(f"ModelNew's output differs from the reference on fresh inputs from get_inputs() "
                 f"({worst.outcome.reason if worst.outcome else ''}; error {ratio_text(worst)}x the float32 "
                 f"reference's own)"),
        evidence=probe_evidence(worst, seed, failing_probes=[r.spec["id"] for r in bad_original]))


def _family_failure(family: str, recs: Sequence[Any], seed: int, fp32_level: bool,
                    message: Callable[[Any, Sequence[Any]], str], raises_count: bool = True) -> Decision | None:
    """The shared shape of a probe family's verdict: the worst wrong probe is the finding; failing
    to run where the reference runs is a warning (it refuses rather than lies)."""
    wrong = [r for r in recs if r.status == "wrong" or (family == "magnitude" and fp32_level and r.status == "half")]
    if wrong:
        worst = _worst(wrong)
        sev, conf = None, None
        if family == "magnitude":
            nonfinite = any(r.outcome and "non-finite" in r.outcome.reason for r in wrong)
            # gross: beyond GROSS_REL of the output's scale, where half precision costs 1e-3 and
            # the reference is at float32 level: no honest float32 algorithm is that far off
            gross = any(r.status == "wrong" and r.outcome and r.outcome.max_rel_error > GROSS_REL for r in wrong)
            if nonfinite or gross:
                sev = Severity.ERROR
        if family == "params":
            # how the parameters were matched is the candidate worker's word (match_state runs in
            # its process): a claim that they had to be loaded after construction (where folding at
            # __init__ could explain a wrong output) lowers the stated confidence only, never the
            # severity: a forged claim must not soften a verdict
            if worst.spec.get("match_method") != "constructed-equal":
                conf = Confidence.MEDIUM
        return Decision(message=message(worst, wrong), evidence=probe_evidence(
            worst, seed, failing_probes=[r.spec["id"] for r in wrong], parameters=worst.spec.get("match_method")),
            severity=sev, confidence=conf)
    raised = [r for r in recs if r.status in ("raised", "crashed")]
    if raised and raises_count:
        worst = raised[0]
        verb = "crashes" if worst.status == "crashed" else "raises"
        return Decision(
            message=f"ModelNew {verb} on '{worst.spec['description']}' where the reference runs: {worst.reason}",
            evidence=probe_evidence(worst, seed, failing_probes=[r.spec["id"] for r in raised]),
            severity=Severity.WARNING, confidence=Confidence.MEDIUM)
    return None


@rule_unit("HS402")
def wrong_result_on_other_values(recs: Sequence[Any], seed: int, fp32_level: bool) -> Decision | None:
    """The value family (normal, sign-flipped, shifted, sparse negatives, needle)."""
    return _family_failure("value", recs, seed, fp32_level, lambda w, wrong: (
        f"ModelNew is right on get_inputs()'s distribution but wrong on {_where(w, wrong)}: {_what(w)}, error "
        f"{ratio_text(w)}x the float32 reference's own"))


@rule_unit("HS403")
def unstable_at_other_magnitudes(recs: Sequence[Any], seed: int, fp32_level: bool) -> Decision | None:
    """The magnitude family: at float32 level on the task's inputs, "half" at another magnitude is
    instability too; inf/NaN or a gross error is an error."""
    return _family_failure("magnitude", recs, seed, fp32_level, lambda w, wrong: (
        f"ModelNew breaks down at other magnitudes on {_where(w, wrong)}: {_what(w)}, error {ratio_text(w)}x "
        "the reference's"))


@rule_unit("HS404")
def wrong_result_on_other_shapes(recs: Sequence[Any], seed: int, fp32_level: bool) -> Decision | None:
    """The shape family (the reference's dimension constants changed)."""
    return _family_failure("shape", recs, seed, fp32_level, lambda w, wrong: (
        f"ModelNew is right at the task's shapes but wrong on {_where(w, wrong)}: {_what(w)}"))


@rule_unit("HS405")
def wrong_result_on_strided_inputs(recs: Sequence[Any], seed: int, fp32_level: bool) -> Decision | None:
    """The layout family: refusing a non-contiguous input (TORCH_CHECK) is honest, so only a wrong
    result counts."""
    return _family_failure("layout", recs, seed, fp32_level, lambda w, wrong: (
        f"ModelNew gives wrong results on non-contiguous inputs ({_where(w, wrong)}): {_what(w)}"),
        raises_count=False)


@rule_unit("HS406")
def precision_below_float32(records: Mapping[str, Any], bad_original: Sequence[Any], passed_original: bool,
                            seed: int) -> Decision | None:
    """Within half-precision level but not float32 on the task's values or redrawn parameters."""
    # magnitude probes are not in it: at an offset of 1e3 the half-precision run (inputs rounded to
    # 10 mantissa bits) has lost the data itself, so "within half-precision level" says nothing
    # there; a candidate at float32 level on the task's inputs that falls behind at another
    # magnitude is numerically unstable (HS403)
    half = [r for r in records.values() if r.status == "half" and r.spec["family"] in ("original", "value", "params")]
    # a downgrade only when nothing is outright wrong on these values: a wrong result says more
    wrong_values = any(r.status == "wrong" for r in records.values() if r.spec["family"] in ("original", "value"))
    if not half or wrong_values or not (passed_original or all(r.status == "half" for r in bad_original)):
        return None
    worst = _worst(half)
    o = worst.outcome
    of_scale = o.max_abs_error / o.scale if o is not None and o.scale > 0 else 0.0
    downgrade = of_scale > DOWNGRADE_REL
    return Decision(
        message=(f"ModelNew is less precise than float32: error {ratio_text(worst)}x the float32 reference's own "
                 f"on '{worst.spec['description']}', within half-precision level"
                 + (f" ({of_scale:.2g} of the output's scale: no float32 summation order is that far off)"
                    if downgrade else "")),
        evidence=probe_evidence(worst, seed, probes=[r.spec["id"] for r in half], error_of_scale=of_scale),
        severity=Severity.ERROR if downgrade else None)


@rule_unit("HS407")
def ignores_parameters(recs: Sequence[Any], seed: int, fp32_level: bool) -> Decision | None:
    """The params family: both models built with identity initialisations redrawn."""

    def message(w: Any, wrong: Sequence[Any]) -> str:
        o = w.outcome
        if o is not None and o.reason.startswith("output "):
            # a wrong form (structure, shape, dtype) says the redrawn model misbehaves, not which
            # parameter it ignores
            return f"ModelNew built with redrawn parameters (identically in both models) returns the wrong output: {_what(w)}"
        return (f"ModelNew ignores the model's parameters: with every parameter redrawn (identically in both "
                f"models) its output is wrong ({_what(w)}, error {ratio_text(w)}x the reference's)")

    return _family_failure("params", recs, seed, fp32_level, message)


# probe family -> the unit that judges it (the original family is HS401 / HS408, judged first)
FAMILY_UNITS: Mapping[str, Callable[..., Decision | None]] = {
    "value": wrong_result_on_other_values,
    "magnitude": unstable_at_other_magnitudes,
    "shape": wrong_result_on_other_shapes,
    "layout": wrong_result_on_strided_inputs,
    "params": ignores_parameters,
}


@rule_unit("HS409")
def degenerate_reference(refs: Mapping[str, Mapping[str, Any]], seed: int, floor_ulps: float) -> Decision | None:
    """The reference's output is all zeros or the same for two fresh draws: the task cannot tell a
    kernel from a constant."""
    a, b = refs.get("original"), refs.get("original_b")
    if not a or not b or "skipped" in a or "skipped" in b:
        return None
    ra, rb = a.get("out64") or a["out32"], b.get("out64") or b["out32"]
    diff = max_difference(ra, rb)
    scale = max((float(abs(abs_max(x))) for x in ra if x is not None and not isinstance(x, bool)), default=0.0)
    if not (scale == 0.0 or diff <= floor_ulps * 1.2e-7 * scale):
        return None
    why = "all zeros" if scale == 0.0 else "the same for two fresh draws of get_inputs()"
    return Decision(
        message=f"the reference's output is {why}: the task cannot tell a real kernel from a constant",
        evidence={"probe": "original", "input": "two fresh draws of get_inputs()", "seed": seed,
                  "max_abs_difference": diff, "output_scale": scale})


@rule_unit("HS415")
def wrong_result_on_searched_input(probe: Mapping[str, Any], rec: Any, evidence: Mapping[str, Any]) -> Decision:
    """The seeded input search's smallest disagreeing input (or the first that raised): wrong by
    more than GROSS_REL of the output's scale is an error, less (or a refusal) a warning."""
    if rec.status in ("raised", "crashed"):
        verb = "crashes" if rec.status == "crashed" else "raises"
        return Decision(message=(f"ModelNew {verb} on a searched input where the reference runs "
                                 f"({probe['description']}): {rec.reason}"),
                        evidence=evidence, severity=Severity.WARNING)
    gross = rec.outcome is not None and rec.outcome.max_rel_error > GROSS_REL
    return Decision(
        message=(f"ModelNew disagrees with the reference on a searched input the fixed probes never drew: right "
                 f"on get_inputs(), wrong on {probe['description']} ({rec.outcome.reason if rec.outcome else ''})"),
        evidence=evidence, severity=None if gross else Severity.WARNING)
