"""Does the candidate's own code do the work (HS412, HS413, HS508).

The facts come from ``confirm.custom_code_facts`` (builds, extension calls per probe, the op
census) and ``census_judge.fallback_share``: the candidate worker's word, so they can add a
finding and never remove one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...model import Severity
from . import Decision, rule_unit


def _ran(facts: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """What ran instead, in words, and the evidence both custom-code rules carry."""
    ops = facts.get("ops_that_ran") or []
    what_ran = (", ".join(ops[:6]) if ops else "no compute op (the census saw none)") \
        if "ops_that_ran" in facts else "unknown (no op census)"
    return what_ran, {"input": "every probe the candidate answered", "ops_that_ran": ops,
                      "calls_per_probe": facts.get("calls_per_probe", {})}


@rule_unit("HS412")
def extension_build_failed(facts: Mapping[str, Any], seed: int, stopped: str | None = None) -> Decision | None:
    """A build that failed while ModelNew ran anyway (the torch path is what was checked).  With
    ``stopped`` (why the stage stopped before ModelNew loaded), ``facts["builds_failed"]`` is the
    build farm's compile errors alone."""
    failed = list(facts.get("builds_failed") or [])
    if not failed:
        return None
    first = failed[0]
    if stopped is not None:
        return Decision(
            message=(f"the extension '{first['name']}' does not build (first error: {first['error'] or '?'}), seen in "
                     f"the build farm; the dynamic stage stopped before ModelNew was loaded ({str(stopped)[:200]}), so "
                     "what runs in its place was not seen"),
            evidence={"seed": seed, "builds_failed": failed, "compiler_error": first["error"], "seen_in": "build farm"})
    what_ran, ev = _ran(facts)
    ev = {"seed": seed, **ev, "builds_failed": failed, "compiler_error": first["error"]}
    if facts.get("ran"):
        # another build (a retry with other flags, a second extension) ran: a note, not a fallback
        return Decision(
            message=(f"the extension '{first['name']}' does not build (first error: {first['error'] or '?'}); other "
                     "custom code of ModelNew did run"), evidence=ev, severity=Severity.INFO)
    return Decision(
        message=(f"the extension '{first['name']}' does not build (first error: {first['error'] or '?'}), yet ModelNew "
                 f"ran: the torch path is what was checked and what would be timed (ops that ran: {what_ran})"),
        evidence=ev)


@rule_unit("HS413")
def custom_code_never_ran(facts: Mapping[str, Any], seed: int) -> Decision | None:
    """Custom code shipped and never called: on no probe at all, or on none of the task's own
    draws while it is called on other inputs."""
    what_ran, ev = _ran(facts)
    ev = {"seed": seed, **ev}
    skipped = facts.get("not_called_on_task") or []
    if facts.get("ran") and skipped:
        called = sorted(p for p, n in (facts.get("calls_per_probe") or {}).items() if n)
        return Decision(
            message=(f"your custom code never ran on the task's own inputs: on get_inputs() draws "
                     f"({', '.join(skipped[:4])}) ModelNew answered without calling its extension, which it calls on "
                     f"other inputs ({', '.join(called[:4])}); what is timed is not the custom code"),
            evidence=dict(ev, input="get_inputs() with fresh seeds", not_called_on=skipped, called_on=called[:8]))
    if facts.get("ran") is False:
        names = facts.get("counted_extensions") or []
        shipped = f"the extension{'s' if len(names) > 1 else ''} {', '.join(names)}" if names else "its custom code"
        return Decision(
            message=(f"your custom code never ran: ModelNew ships {shipped}, but no extension function was called and "
                     f"no custom kernel or op ran on any probe; what ran: {what_ran}"),
            evidence=dict(ev, counted_extensions=names))
    return None


@rule_unit("HS508")
def runtime_reference_fallback(share: float | None, detail: Mapping[str, Any], custom: bool,
                               options: Mapping[str, Any], seed: int) -> Decision | None:
    """The share of the reference's ATen work that ran in ATen again inside ModelNew (the op
    census), for a candidate that ships custom code: a warning from ``fallback_warning``, an error
    from ``fallback_error``."""
    if share is None or not custom:
        return None
    warn = float(options.get("fallback_warning", 0.5))
    err = float(options.get("fallback_error", 0.8))
    if share < warn:
        return None
    ops: Sequence[str] = detail.get("reference_ops_used", [])
    return Decision(
        message=(f"ModelNew re-runs the reference's own ATen ops ({', '.join(ops[:4])}): {share:.0%} of the reference's "
                 "work in those ops happens in ATen again, so its custom code does little of it"),
        evidence={"probe": "census", "input": "get_inputs() with a fresh seed", "seed": seed,
                  "share": round(share, 3), **detail},
        severity=Severity.ERROR if share >= err else Severity.WARNING)
