"""Branches that should not exist: on tensor values read on the host (HS202) and on environment
variables or static call counters (HS212)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda import names
from ...cuda.branches import branches, depends_on, launch_effect, tainted_names, value_reads
from ...cuda.facts import CudaFacts
from ...cuda.parser import contains, identifiers, text
from ...cuda.records import Function, Variable, pos_of
from ...model import Confidence, Severity

_INT_TYPE = re.compile(r"^(static)?(std::atomic<)?(unsigned|signed)?(int|long|longlong|short|size_t|u?int\d+_t|"
                       r"unsignedint|unsignedlong)>?$")


def cuda_value_guard(ctx: ScanContext) -> Iterator[Hit]:
    """HS202."""
    facts = ctx.cuda
    reachable = facts.reachable
    for fn in facts.host_functions:
        if fn not in reachable:
            continue
        reads = value_reads(fn, facts)
        if not reads:
            continue
        seeds = [r.node for r in reads]
        tainted = tainted_names(fn, seeds)
        for br in branches(fn, ctx.cuda_flow):
            dep = depends_on(br.condition, seeds, tainted)
            if dep is None:
                continue
            effect, skips = launch_effect(br, fn, ctx.cuda_flow)
            if not effect:
                continue
            read = next((r.what for r in reads if contains(br.condition, r.node) or r.node == dep), None)
            if read is None:
                read = f"{text(dep)}, from {reads[0].what}"
            sev = Severity.ERROR if skips else Severity.WARNING
            conf = Confidence.HIGH if skips else Confidence.MEDIUM
            yield ctx.hit(pos_of(fn.unit, br.node), args={"function": fn.name, "read": read, "effect": effect},
                          severity=sev, confidence=conf,
                          evidence={"function": fn.key, "condition": " ".join(text(br.condition).split())[:80],
                                    "reads": [r.what for r in reads]})
        # ``return x.min().item<float>() >= 0 ? x : run(x);``
        for r in ctx.cuda_flow.returns(fn):
            value = r.value
            while value is not None and value.type == "parenthesized_expression" and value.named_child_count:
                value = value.named_children[0]
            if value is None or value.type != "conditional_expression":
                continue
            cond = value.child_by_field_name("condition")
            if cond is None or depends_on(cond, seeds, tainted) is None:
                continue
            for arm in ("consequence", "alternative"):
                sub = value.child_by_field_name(arm)
                origins = ctx.cuda_flow.origins(sub, fn) if sub is not None else []
                if origins and all(o.kind == "input" for o in origins):
                    read = next((x.what for x in reads if contains(cond, x.node)), reads[0].what)
                    yield ctx.hit(pos_of(fn.unit, r.node), args={
                        "function": fn.name, "read": read,
                        "effect": f"returns its input `{text(sub)}` on one arm of the conditional"},
                        evidence={"function": fn.key, "condition": " ".join(text(cond).split())[:80]})
                    break


def _counters(facts: CudaFacts) -> dict[tuple[str, str], Variable]:
    """Static / global integers that some host function increments: call counters."""
    candidates: dict[tuple[str, str], Variable] = {}
    for v in facts.static_locals + [g for g in facts.globals if not g.device]:
        if v.const or not _INT_TYPE.match(v.type):
            continue
        candidates[(v.ext, v.name)] = v
    if not candidates:
        return {}
    bumped: set[tuple[str, str]] = set()
    for fn in facts.host_functions:
        for upd in fn.of_type("update_expression"):
            arg = upd.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                bumped.add((fn.ext, text(arg)))
        for asg in fn.of_type("assignment_expression"):
            left = asg.child_by_field_name("left")
            op = asg.child_by_field_name("operator")
            if left is None or left.type != "identifier" or op is None:
                continue
            name = text(left)
            right = asg.child_by_field_name("right")
            if op.type in ("+=", "-=") or (op.type == "=" and right is not None and name in {
                    text(i) for i in identifiers(right)}):
                bumped.add((fn.ext, name))
        for c in fn.calls:  # std::atomic<int> counter; counter.fetch_add(1)
            if c.is_method and c.base in ("fetch_add", "fetch_sub") and c.receiver is not None:
                bumped.add((fn.ext, text(c.receiver)))
    return {k: v for k, v in candidates.items() if k in bumped}


def cuda_env_or_counter_branch(ctx: ScanContext) -> Iterator[Hit]:
    """HS212."""
    facts = ctx.cuda
    counters = _counters(facts)
    reachable = facts.reachable
    for fn in facts.host_functions:
        if fn not in reachable:
            continue
        env_seeds = [c.node for c in fn.calls if not c.is_method and c.name in names.ENV_READS]
        visible = {name for (ext, name), v in counters.items()
                   if ext == fn.ext and (v.function is None or v.function is fn)}
        if not env_seeds and not visible:
            continue
        env_tainted = tainted_names(fn, env_seeds) if env_seeds else set()
        ctr_seeds: list[ts.Node] = []
        ctr_tainted = (set(visible) | _derived(fn, visible)) if visible else set()
        for br in branches(fn, ctx.cuda_flow):
            dep_ctr = depends_on(br.condition, ctr_seeds, ctr_tainted) if ctr_tainted else None
            dep_env = depends_on(br.condition, env_seeds, env_tainted) if env_seeds else None
            if dep_ctr is None and dep_env is None:
                continue
            effect, skips = launch_effect(br, fn, ctx.cuda_flow)
            if not effect:
                continue  # logging every n calls, a debug print: nothing the harness would notice
            if dep_ctr is not None:
                source = f"the call counter `{text(dep_ctr)}`"
                sev = Severity.ERROR if skips else Severity.WARNING
                conf = Confidence.HIGH if skips else Confidence.MEDIUM
            else:
                env_name = _env_name(env_seeds, br.condition) or text(dep_env)
                source = f"the environment variable {env_name}"
                sev, conf = Severity.WARNING, (Confidence.HIGH if skips else Confidence.MEDIUM)
            yield ctx.hit(pos_of(fn.unit, br.node), severity=sev, confidence=conf,
                          args={"function": fn.name, "source": source, "effect": f" and {effect}"},
                          evidence={"function": fn.key, "condition": " ".join(text(br.condition).split())[:80]})


def _derived(fn: Function, base: set[str]) -> set[str]:
    """Locals computed from a counter (``int n = ++calls;``)."""
    out: set[str] = set()
    for name, values in fn.assigned.items():
        if name in base:
            continue
        if any(text(i) in base for v in values for i in identifiers(v)):
            out.add(name)
    return out


def _env_name(seeds: list[ts.Node], cond: ts.Node) -> str | None:
    for s in seeds:
        args = s.child_by_field_name("arguments")
        if args is not None and args.named_child_count:
            return f"`{text(args.named_children[0])}`"
    del cond
    return None


__all__ = ["cuda_value_guard", "cuda_env_or_counter_branch"]
