"""Integrity probes (HS501-HS505): what a call does besides returning the right values.

Each unit is handed the candidate's and the reference's raw probe results (already audited by
``judge.audit_probe_reply``) or one integrity check's answer, and the reference it is compared
with.  Units that judge an integrity check also fill that check's report row (``row``): its
status and the figures the decision rests on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...model import Confidence, Severity
from ..compare import Tolerance, bitwise_equal, compare, fraction_equal, max_difference
from . import Decision, rule_unit

DECOY = 1234.5


@rule_unit("HS501")
def mutates_inputs(cands: Mapping[str, Mapping[str, Any]], refs: Mapping[str, Mapping[str, Any]],
                   descriptions: Mapping[str, str], seed: int) -> Decision | None:
    """Inputs whose content hash the call changed, where the reference leaves them alone (the first
    probe that shows it)."""
    for pid, c in cands.items():
        r = refs.get(pid) or {}
        mutated = [i for i in c.get("mutated", []) if i not in (r.get("mutates_inputs") or [])]
        if mutated and "skipped" not in r:
            return Decision(
                message=(f"ModelNew writes into its input{'s' if len(mutated) > 1 else ''} "
                         f"{', '.join(f'#{i}' for i in mutated)} (content hash changed by the call; the "
                         f"reference leaves them unchanged)"),
                evidence={"probe": pid, "input": descriptions.get(pid, pid), "seed": seed, "inputs_changed": mutated})
    return None


@rule_unit("HS502")
def output_aliases_input(seed: int, cands: Mapping[str, Mapping[str, Any]] | None = None,
                         refs: Mapping[str, Mapping[str, Any]] | None = None,
                         repeat: Mapping[str, Any] | None = None) -> Decision | None:
    """An output sharing memory with an input (``cands``/``refs``: the probes' results), or the same
    output buffer handed back by every call (``repeat``: the repeat check's answer)."""
    if repeat is not None:
        if not (repeat.get("reuses_output") or repeat.get("clobbered")):
            return None
        return Decision(
            message=("ModelNew returns the same output buffer on every call: an earlier call's result is "
                     "overwritten by the next call"),
            evidence={"probe": "original", "seed": seed, "aliases": "earlier output",
                      "clobbered": bool(repeat.get("clobbered"))})
    cands, refs = cands or {}, refs or {}
    for pid, c in cands.items():
        r = refs.get(pid) or {}
        if c.get("aliases_input") and not r.get("aliases_input") and "skipped" not in r:
            return Decision(
                message="ModelNew returns a tensor that shares memory with an input (the reference returns a new tensor)",
                evidence={"probe": pid, "seed": seed, "aliases": "input"},
                severity=Severity.ERROR if any(x.get("mutated") for x in cands.values()) else None)
    return None


@rule_unit("HS503")
def output_ignores_new_input_values(item: Mapping[str, Any], refs: Mapping[str, Mapping[str, Any]],
                                    passed_original: bool, tol: Tolerance, seed: int,
                                    row: dict[str, Any]) -> Decision | None:
    """The ``follow`` check: the same input buffers refilled with a second draw between calls; each
    output must match the reference of what the buffers held at that call."""
    outs, order = item.get("outs") or [], item.get("order") or []
    if not passed_original:
        row["status"] = "not judged"
        return None
    ra, rb = refs.get(item["probe"]), refs.get(item["other"])
    if not ra or not rb or "skipped" in ra or "skipped" in rb:
        row["status"] = "skipped"
        return None
    sens = compare(rb["out32"], ra["structure"], ra["out32"], ra.get("out64"), ra["structure"], tol)
    if sens.level == "pass":
        row["status"] = "skipped"
        row["reason"] = "the reference's output does not change between the two inputs"
        return None
    for k, (out, src) in enumerate(zip(outs, order, strict=False)):
        ref = refs[src]
        o = compare(out, ref["structure"], ref["out32"], ref.get("out64"), ref["structure"], tol, ref.get("outq"))
        if o.level == "wrong":
            row["status"] = "wrong"
            stale = compare(out, ref["structure"], refs[order[k - 1]]["out32"], refs[order[k - 1]].get("out64"),
                            ref["structure"], tol).level == "pass" if k else False
            why = "it returned the previous call's result" if stale else "its output is wrong"
            # the second source is a fresh draw, or the first one with two elements swapped (a memo
            # keyed on a sample of the input): the message says which
            nudged = item["other"] == "original_nudged"
            holding = "the same values with two of them swapped" if nudged else "new values"
            refill = ("the first draw with two elements of each float input swapped, far apart" if nudged
                      else "a second fresh draw")
            return Decision(
                message=(f"ModelNew does not follow its input: called again on the same buffers holding {holding} "
                         f"(call {k + 1}), {why}"),
                evidence=dict(o.evidence(), probe="follow", input=f"the same input tensors refilled in place with {refill}",
                              seed=seed, call=k + 1, returned_previous_result=stale))
    row["status"] = "pass"
    return None


@rule_unit("HS504")
def nondeterministic_output(item: Mapping[str, Any], ref_o: Mapping[str, Any], passed_original: bool,
                            mutates: bool, tol: Tolerance, seed: int, row: dict[str, Any]) -> Decision | None:
    """The ``repeat`` check: calls on the same input must agree as well as the reference's own runs
    do; beyond the tolerance an error, within it (not bitwise) information."""
    outs = item.get("outs") or []
    if len(outs) < 2 or not passed_original:
        row["status"] = "not judged"
        return None
    ref_nd = max_difference(ref_o["out32"], ref_o.get("out32b") or ref_o["out32"])
    worst = 0.0
    equal = True
    if mutates and len(outs) > 2:
        # a second call on tensors the first call overwrote sees other inputs: HS501 says so; only
        # the call on fresh copies can show nondeterminism
        outs = [outs[0], outs[2]]
        row["compared"] = "fresh copies only (the candidate writes into its inputs)"
    for o in outs[1:]:
        if not bitwise_equal(outs[0], o):
            equal = False
            worst = max(worst, max_difference(outs[0], o))
    row["bitwise_equal"] = equal
    row["max_difference"] = worst
    row["reference_nondeterminism"] = ref_nd
    if equal or worst <= ref_nd:
        row["status"] = "pass"
        return None
    own = compare(ref_o["out32"], "", ref_o["out32"], ref_o.get("out64"), "", tol).threshold
    threshold = max(own, ref_nd)
    if worst > threshold:
        row["status"] = "wrong"
        return Decision(
            message=(f"two calls of ModelNew on the same input differ by {worst:.3g}, beyond the tolerance "
                     f"({threshold:.3g}); the reference's own run-to-run difference is {ref_nd:.3g}"),
            evidence={"probe": "original", "seed": seed, "max_abs_error": worst, "threshold": threshold,
                      "reference_nondeterminism": ref_nd})
    row["status"] = "nondeterministic within tolerance"
    return Decision(
        message=(f"two calls of ModelNew on the same input are not bitwise equal (max difference {worst:.3g}, within "
                 f"tolerance); the reference is {'not ' if ref_nd else ''}bitwise reproducible"),
        evidence={"probe": "original", "seed": seed, "max_abs_error": worst, "reference_nondeterminism": ref_nd},
        severity=Severity.INFO, confidence=Confidence.MEDIUM)


@rule_unit("HS505")
def reads_stale_memory(item: Mapping[str, Any], ref_o: Mapping[str, Any], tol: Tolerance, seed: int,
                       row: dict[str, Any]) -> Decision | None:
    """The ``poison`` check (free memory filled with NaN: NaN in the output the reference lacks) and
    the ``decoy`` check (freed blocks planted with a value that then shows up in the output)."""
    out = item.get("out") or []
    if item["kind"] == "poison":
        o = compare(out, ref_o["structure"], ref_o["out32"], ref_o.get("out64"), ref_o["structure"], tol,
                    ref_o.get("outq"))
        nan_frac = fraction_equal(out, float("nan"))
        ref_nan = fraction_equal(ref_o["out32"], float("nan"))
        row["status"] = o.level
        row["nan_fraction"] = nan_frac
        if o.level == "wrong" and nan_frac > ref_nan:
            return Decision(
                message=(f"ModelNew returns memory it never wrote: with free memory poisoned with NaN, {nan_frac:.1%} "
                         "of its output is NaN (the reference has none there)"),
                evidence=dict(o.evidence(), probe="poison", input="get_inputs() with a fresh seed; freed and new "
                                                                  "memory filled with NaN before the call",
                              seed=seed, nan_fraction=nan_frac))
        return None
    frac = fraction_equal(out, DECOY)
    row["status"] = "pass" if frac == 0 else "wrong"
    row["decoy_fraction"] = frac
    if frac > 0.001:
        return Decision(
            message=(f"ModelNew returns stale memory: {frac:.1%} of its output holds the value {DECOY} planted in "
                     "freed blocks just before the call"),
            evidence={"probe": "decoy", "input": "get_inputs() with a fresh seed; freed blocks of the output's size "
                                                 f"filled with {DECOY} before the call", "seed": seed,
                      "decoy_fraction": frac})
    return None
