"""Parent side: did the candidate's own code run, and which static suspicions does that settle.

The static stage can only say what *could* happen: a fallback arm that *may* fire, a stream that
*may* escape the timer, an extension that *cannot* build.  The dynamic stage sees what did
happen, from facts the candidate's worker reports (``worker/candidate.py``, ``shared/extcache.py``):
every extension build and its first compiler error, the number of calls into the built
extensions' functions during each probe, and the op census (dispatched ops on the CPU, profiler
kernels on a GPU).  From them:

* a build that failed while ModelNew still ran is HS412; custom code shipped and never called
  on any probe is HS413 (both list the ops that ran instead);
* a static finding that torch computes the output (taxonomy class 3, HS119 among them, or a
  fallback, class 5) is *confirmed* by HS412 / HS413; a fallback finding is also *confirmed*
  when the custom code was not called on a probe of the task's shape where ModelNew answered;
  "called on every probe" and "the custom code ran" are only noted in the finding's evidence
  (``candidate_claims``): they are the candidate process's own word;
* a static stream / thread finding (taxonomy class 9) and a timing escape measured by the
  performance stage (HS601 events against the wall clock, HS609 the parent's own clock) confirm
  each other: both become errors.

Each finding so settled names the other stage's evidence in ``confirmed_by`` / ``cleared_by``
(``"stage:rule@line"``, or ``"dynamic:<fact>"`` where the evidence is a fact and not a finding)
and says so in its message.  Counts and the census are the candidate worker's word: code in
that process can rewrite the counter, the census and the reply in place, so they can confirm a
suspicion or add a finding, and never soften or remove one (docs/walls-trust.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from ..model import Finding, Severity, Stage
from ..perf.rules.timing import timing_contradicted_by_parent_clock, timing_escape
from ..registry import Registry
from .census_judge import is_bookkeeping
from .rules import report, rule_id_of
from .rules.custom_code import custom_code_never_ran, extension_build_failed

R_BUILD_FAILED = rule_id_of(extension_build_failed)
R_NEVER_RAN = rule_id_of(custom_code_never_ran)
R_CANNOT_RUN = "HS119"
# performance findings that measure work escaping the candidate's own timer
ESCAPES = (rule_id_of(timing_escape), rule_id_of(timing_contradicted_by_parent_clock))
# probe families at the task's own shapes: a fallback that fires there is what the harness sees
TASK_FAMILIES = ("original", "params", "value", "magnitude")
# loaders whose builds the candidate worker sees (shared/extcache.py wraps them)
COUNTED_KINDS = frozenset({"load_inline", "load"})
# taxonomy classes: torch computes the output; conditional fallback to torch; hidden work
TORCH_CLASS = 3
FALLBACK_CLASS = 5
STREAM_CLASS = 9


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_GLOBAL_NAME = re.compile(r"__global__\s+(?:static\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                          r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)")


def own_kernel_names(code: str, program: Any) -> tuple[str, ...]:
    """Names of the kernels the candidate defines (its Triton kernels, its ``__global__``
    functions): a profiler kernel carrying one of them is the candidate's own."""
    names = {str(n) for n in (getattr(program, "triton_kernels", ()) or ()) if str(n)}
    names.update(_GLOBAL_NAME.findall(code or ""))
    return tuple(sorted(n for n in names if len(n) > 2))


def custom_code_facts(program: Any, needs: Iterable[str], device: str, c_load: dict[str, Any],
                      cands: dict[str, dict[str, Any]], integrity: list[dict[str, Any]],
                      families: dict[str, str], own: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the run showed about the candidate's custom code (``report.dynamic["custom_code"]``).

    ``families`` maps probe id to its family.  ``judged`` is false when nothing here can tell
    whether custom code ran (Triton on the CPU, an extension built by something other than
    ``torch.utils.cpp_extension``, no census)."""
    builds = [b for b in c_load.get("builds") or [] if isinstance(b, dict)]
    failed = [{"name": str(b.get("name", "?"))[:80], "error": str(b.get("error", ""))[:300]}
              for b in builds if b.get("failed") is True]
    counted = [str(x)[:80] for x in c_load.get("extensions") or [] if isinstance(x, str)]
    calls: dict[str, int] = {}
    for pid, c in cands.items():
        n = _int(c.get("ext_calls"))
        if n is not None and "error" not in c and c.get("out") is not None:
            calls[pid] = n
    census_item = next((i for i in integrity if i.get("kind") == "census" and isinstance(i.get("census"), dict)
                        and "error" not in i), None)
    census = census_item["census"] if census_item else {}
    ops = census.get("ops") if isinstance(census.get("ops"), dict) else {}
    kernels = census.get("kernels") if isinstance(census.get("kernels"), dict) else {}
    custom_ops = sorted(k for k in ops if isinstance(k, str) and not k.startswith(("aten.", "prim.", "prims.")))
    # the worker tells library kernels by name (gemm, reduce_kernel, ...): a kernel of the
    # candidate's own may carry such a name, and is custom whatever the pattern says
    own = tuple(own) or own_kernel_names("", program)
    custom_kernels = sorted(k for k, v in kernels.items() if isinstance(v, dict) and isinstance(k, str) and (
        not v.get("library") or any(n in k for n in own)))
    census_calls = _int(census_item.get("ext_calls")) if census_item else None

    def seconds(v: Any) -> float:
        s = v.get("seconds", v.get("device_s", 0.0)) if isinstance(v, dict) else 0.0
        return float(s) if isinstance(s, (int, float)) else 0.0

    ran_ops = sorted((k for k in ops if isinstance(k, str) and k.startswith("aten.") and not is_bookkeeping(k)),
                     key=lambda k: -seconds(ops[k]))
    ran_kernels = sorted((k for k in kernels if isinstance(k, str)), key=lambda k: -seconds(kernels[k]))
    kinds = {str(kind) for _, kind in (getattr(program, "extensions", ()) or ())}
    triton = bool(getattr(program, "triton_kernels", ())) or "triton" in set(needs)
    profiler = census.get("method") == "profiler"
    # on a GPU the profiler sees every kernel, whoever launched it; elsewhere only the counted
    # extensions and custom ops can show custom code running
    # an extension exporting classes has methods the worker does not count
    partial = [x for x in c_load.get("extensions_partial") or [] if isinstance(x, str)]
    observable = bool(census_item) and (profiler or (not triton and not partial and kinds <= COUNTED_KINDS))
    ran_any = any(calls.values()) or bool(census_calls) or bool(custom_ops) or bool(custom_kernels)
    facts: dict[str, Any] = {
        "judged": observable or ran_any,
        "ran": True if ran_any else (False if observable else None),
        "builds_failed": failed,
        "counted_extensions": counted,
        "calls_per_probe": calls,
        "census_calls": census_calls,
        "custom_ops": custom_ops[:8],
        "custom_kernels": custom_kernels[:8],
        "ops_that_ran": (ran_kernels if profiler else ran_ops)[:8],
    }
    # per probe: only the extension counter answers, so only where it covers all custom code
    if counted and not triton and not partial and kinds <= COUNTED_KINDS and not custom_ops:
        facts["not_called_on"] = sorted(p for p, n in calls.items() if n == 0 and families.get(p) in TASK_FAMILIES)
        # the difference between inputs: custom code on other probes, none on every draw of the
        # task's own distribution (what a harness checks and times)
        own = [p for p in calls if families.get(p) == "original"]
        if own and all(calls[p] == 0 for p in own) and any(calls.values()):
            facts["not_called_on_task"] = sorted(own)
        facts["called_on_every_probe"] = bool(calls) and all(n > 0 for n in calls.values())
    return facts


def farm_build_findings(make: Callable[..., Finding], failed: list[dict[str, str]], why: str, seed: int) -> list[Finding]:
    """HS412 from the build farm's compile errors alone, when the stage stopped before ModelNew was
    loaded (``custom_code_findings`` needs what ran, which was then never seen)."""
    out: list[Finding] = []
    report(make, out, extension_build_failed, {"builds_failed": failed}, seed, stopped=why)
    return out


def custom_code_findings(make: Callable[..., Finding], facts: dict[str, Any], seed: int) -> list[Finding]:
    """HS412 (a build failed and ModelNew ran anyway), else HS413 (custom code shipped, never run)."""
    out: list[Finding] = []
    if not report(make, out, extension_build_failed, facts, seed):
        report(make, out, custom_code_never_ran, facts, seed)
    return out


# ------------------------------------------------------------------------------------------- settling
def _ref(f: Finding) -> str:
    return f"{f.stage.value}:{f.key}"


def _classes(registry: Registry, rule_id: str) -> set[int]:
    try:
        return set(registry.get(rule_id).taxonomy)
    except KeyError:
        return set()


def _confirm(f: Finding, by: list[str], why: str) -> Finding:
    new = tuple(b for b in by if b not in f.confirmed_by)
    if not new:
        return f
    return f.with_(severity=Severity.ERROR, confirmed_by=f.confirmed_by + new,
                   message=f"{f.message} (confirmed by {why})")


def reconcile(static: list[Finding], dyn: list[Finding], facts: dict[str, Any] | None,
              registry: Registry) -> tuple[list[Finding], list[Finding]]:
    """Static findings and the dynamic / performance findings, with what each stage proves about
    the other's written into both (severity, ``confirmed_by`` / ``cleared_by``, message)."""
    facts = facts or {}
    live = [i for i, f in enumerate(static) if f.stage is Stage.STATIC and not f.suppressed]
    static = list(static)
    dyn = list(dyn)

    # a stream or thread the static stage suspects, and work the performance stage saw escape
    escapes = [i for i, d in enumerate(dyn) if d.rule in ESCAPES and not d.suppressed]
    streams = [i for i in live if STREAM_CLASS in _classes(registry, static[i].rule)]
    if escapes and streams:
        s_refs = [_ref(static[i]) for i in streams]
        d_refs = [_ref(dyn[i]) for i in escapes]
        for i in streams:
            static[i] = _confirm(static[i], d_refs, "the performance stage: " + ", ".join(d_refs))
        for i in escapes:
            dyn[i] = _confirm(dyn[i], s_refs, "the static stage: " + ", ".join(s_refs))

    if not facts.get("judged"):
        return static, dyn
    settled = [d for d in dyn if d.rule in (R_BUILD_FAILED, R_NEVER_RAN) and not d.suppressed
               and d.severity is Severity.ERROR]
    not_called = facts.get("not_called_on") or []
    fallbacks = [i for i in live if FALLBACK_CLASS in _classes(registry, static[i].rule)]
    cannot_run = [i for i in live if static[i].rule == R_CANNOT_RUN]

    if settled:
        # the custom code never ran at all: every suspicion that torch computes the output (a
        # fallback, a kernel never called, "cannot run") is what happened
        d_refs = [_ref(d) for d in settled]
        torch_path = [i for i in live if i not in fallbacks and TORCH_CLASS in _classes(registry, static[i].rule)]
        for i in fallbacks + torch_path:
            static[i] = _confirm(static[i], d_refs, "the dynamic stage: " + ", ".join(d_refs))
        back = [_ref(static[i]) for i in fallbacks + torch_path]
        if back:
            dyn = [d.with_(confirmed_by=d.confirmed_by + tuple(b for b in back if b not in d.confirmed_by))
                   if any(d is s for s in settled) else d for d in dyn]
        return static, dyn

    if not_called:
        fact = "dynamic:no extension call on probe " + ", ".join(not_called[:6])
        for i in fallbacks:
            static[i] = _confirm(static[i], [fact], f"the dynamic stage: on probe {', '.join(not_called[:6])} "
                                                    "ModelNew answered without calling its extension")
    elif facts.get("ran") and facts.get("called_on_every_probe"):
        # the candidate's own count says its kernel ran everywhere: its word, so the finding keeps
        # its severity and message and carries the observation only as evidence (a forged count
        # changes nothing a reader or the verdict relies on)
        n = len(facts.get("calls_per_probe") or {})
        for i in fallbacks:
            f = static[i]
            static[i] = f.with_(evidence=dict(f.evidence, candidate_claims=f"extension called on every one of {n} "
                                              "probes (the candidate process's own count: not evidence for it)"))
    if facts.get("ran"):
        for i in cannot_run:
            f = static[i]
            static[i] = f.with_(evidence=dict(f.evidence, candidate_claims="custom code ran (the candidate process's "
                                              "own count: not evidence for it)"))
    return static, dyn
