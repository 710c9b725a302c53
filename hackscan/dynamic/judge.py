"""Parent side: from the workers' raw observations to findings.

Every comparison happens here, in the process the candidate cannot reach.  Findings follow one
discipline: a family of probes reports under its own rule only when the candidate passed the
task's own distribution (otherwise everything downstream is a consequence of one bug, reported
once as HS401); a probe the reference itself fails is skipped, never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding, Severity
from .compare import Outcome, Tolerance, compare
from .rules import custom_code, found, protocol, report, results, rule_id_of, state
from .rules import integrity as checks
from .rules.integrity import DECOY

__all__ = ["DECOY", "Judge", "Judgement", "ProbeRecord", "audit_probe_reply", "follow_order"]

MakeFinding = Callable[..., Finding]


@dataclass
class ProbeRecord:
    spec: dict[str, Any]
    status: str  # pass | half | wrong | raised | skipped | inconclusive | crashed
    outcome: Outcome | None = None
    reason: str = ""
    error: dict[str, Any] | None = None
    seconds: float | None = None
    # wall time of the probe in each worker (inputs, calls, hashing, not the transfer)
    cost: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.spec["id"], "family": self.spec["family"], "input": self.spec["description"],
                               "status": self.status, "probe_seed": self.spec["seed"]}
        if self.spec.get("dims"):
            out["dims"] = self.spec["dims"]
        if self.reason:
            out["reason"] = self.reason
        if self.outcome is not None and self.status in ("pass", "half", "wrong"):
            out["error_ratio"] = self.outcome.evidence()["error_ratio"]
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 4)
        if self.cost:
            out["cost_s"] = {k: round(v, 4) for k, v in self.cost.items()}
        if self.spec.get("steered_by"):
            out["steered_by"] = self.spec["steered_by"]
        return out


@dataclass
class Judgement:
    findings: list[Finding] = field(default_factory=list)
    records: dict[str, ProbeRecord] = field(default_factory=dict)
    integrity: list[dict[str, Any]] = field(default_factory=list)
    passed_original: bool = False
    global_changes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def correctness_passed(self) -> bool:
        return self.passed_original and not any(
            f.severity is Severity.ERROR for f in self.findings)


class Judge:
    """Gathers the facts of a run (probe records, integrity answers, reported changes) and hands
    them to the rule units (``hackscan/dynamic/rules/``), which decide the findings."""

    def __init__(self, make: MakeFinding, tol: Tolerance, base_seed: int, self_reference: bool, custom: bool,
                 options: dict[str, Any]):
        self.make = make
        self.tol = tol
        self.seed = base_seed
        self.self_reference = self_reference
        self.custom = custom
        self.options = options
        self.mutates = False

    # ------------------------------------------------------------------------------- probes
    def record(self, spec: dict[str, Any], ref: dict[str, Any] | None, cand: dict[str, Any] | None,
               crash: str | None = None) -> ProbeRecord:
        if ref is None:
            return ProbeRecord(spec, "skipped", reason="the reference produced no result for it")
        if "skipped" in ref:
            return ProbeRecord(spec, "skipped", reason=ref["skipped"])
        if crash is not None:
            return ProbeRecord(spec, "crashed", reason=crash)
        if cand is None:
            return ProbeRecord(spec, "skipped", reason="the candidate produced no result for it")
        if "error" in cand:
            return ProbeRecord(spec, "raised", reason=cand["error"].get("message", "")[-300:], error=cand["error"])
        outcome = compare(cand["out"], cand["structure"], ref["out32"], ref.get("out64"), ref["structure"], self.tol,
                          ref.get("outq"))
        if outcome.level == "skip":
            return ProbeRecord(spec, "skipped", reason=outcome.reason, outcome=outcome)
        return ProbeRecord(spec, outcome.level, outcome=outcome, seconds=cand.get("t"))

    def judge(self, records: dict[str, ProbeRecord], refs: dict[str, dict[str, Any]],
              cands: dict[str, dict[str, Any]], integrity: list[dict[str, Any]], cand_load: dict[str, Any],
              ref_changes: list[dict[str, Any]]) -> Judgement:
        j = Judgement(records=records)
        originals = [r for r in records.values() if r.spec["family"] == "original"]
        bad_orig = [r for r in originals if r.status in ("wrong", "raised", "crashed")]
        j.passed_original = bool(originals) and not bad_orig and any(r.status in ("pass", "half") for r in originals)
        if bad_orig:
            # one bug on the task's own inputs is reported once: a wrong result, or no result
            if not report(self.make, j.findings, results.wrong_result_on_fresh_inputs, bad_orig, self.seed):
                report(self.make, j.findings, protocol.candidate_does_not_run, self.seed, "call", record=bad_orig[0])
        report(self.make, j.findings, results.precision_below_float32, records, bad_orig, j.passed_original,
               self.seed)
        if j.passed_original:
            self._families(j, records)
        report(self.make, j.findings, results.degenerate_reference, refs, self.seed, self.tol.floor_ulps)
        self._integrity(j, refs, cands, integrity)
        self._changes(j, cand_load, cands, integrity, ref_changes)
        return j

    def _families(self, j: Judgement, records: dict[str, ProbeRecord]) -> None:
        small_ok = records.get("shape_smaller_odd")
        small_ok_flag = small_ok is not None and small_ok.status in ("pass", "half")
        by_family: dict[str, list[ProbeRecord]] = {}
        for r in records.values():
            if r.spec["family"] in ("original",):
                continue
            if r.spec.get("reduced_from") and not small_ok_flag and r.status not in ("pass", "half", "skipped"):
                r.status, r.reason = "inconclusive", "the candidate fails at the smaller shape itself"
                continue
            by_family.setdefault(r.spec["family"], []).append(r)
        # float32 level on the task's own inputs: then "half" at another magnitude is instability
        fp32_level = all(r.status == "pass" for r in records.values() if r.spec["family"] == "original")
        for family, recs in by_family.items():
            report(self.make, j.findings, results.FAMILY_UNITS[family], recs, self.seed, fp32_level)

    # ------------------------------------------------------------------------------- integrity
    def _integrity(self, j: Judgement, refs: dict[str, dict[str, Any]], cands: dict[str, dict[str, Any]],
                   integrity: list[dict[str, Any]]) -> None:
        ref_o = refs.get("original") or {}
        descriptions = {pid: rec.spec["description"] for pid, rec in j.records.items()}
        # inputs changed by the call, where the reference leaves them alone
        self.mutates = report(self.make, j.findings, checks.mutates_inputs, cands, refs, descriptions,
                              self.seed) is not None
        report(self.make, j.findings, checks.output_aliases_input, self.seed, cands=cands, refs=refs)
        if "skipped" in ref_o or not ref_o:
            return
        vary_rule = rule_id_of(state.result_depends_on_environment)
        for item in integrity:
            kind = item.get("kind")
            row: dict[str, Any] = {"kind": kind, "probe": item.get("probe")}
            if item.get("wall") is not None:
                row["cost_s"] = round(float(item["wall"]), 4)
            if "error" in item:
                row["status"] = "unanswered" if item.get("unanswered") else "raised"
                row["reason"] = str(item["error"].get("message", ""))[-300:]
                j.integrity.append(row)
                report(self.make, j.findings, protocol.unanswered_check, self.seed, check=item,
                       passed_original=j.passed_original)
                continue
            if kind == "repeat":
                if report(self.make, j.findings, checks.output_aliases_input, self.seed, repeat=item):
                    row["reuses_output"] = True
                report(self.make, j.findings, checks.nondeterministic_output, item, ref_o, j.passed_original,
                       self.mutates, self.tol, self.seed, row)
            elif kind == "follow":
                report(self.make, j.findings, checks.output_ignores_new_input_values, item, refs, j.passed_original,
                       self.tol, self.seed, row)
            elif kind in ("poison", "decoy"):
                report(self.make, j.findings, checks.reads_stale_memory, item, ref_o, self.tol, self.seed, row)
            elif kind == "census":
                row.update(self._census(j, item, ref_o))
            elif kind == "vary":
                # on the harness's input, or on a probe's that the candidate got right itself
                probe = item.get("probe") or "original"
                rec = j.records.get(probe)
                passed = j.passed_original and (probe == "original" or (
                    rec is not None and rec.status in ("pass", "half")))
                found_before = any(f.rule == vary_rule for f in j.findings)
                decided = state.result_depends_on_environment(
                    item, refs.get(probe) or {}, passed, self.tol, self.seed, row,
                    descriptions.get(probe) if probe != "original" else None)
                if decided is not None and not found_before:  # one finding, from the first input that shows it
                    j.findings.append(found(self.make, state.result_depends_on_environment, decided))
            j.integrity.append(row)

    def _census(self, j: Judgement, item: dict[str, Any], ref_o: dict[str, Any]) -> dict[str, Any]:
        from .census_judge import fallback_share

        share, detail = fallback_share(item.get("census") or {}, ref_o.get("census") or {})
        report(self.make, j.findings, custom_code.runtime_reference_fallback, share, detail, self.custom,
               self.options, self.seed)
        return {"status": "measured", **detail}

    # ------------------------------------------------------------------------------- global state
    def _changes(self, j: Judgement, cand_load: dict[str, Any], cands: dict[str, dict[str, Any]],
                 integrity: list[dict[str, Any]], ref_changes: list[dict[str, Any]]) -> None:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for c in cand_load.get("changes") or []:
            seen.setdefault((c["name"], c["after"]), c)
        for res in list(cands.values()) + integrity:
            for c in res.get("changes") or []:
                seen.setdefault((c["name"], c["after"]), c)
        if not self.self_reference:
            for c in ref_changes:
                seen.pop((c["name"], c["after"]), None)  # the reference does it too: part of the task
        changes = list(seen.values())
        for unit in (state.shared_process_state_changed, state.harness_function_replaced,
                     state.global_settings_changed):
            report(self.make, j.findings, unit, changes, self.seed)
        j.global_changes = changes


# ----------------------------------------------------------------------------------- answers
_MAX_STRUCTURE = 4096


def _leaf_ok(x: Any) -> bool:
    import numpy as np

    from .shared.wire import BF16Array

    return x is None or isinstance(x, (bool, np.ndarray, BF16Array))


def _leaves_ok(v: Any) -> bool:
    return isinstance(v, list) and all(_leaf_ok(x) for x in v)


def follow_order(item: dict[str, Any]) -> list[str]:
    """The source of each call of a ``follow`` check, as the plan fixes it (the candidate's own
    ``order`` is never believed: a wrong one would pair its outputs with the wrong reference)."""
    return [item["probe"] if k % 2 == 0 else item["other"] for k in range(int(item.get("cycles", 2)))]


def audit_probe_reply(msg: dict[str, Any], reply: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                                list[str]]:
    """Check a candidate's ``probe`` reply against the request ``msg``.

    Returns (probe results, integrity results, problems).  Every probe and integrity item the
    request asked for comes back exactly once: a missing, duplicated, extra or malformed answer is
    a problem (HS410), and the item is replaced by an error result so that the judge sees it as
    not passed, never as skipped.  Fields the judge reads are type-checked here, so that nothing a
    candidate writes can make the parent's own code raise.
    """
    problems: list[str] = []
    if not isinstance(reply, dict):
        reply = {}
        problems.append("the reply is not a JSON object")
    got = reply.get("probes") if isinstance(reply.get("probes"), list) else []
    if not isinstance(reply.get("probes"), list):
        problems.append("the reply has no list of probe results")
    asked = {p["id"]: p for p in msg.get("probes", [])}
    by_id: dict[str, dict[str, Any]] = {}
    for r in got:
        rid = r.get("id") if isinstance(r, dict) else None
        if not isinstance(rid, str) or rid not in asked:
            problems.append(f"an answer for a probe nobody asked for ({str(rid)[:60]!r})")
        elif rid in by_id:
            problems.append(f"two answers for probe {rid!r}")
        else:
            by_id[rid] = r
    probes: list[dict[str, Any]] = []
    for pid, p in asked.items():
        r = by_id.get(pid)
        why = None
        if r is None:
            why = "no answer"
        elif p.get("store_only"):
            why = None if r.get("stored") is True else "a stored input answered as a run"
        elif r.get("stored"):
            why = "answered 'stored' for a probe that had to run"
        elif "error" in r:
            if not isinstance(r["error"], dict):
                why = "a malformed error"
        elif not _leaves_ok(r.get("out")) or not isinstance(r.get("structure"), str) or \
                len(r["structure"]) > _MAX_STRUCTURE:
            why = "no output, or an output that is not raw tensors"
        if why is not None:
            problems.append(f"probe {pid!r}: {why}")
            r = {"id": pid, "error": {"type": "Unanswered", "message": f"the candidate's worker gave {why}"},
                 "unanswered": why}
        elif not p.get("store_only"):
            r = _typed_probe(r)
        probes.append(r)
    integrity: list[dict[str, Any]] = []
    plan = msg.get("plan") or []
    answers = reply.get("integrity") if isinstance(reply.get("integrity"), list) else []
    if plan and not isinstance(reply.get("integrity"), list):
        problems.append("the reply has no list of integrity results")
    if len(answers) > len(plan):
        problems.append(f"{len(answers) - len(plan)} integrity result(s) nobody asked for")
    for k, item in enumerate(plan):
        a = answers[k] if k < len(answers) else None
        why = _integrity_problem(item, a)
        if why is not None:
            problems.append(f"integrity check {item['kind']!r}: {why}")
            a = {"kind": item["kind"], "id": item.get("id", item["kind"]), "probe": item.get("probe"),
                 "error": {"type": "Unanswered", "message": f"the candidate's worker gave {why}"}, "unanswered": why}
        else:
            a = dict(a, kind=item["kind"], probe=item.get("probe"), other=item.get("other"))
            if item["kind"] == "follow" and "error" not in a:
                a["order"] = follow_order(item)
            if item["kind"] == "vary":
                a["conditions"] = item.get("conditions") or []  # the plan's, never the candidate's
        integrity.append(_typed_common(a))
    return probes, integrity, problems


def _integrity_problem(item: dict[str, Any], a: Any) -> str | None:
    if not isinstance(a, dict):
        return "no answer"
    if a.get("kind") != item["kind"] or a.get("probe") != item.get("probe"):
        return f"an answer for another check ({str(a.get('kind'))[:30]!r} on {str(a.get('probe'))[:30]!r})"
    if "error" in a:
        return None if isinstance(a["error"], dict) else "a malformed error"
    kind = item["kind"]
    if kind == "repeat":
        outs = a.get("outs")
        if not isinstance(outs, list) or len(outs) != 3 or not all(_leaves_ok(o) for o in outs):
            return "not the three raw outputs of the repeated calls"
    elif kind == "follow":
        outs = a.get("outs")
        if not isinstance(outs, list) or len(outs) != len(follow_order(item)) or not all(_leaves_ok(o) for o in outs):
            return "not one raw output per call"
    elif kind in ("poison", "decoy"):
        if not _leaves_ok(a.get("out")):
            return "no raw output"
    elif kind == "census":
        if not isinstance(a.get("census"), dict):
            return "no op census"
    elif kind == "vary":
        outs, errors = a.get("outs"), a.get("errors")
        n = len(item.get("conditions") or [])
        if not isinstance(outs, list) or len(outs) != n or not all(_leaves_ok(o) for o in outs) \
                or not isinstance(errors, list) or len(errors) != n \
                or not all(e is None or isinstance(e, str) for e in errors):
            return "not one raw output per condition"
    return None


def _typed_common(r: dict[str, Any]) -> dict[str, Any]:
    """Observations a candidate reports can only add findings; wrong types are dropped, not believed."""
    r = dict(r)
    if not isinstance(r.get("changes", []), list) or not all(
            isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("after"), str)
            and isinstance(c.get("kind"), str) for c in r.get("changes", [])):
        r["changes"] = []
    for key in ("wall", "t"):
        if key in r and not (isinstance(r[key], (int, float)) and not isinstance(r[key], bool)):
            r.pop(key)
    if "ext_calls" in r and not (isinstance(r["ext_calls"], int) and not isinstance(r["ext_calls"], bool)):
        r.pop("ext_calls")
    if "error" in r and isinstance(r["error"], dict):
        r["error"] = {k: v for k, v in r["error"].items() if isinstance(v, (str, int, bool)) or v is None}
        if not isinstance(r["error"].get("message", ""), str):
            r["error"]["message"] = "?"
    return r


def _typed_probe(r: dict[str, Any]) -> dict[str, Any]:
    r = _typed_common(r)
    if not isinstance(r.get("mutated", []), list) or not all(isinstance(i, int) for i in r.get("mutated", [])):
        r["mutated"] = []
    return r
