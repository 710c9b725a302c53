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

from ..model import Confidence, Finding, Severity
from .compare import Outcome, Tolerance, bitwise_equal, compare, fraction_equal, max_difference
from .shared.probes import FAMILY_RULES

DECOY = 1234.5
# a magnitude probe's error, relative to the output's scale, that no float32 algorithm reaches
GROSS_REL = 0.05

R_WRONG_FRESH = "HS401"
R_WRONG_VALUES = "HS402"
R_MAGNITUDE = "HS403"
R_SHAPES = "HS404"
R_STRIDED = "HS405"
R_PRECISION = "HS406"
R_PARAMS = "HS407"
R_DOES_NOT_RUN = "HS408"
R_DEGENERATE = "HS409"
R_MUTATES = "HS501"
R_ALIASES = "HS502"
R_STALE_FOLLOW = "HS503"
R_NONDETERMINISTIC = "HS504"
R_UNINITIALIZED = "HS505"
R_TAMPER = "HS506"
R_FLAGS = "HS507"
R_FALLBACK = "HS508"
R_ENVIRONMENT = "HS414"
R_WORLD = "HS509"

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
    def __init__(self, make: MakeFinding, tol: Tolerance, base_seed: int, self_reference: bool, custom: bool,
                 options: dict[str, Any]):
        self.make = make
        self.tol = tol
        self.seed = base_seed
        self.self_reference = self_reference
        self.custom = custom
        self.options = options
        self.mutates = False

    # ------------------------------------------------------------------------------- helpers
    def _evidence(self, rec: ProbeRecord, **more: Any) -> dict[str, Any]:
        ev: dict[str, Any] = {"probe": rec.spec["id"], "input": rec.spec["description"], "seed": self.seed,
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
            worst = bad_orig[0]
            if worst.status == "wrong":
                j.findings.append(self.make(R_WRONG_FRESH,
                                            f"ModelNew's output differs from the reference on fresh inputs from "
                                            f"get_inputs() ({worst.outcome.reason if worst.outcome else ''}; error "
                                            f"{_ratio(worst)}x the float32 reference's own)",
                                            self._evidence(worst, failing_probes=[r.spec["id"] for r in bad_orig])))
            else:
                j.findings.append(self.make(R_DOES_NOT_RUN,
                                            f"ModelNew fails on the task's own inputs: {worst.reason}",
                                            self._evidence(worst, phase="call")))
        # magnitude probes are not in it: at an offset of 1e3 the half-precision run (inputs rounded to
        # 10 mantissa bits) has lost the data itself, so "within half-precision level" says nothing
        # there; a candidate at float32 level on the task's inputs that falls behind at another
        # magnitude is numerically unstable (HS403, _families)
        half = [r for r in records.values() if r.status == "half" and r.spec["family"] in ("original", "value",
                                                                                            "params")]
        # a downgrade only when nothing is outright wrong on these values: a wrong result says more
        wrong_values = any(r.status == "wrong" for r in records.values() if r.spec["family"] in ("original", "value"))
        if half and not wrong_values and (j.passed_original or all(r.status == "half" for r in bad_orig)):
            worst = max(half, key=lambda r: r.outcome.error_ratio if r.outcome else 0.0)
            j.findings.append(self.make(R_PRECISION,
                                        f"ModelNew is less precise than float32: error {_ratio(worst)}x the float32 "
                                        f"reference's own on '{worst.spec['description']}', within half-precision level",
                                        self._evidence(worst, probes=[r.spec["id"] for r in half])))
        if j.passed_original:
            self._families(j, records)
        self._degenerate(j, refs)
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
            rule = FAMILY_RULES[family]
            wrong = [r for r in recs if r.status == "wrong" or (family == "magnitude" and fp32_level
                                                                and r.status == "half")]
            raised = [r for r in recs if r.status in ("raised", "crashed")]
            if family == "layout":
                raised = []  # refusing a non-contiguous input (TORCH_CHECK) is honest
            if wrong:
                worst = max(wrong, key=lambda r: r.outcome.error_ratio if r.outcome else 0.0)
                sev, conf = None, None
                nonfinite = any(r.outcome and "non-finite" in r.outcome.reason for r in wrong)
                # gross: beyond GROSS_REL of the output's scale, where half precision costs 1e-3 and
                # the reference is at float32 level: no honest float32 algorithm is that far off
                gross = any(r.status == "wrong" and r.outcome and r.outcome.max_rel_error > GROSS_REL for r in wrong)
                if family == "magnitude" and (nonfinite or gross):
                    sev = Severity.ERROR
                if family == "params":
                    # how the parameters were matched is the candidate worker's word (match_state
                    # runs in its process): a claim that they had to be loaded after construction
                    # (where folding at __init__ could explain a wrong output) lowers the stated
                    # confidence only, never the severity: a forged claim must not soften a verdict
                    match = worst.spec.get("match_method")
                    if match != "constructed-equal":
                        conf = Confidence.MEDIUM
                j.findings.append(self.make(rule, self._message(family, worst, wrong), self._evidence(
                    worst, failing_probes=[r.spec["id"] for r in wrong],
                    parameters=worst.spec.get("match_method")), severity=sev, confidence=conf))
            elif raised and family in ("value", "shape", "magnitude", "params"):
                worst = raised[0]
                verb = "crashes" if worst.status == "crashed" else "raises"
                j.findings.append(self.make(
                    rule, f"ModelNew {verb} on '{worst.spec['description']}' where the reference runs: {worst.reason}",
                    self._evidence(worst, failing_probes=[r.spec["id"] for r in raised]),
                    severity=Severity.WARNING, confidence=Confidence.MEDIUM))

    @staticmethod
    def _message(family: str, worst: ProbeRecord, wrong: list[ProbeRecord]) -> str:
        o = worst.outcome
        what = o.reason if o else "wrong values"
        n = len(wrong)
        more = f" (and {n - 1} other probe{'s' if n > 2 else ''})" if n > 1 else ""
        where = f"'{worst.spec['description']}'{more}"
        if family == "value":
            return (f"ModelNew is right on get_inputs()'s distribution but wrong on {where}: {what}, error "
                    f"{_ratio(worst)}x the float32 reference's own")
        if family == "magnitude":
            return f"ModelNew breaks down at other magnitudes on {where}: {what}, error {_ratio(worst)}x the reference's"
        if family == "shape":
            return f"ModelNew is right at the task's shapes but wrong on {where}: {what}"
        if family == "layout":
            return f"ModelNew gives wrong results on non-contiguous inputs ({where}): {what}"
        if family == "params":
            if o is not None and o.reason.startswith("output "):
                # a wrong form (structure, shape, dtype) says the redrawn model misbehaves, not which
                # parameter it ignores
                return (f"ModelNew built with redrawn parameters (identically in both models) returns the wrong "
                        f"output: {what}")
            return (f"ModelNew ignores the model's parameters: with every parameter redrawn (identically in both "
                    f"models) its output is wrong ({what}, error {_ratio(worst)}x the reference's)")
        return f"ModelNew is wrong on {where}: {what}"

    def _degenerate(self, j: Judgement, refs: dict[str, dict[str, Any]]) -> None:
        a, b = refs.get("original"), refs.get("original_b")
        if not a or not b or "skipped" in a or "skipped" in b:
            return
        ra, rb = a.get("out64") or a["out32"], b.get("out64") or b["out32"]
        diff = max_difference(ra, rb)
        scale = max((float(abs(_amax(x))) for x in ra if x is not None and not isinstance(x, bool)), default=0.0)
        if scale == 0.0 or diff <= self.tol.floor_ulps * 1.2e-7 * scale:
            why = ("all zeros" if scale == 0.0 else "the same for two fresh draws of get_inputs()")
            j.findings.append(self.make(
                R_DEGENERATE, f"the reference's output is {why}: the task cannot tell a real kernel from a constant",
                {"probe": "original", "input": "two fresh draws of get_inputs()", "seed": self.seed,
                 "max_abs_difference": diff, "output_scale": scale}))

    # ------------------------------------------------------------------------------- integrity
    def _integrity(self, j: Judgement, refs: dict[str, dict[str, Any]], cands: dict[str, dict[str, Any]],
                   integrity: list[dict[str, Any]]) -> None:
        ref_o = refs.get("original") or {}
        self.mutates = False
        # inputs changed by the call, where the reference leaves them alone
        for pid, c in cands.items():
            r = refs.get(pid) or {}
            mutated = [i for i in c.get("mutated", []) if i not in (r.get("mutates_inputs") or [])]
            if mutated and "skipped" not in r:
                self.mutates = True
                j.findings.append(self.make(
                    R_MUTATES, f"ModelNew writes into its input{'s' if len(mutated) > 1 else ''} "
                               f"{', '.join(f'#{i}' for i in mutated)} (content hash changed by the call; the "
                               f"reference leaves them unchanged)",
                    {"probe": pid, "input": (j.records.get(pid).spec["description"] if pid in j.records else pid),
                     "seed": self.seed, "inputs_changed": mutated}))
                break
        for pid, c in cands.items():
            r = refs.get(pid) or {}
            if c.get("aliases_input") and not r.get("aliases_input") and "skipped" not in r:
                j.findings.append(self.make(
                    R_ALIASES, "ModelNew returns a tensor that shares memory with an input (the reference returns "
                               "a new tensor)", {"probe": pid, "seed": self.seed, "aliases": "input"},
                    severity=Severity.ERROR if any(x.get("mutated") for x in cands.values()) else None))
                break
        if "skipped" in ref_o or not ref_o:
            return
        for item in integrity:
            kind = item.get("kind")
            row: dict[str, Any] = {"kind": kind, "probe": item.get("probe")}
            if item.get("wall") is not None:
                row["cost_s"] = round(float(item["wall"]), 4)
            if "error" in item:
                row["status"] = "unanswered" if item.get("unanswered") else "raised"
                row["reason"] = str(item["error"].get("message", ""))[-300:]
                j.integrity.append(row)
                if not item.get("unanswered") and j.passed_original:
                    # a candidate that runs on the task's inputs but raises inside a check dodges
                    # what the check would show (a cache, a reused buffer, stale memory): not
                    # answered is not passed.  The census runs under hackscan's own dispatch mode
                    # or profiler, which a legitimate extension can trip: a warning there
                    census = kind == "census"
                    j.findings.append(self.make(
                        R_UNANSWERED, f"ModelNew raises inside the '{kind}' integrity check, which therefore "
                                      f"says nothing: {row['reason'][-200:]}",
                        {"probe": kind, "input": "get_inputs() with a fresh seed", "seed": self.seed,
                         "check": kind, "exception": row["reason"]},
                        severity=Severity.WARNING if census else Severity.ERROR,
                        confidence=Confidence.MEDIUM if census else None))
                continue
            if kind == "repeat":
                self._repeat(j, item, ref_o, row)
            elif kind == "follow":
                self._follow(j, item, refs, row)
            elif kind in ("poison", "decoy"):
                self._stale(j, item, ref_o, row)
            elif kind == "census":
                row.update(self._census(j, item, ref_o))
            elif kind == "vary":
                self._vary(j, item, ref_o, row)
            j.integrity.append(row)

    def _repeat(self, j: Judgement, item: dict[str, Any], ref_o: dict[str, Any], row: dict[str, Any]) -> None:
        outs = item.get("outs") or []
        if item.get("reuses_output") or item.get("clobbered"):
            j.findings.append(self.make(
                R_ALIASES, "ModelNew returns the same output buffer on every call: an earlier call's result is "
                           "overwritten by the next call", {"probe": "original", "seed": self.seed,
                                                           "aliases": "earlier output",
                                                           "clobbered": bool(item.get("clobbered"))}))
            row["reuses_output"] = True
        if len(outs) < 2 or not j.passed_original:
            row["status"] = "not judged"
            return
        ref_nd = max_difference(ref_o["out32"], ref_o.get("out32b") or ref_o["out32"])
        worst = 0.0
        equal = True
        if self.mutates and len(outs) > 2:
            # a second call on tensors the first call overwrote sees other inputs: HS501 says so;
            # only the call on fresh copies can show nondeterminism
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
            return
        threshold = max(self._threshold(ref_o), ref_nd)
        if worst > threshold:
            row["status"] = "wrong"
            j.findings.append(self.make(
                R_NONDETERMINISTIC, f"two calls of ModelNew on the same input differ by {worst:.3g}, beyond the "
                                    f"tolerance ({threshold:.3g}); the reference's own run-to-run difference is {ref_nd:.3g}",
                {"probe": "original", "seed": self.seed, "max_abs_error": worst, "threshold": threshold,
                 "reference_nondeterminism": ref_nd}))
        else:
            row["status"] = "nondeterministic within tolerance"
            j.findings.append(self.make(
                R_NONDETERMINISTIC, f"two calls of ModelNew on the same input are not bitwise equal (max difference "
                                    f"{worst:.3g}, within tolerance); the reference is {'not ' if ref_nd else ''}"
                                    "bitwise reproducible",
                {"probe": "original", "seed": self.seed, "max_abs_error": worst, "reference_nondeterminism": ref_nd},
                severity=Severity.INFO, confidence=Confidence.MEDIUM))

    def _threshold(self, ref_o: dict[str, Any]) -> float:
        o = compare(ref_o["out32"], "", ref_o["out32"], ref_o.get("out64"), "", self.tol)
        return o.threshold

    def _follow(self, j: Judgement, item: dict[str, Any], refs: dict[str, dict[str, Any]], row: dict[str, Any]) -> None:
        outs, order = item.get("outs") or [], item.get("order") or []
        if not j.passed_original:
            row["status"] = "not judged"
            return
        ra, rb = refs.get(item["probe"]), refs.get(item["other"])
        if not ra or not rb or "skipped" in ra or "skipped" in rb:
            row["status"] = "skipped"
            return
        sens = compare(rb["out32"], ra["structure"], ra["out32"], ra.get("out64"), ra["structure"], self.tol)
        if sens.level == "pass":
            row["status"] = "skipped"
            row["reason"] = "the reference's output does not change between the two inputs"
            return
        for k, (out, src) in enumerate(zip(outs, order, strict=False)):
            ref = refs[src]
            o = compare(out, ref["structure"], ref["out32"], ref.get("out64"), ref["structure"], self.tol,
                        ref.get("outq"))
            if o.level == "wrong":
                row["status"] = "wrong"
                stale = compare(out, ref["structure"], refs[order[k - 1]]["out32"], refs[order[k - 1]].get("out64"),
                                ref["structure"], self.tol).level == "pass" if k else False
                why = ("it returned the previous call's result" if stale else "its output is wrong")
                j.findings.append(self.make(
                    R_STALE_FOLLOW, f"ModelNew does not follow its input: called again on the same buffers holding "
                                    f"new values (call {k + 1}), {why}",
                    dict(o.evidence(), probe="follow", input="the same input tensors refilled in place with a second "
                                                             "fresh draw", seed=self.seed, call=k + 1,
                         returned_previous_result=stale)))
                return
        row["status"] = "pass"

    def _stale(self, j: Judgement, item: dict[str, Any], ref_o: dict[str, Any], row: dict[str, Any]) -> None:
        out = item.get("out") or []
        if item["kind"] == "poison":
            o = compare(out, ref_o["structure"], ref_o["out32"], ref_o.get("out64"), ref_o["structure"], self.tol,
                        ref_o.get("outq"))
            nan_frac = fraction_equal(out, float("nan"))
            ref_nan = fraction_equal(ref_o["out32"], float("nan"))
            row["status"] = o.level
            row["nan_fraction"] = nan_frac
            if o.level == "wrong" and nan_frac > ref_nan:
                j.findings.append(self.make(
                    R_UNINITIALIZED, f"ModelNew returns memory it never wrote: with free memory poisoned with NaN, "
                                     f"{nan_frac:.1%} of its output is NaN (the reference has none there)",
                    dict(o.evidence(), probe="poison", input="get_inputs() with a fresh seed; freed and new memory "
                                                             "filled with NaN before the call", seed=self.seed,
                         nan_fraction=nan_frac)))
        else:
            frac = fraction_equal(out, DECOY)
            row["status"] = "pass" if frac == 0 else "wrong"
            row["decoy_fraction"] = frac
            if frac > 0.001:
                j.findings.append(self.make(
                    R_UNINITIALIZED, f"ModelNew returns stale memory: {frac:.1%} of its output holds the value "
                                     f"{DECOY} planted in freed blocks just before the call",
                    {"probe": "decoy", "input": "get_inputs() with a fresh seed; freed blocks of the output's size "
                                                f"filled with {DECOY} before the call", "seed": self.seed,
                     "decoy_fraction": frac}))

    def _vary(self, j: Judgement, item: dict[str, Any], ref_o: dict[str, Any], row: dict[str, Any]) -> None:
        """The same input under each process condition (environments.py): an output that is right
        under the harness's conditions and wrong under another is keyed on that condition."""
        from .environments import BASELINE, describe

        conds = item.get("conditions") or []
        outs = item.get("outs") or []
        errors = item.get("errors") or []
        row["conditions"] = []
        if not j.passed_original:
            row["status"] = "not judged"
            return
        worst: tuple[dict[str, Any], Outcome] | None = None
        for k, cond in enumerate(conds):
            err = errors[k] if k < len(errors) else None
            if isinstance(err, str):
                # a call that raises under a condition hides nothing a harness would accept
                row["conditions"].append({"condition": describe(cond), "status": "raised", "reason": err[-200:]})
                continue
            out = outs[k] if k < len(outs) else []
            o = compare(out, ref_o["structure"], ref_o["out32"], ref_o.get("out64"), ref_o["structure"], self.tol,
                        ref_o.get("outq"))
            row["conditions"].append({"condition": describe(cond), "status": o.level})
            if o.level == "wrong" and worst is None:
                worst = (cond, o)
        row["status"] = "wrong" if worst else "pass"
        if worst is not None:
            cond, o = worst
            j.findings.append(self.make(
                R_ENVIRONMENT, f"ModelNew's result depends on the process's conditions: right on a fresh input under "
                               f"{BASELINE}, wrong on the same input with {describe(cond)}",
                dict(o.evidence(), probe="environment", input="get_inputs() with a fresh seed, the same values "
                                                              "under each condition", seed=self.seed,
                     condition=describe(cond), baseline=BASELINE, condition_spec=cond,
                     replay=f"--seed {self.seed}")))

    def _census(self, j: Judgement, item: dict[str, Any], ref_o: dict[str, Any]) -> dict[str, Any]:
        cand = item.get("census") or {}
        ref = ref_o.get("census") or {}
        from .census_judge import fallback_share

        share, detail = fallback_share(cand, ref)
        row = {"status": "measured", **detail}
        if share is None or not self.custom:
            return row
        warn = float(self.options.get("fallback_warning", 0.5))
        err = float(self.options.get("fallback_error", 0.8))
        if share >= warn:
            sev = Severity.ERROR if share >= err else Severity.WARNING
            ops = ", ".join(detail.get("reference_ops_used", [])[:4])
            j.findings.append(self.make(
                R_FALLBACK, f"ModelNew re-runs the reference's own ATen ops ({ops}): {share:.0%} of the reference's "
                            "work in those ops happens in ATen again, so its custom code does little of it",
                {"probe": "census", "input": "get_inputs() with a fresh seed", "seed": self.seed,
                 "share": round(share, 3), **detail}, severity=sev))
        return row

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
        world = [c for c in seen.values() if c["kind"] == "world"]
        funcs = [c for c in seen.values() if c["kind"] == "function"]
        flags = [c for c in seen.values() if c["kind"] not in ("function", "world")]
        if world:
            names = "; ".join(f"{c['name']}: {c['before']} -> {c['after']}" for c in world[:4])
            j.findings.append(self.make(
                R_WORLD, f"ModelNew changes what other code in its process would run: {names} "
                         f"(at {world[0].get('phase', '?')}; {len(world)} change(s))",
                {"changed": world[:50], "seed": self.seed, "replay": f"--seed {self.seed}"}))
        if funcs:
            names = ", ".join(c["name"] for c in funcs[:5])
            j.findings.append(self.make(
                R_TAMPER, f"ModelNew replaces harness functions: {names} (changed at {funcs[0].get('phase', '?')})",
                {"changed": funcs, "seed": self.seed}))
        # configuration that changes neither numerics nor the measurement: noted, not reported
        benign = {"torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic", "torch.is_grad_enabled()",
                  "torch.are_deterministic_algorithms_enabled()"}
        j.global_changes = list(seen.values())
        flags = [c for c in flags if c["name"] not in benign]
        if flags:
            precision = [c for c in flags if c["kind"] == "precision-flag"]
            names = ", ".join(f"{c['name']}: {c['before']} -> {c['after']}" for c in flags[:5])
            j.findings.append(self.make(
                R_FLAGS, f"ModelNew changes global torch settings: {names}",
                {"changed": flags, "seed": self.seed, "precision": bool(precision)}))


def _ratio(rec: ProbeRecord) -> str:
    if rec.outcome is None:
        return "?"
    r = rec.outcome.error_ratio
    if r != r or r == float("inf"):
        return "inf"
    return f"{r:.3g}"


def _amax(x: Any) -> float:
    from .compare import abs_max

    return abs_max(x)


# ----------------------------------------------------------------------------------- answers
R_UNANSWERED = "HS410"
R_FORGED = "HS411"
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
