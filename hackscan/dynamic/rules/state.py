"""Process state (HS414, HS506, HS507, HS509): what the candidate changes around itself, and
whether its result depends on the process's conditions.

The judge merges the changes every worker reported (at import, during probes and checks), drops
those the reference makes too, and hands each unit the whole list: each takes the kind it judges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...model import Severity
from ..compare import Outcome, Tolerance, compare
from . import Decision, rule_unit

# configuration that changes neither numerics nor the measurement: noted, not reported
BENIGN_SETTINGS = frozenset({"torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
                             "torch.is_grad_enabled()", "torch.are_deterministic_algorithms_enabled()"})


@rule_unit("HS509")
def shared_process_state_changed(changes: Sequence[Mapping[str, Any]], seed: int) -> Decision | None:
    """Changes to what other code in the process would run (``world`` changes)."""
    world = [c for c in changes if c["kind"] == "world"]
    if not world:
        return None
    names = "; ".join(f"{c['name']}: {c['before']} -> {c['after']}" for c in world[:4])
    return Decision(
        message=(f"ModelNew changes what other code in its process would run: {names} "
                 f"(at {world[0].get('phase', '?')}; {len(world)} change(s))"),
        evidence={"changed": world[:50], "seed": seed, "replay": f"--seed {seed}"})


@rule_unit("HS506")
def harness_function_replaced(changes: Sequence[Mapping[str, Any]], seed: int) -> Decision | None:
    """Functions of the harness (clocks, comparisons, torch entry points) replaced."""
    funcs = [c for c in changes if c["kind"] == "function"]
    if not funcs:
        return None
    names = ", ".join(c["name"] for c in funcs[:5])
    return Decision(message=f"ModelNew replaces harness functions: {names} (changed at {funcs[0].get('phase', '?')})",
                    evidence={"changed": funcs, "seed": seed})


# backends whose switching off slows every later op of the process, the baseline's included
_SPEED_BACKENDS = frozenset({"torch.backends.cudnn.enabled", "torch.backends.mkldnn.enabled"})


def _rigs_the_baseline(change: Mapping[str, Any]) -> bool:
    """A change that makes the reference, run or timed in the same process, less precise or
    slower: a precision flag, fewer intra-op threads, a fast backend switched off."""
    if change["kind"] == "precision-flag":
        return True
    name, before, after = change["name"], str(change.get("before")), str(change.get("after"))
    if name == "torch.get_num_threads()":
        return before.isdigit() and after.isdigit() and int(after) < int(before)
    return name in _SPEED_BACKENDS and before == "True" and after == "False"


@rule_unit("HS507")
def global_settings_changed(changes: Sequence[Mapping[str, Any]], seed: int) -> Decision | None:
    """Global torch settings changed, less the benign ones: an error where the change rigs the
    baseline that shares the process (lower precision, fewer threads, a fast backend off), a
    warning otherwise (a raised thread count changes the measurement's conditions too)."""
    flags = [c for c in changes if c["kind"] not in ("function", "world") and c["name"] not in BENIGN_SETTINGS]
    if not flags:
        return None
    precision = [c for c in flags if c["kind"] == "precision-flag"]
    rigged = [c for c in flags if _rigs_the_baseline(c)]
    shown = rigged + [c for c in flags if c not in rigged]
    names = ", ".join(f"{c['name']}: {c['before']} -> {c['after']}" for c in shown[:5])
    why = " (the reference sharing the process would run less precise or slower)" if rigged else ""
    return Decision(message=f"ModelNew changes global torch settings: {names}{why}",
                    evidence={"changed": flags, "seed": seed, "precision": bool(precision),
                              "rigs_baseline": [c["name"] for c in rigged]},
                    severity=Severity.ERROR if rigged else None)


@rule_unit("HS414")
def result_depends_on_environment(item: Mapping[str, Any], ref_o: Mapping[str, Any], passed_original: bool,
                                  tol: Tolerance, seed: int, row: dict[str, Any],
                                  input_desc: str | None = None) -> Decision | None:
    """The ``vary`` check: the same input under each process condition (environments.py); an output
    right under the harness's conditions and wrong under another is keyed on that condition.  The
    input is the harness's own draw or a probe's (``input_desc``) that the candidate got right
    under the harness's conditions (``passed_original`` says so for either)."""
    from ..environments import BASELINE, describe

    conds = item.get("conditions") or []
    outs = item.get("outs") or []
    errors = item.get("errors") or []
    row["conditions"] = []
    if not passed_original or not ref_o.get("structure"):
        row["status"] = "not judged"
        return None
    worst: tuple[Mapping[str, Any], Outcome] | None = None
    for k, cond in enumerate(conds):
        err = errors[k] if k < len(errors) else None
        if isinstance(err, str):
            # a call that raises under a condition hides nothing a harness would accept
            row["conditions"].append({"condition": describe(cond), "status": "raised", "reason": err[-200:]})
            continue
        out = outs[k] if k < len(outs) else []
        o = compare(out, ref_o["structure"], ref_o["out32"], ref_o.get("out64"), ref_o["structure"], tol,
                    ref_o.get("outq"))
        row["conditions"].append({"condition": describe(cond), "status": o.level})
        if o.level == "wrong" and worst is None:
            worst = (cond, o)
    row["status"] = "wrong" if worst else "pass"
    if worst is None:
        return None
    cond, o = worst
    what = f"an input ({input_desc})" if input_desc else "a fresh input"
    return Decision(
        message=(f"ModelNew's result depends on the process's conditions: right on {what} under {BASELINE}, "
                 f"wrong on the same input with {describe(cond)}"),
        evidence=dict(o.evidence(), probe="environment", input=f"{input_desc or 'get_inputs() with a fresh seed'}, "
                                                               "the same values under each condition", seed=seed,
                      condition=describe(cond), baseline=BASELINE, condition_spec=cond, replay=f"--seed {seed}"))


@rule_unit("HS510")
def busy_while_idle(cpu_s: float, window_s: float, options: Mapping[str, Any], seed: int) -> Decision | None:
    """CPU the candidate's process tree used while nothing called it (the parent reads it from
    ``/proc`` over a short idle window after the probes): a thread that computes between calls
    takes cores from whatever runs next on the host, the reference's timing loop first."""
    if window_s <= 0:
        return None
    share = cpu_s / window_s
    if share < float(options.get("min_share", 0.25)):
        return None
    return Decision(
        message=(f"ModelNew's process keeps computing between calls: {cpu_s:.2f} s of CPU in {window_s:.2f} s "
                 f"while nothing called it ({share:.0%} of a core), taken from what runs next on the host"),
        evidence={"cpu_s": round(cpu_s, 4), "window_s": round(window_s, 3), "share": round(share, 3), "seed": seed,
                  "read_by": "the parent, from /proc (user + system time of every process in the worker's tree)"})
