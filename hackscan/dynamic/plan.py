"""Parent side: which probes to run for one candidate, within a time budget, steered by static findings.

The reference worker reports what one float32 and one float64 call cost on task-shaped inputs;
each probe is estimated from that (scaled by the input size it will have) and probes are taken in
order of worth until the budget is spent.  What is left out is reported as skipped with the
estimate, never silently dropped.  Static findings move the probes that can confirm or clear
them to the front and add a few of their own (``steer``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding
from ..registry import Registry
from .environments import conditions_for
from .environments import enabled as differential_enabled
from .shared.probes import SHAPE_VARIANTS, VALUE_ORDER, shape_value, spec

# candidate calls each integrity probe makes
INTEGRITY_CALLS = {"follow": 2, "poison": 1, "repeat": 4, "decoy": 1, "census": 3, "vary": 10}


@dataclass
class Steering:
    """What the static stage suspects, by taxonomy class, and which findings say so."""

    by_class: dict[int, list[str]] = field(default_factory=dict)
    # reference dims named by static findings (value -> finding keys)
    dims: dict[int, list[str]] = field(default_factory=dict)

    def keys_for(self, classes: Iterable[int]) -> list[str]:
        out: list[str] = []
        for c in classes:
            for k in self.by_class.get(c, []):
                if k not in out:
                    out.append(k)
        return out

    def has(self, *classes: int) -> bool:
        return any(self.by_class.get(c) for c in classes)


def steering_from(findings: Iterable[Finding], registry: Registry) -> Steering:
    st = Steering()
    for f in findings:
        if f.suppressed or f.stage.value != "static":
            continue
        try:
            rule = registry.get(f.rule)
        except KeyError:
            continue
        for c in rule.taxonomy:
            if c:
                st.by_class.setdefault(c, []).append(f.key)
        if 2 in rule.taxonomy and hasattr(f.evidence, "get"):
            # the static rules name the literal under one of these keys, alone or in a list
            for key in ("dim", "value", "literal", "values", "literals"):
                v = f.evidence.get(key)
                for x in (v if isinstance(v, (list, tuple)) else [v]):
                    if isinstance(x, int) and not isinstance(x, bool) and x > 1:
                        keys = st.dims.setdefault(x, [])
                        if f.key not in keys:
                            keys.append(f.key)
    return st


@dataclass
class Plan:
    probes: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    estimate_s: float
    integrity: list[dict[str, Any]]


def _probe_cost(t32: float, t64: float | None, numel: int, ratio: float) -> float:
    """The reference's float32 and float64 calls, the candidate's call, the transfers."""
    t64 = t64 if t64 is not None else 2 * t32
    transfer = numel * 4 * 4 / 1.5e9  # inputs and outputs through the parent, roughly
    return ratio * (2 * t32 + t64 + transfer) + 0.002


FIRST_ROUND = ("original", "original_b", "original_nudged", "params", "shape_smaller_odd")


def make_plan(load: dict[str, Any], base_seed: int, steer: Steering, budget_s: float, *,
              has_params: bool, perf_sets: int = 0, census: bool = True,
              measured: dict[str, float] | None = None, memory_budget_gb: float = 3.0,
              device: str = "cpu", modes: bool = False) -> Plan:
    """All probes worth their time, in order.  ``measured`` (seconds per probe at the task's shape,
    ``full``, and at the smaller shape, ``small``) replaces the estimates once the first round ran:
    how a cost scales with shape (linear for ReLU, cubic for a matmul) is known only then."""
    t32 = float(load.get("t32") or 0.0)
    t64 = load.get("t64")
    numel = int(load.get("input_numel") or 0)
    dims: dict[str, dict[str, Any]] = load.get("dims") or {}
    probes: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    spent = 0.0
    base_cost = _probe_cost(t32, t64, numel, 1.0)
    # the parent holds each probe's float32 and float64 reference outputs and the candidate's until
    # judging (four float32 copies of the output, and the inputs until forwarded): on a large task
    # the task-shaped optional probes are limited by memory as well as time
    per_probe_bytes = probe_bytes(load)
    # the four that always run (two draws, the first one nudged, the redrawn parameters) and the
    # fresh draws kept for timing come first
    max_full = max(0, int(memory_budget_gb * 2**30 // per_probe_bytes) - 4 - perf_sets)
    full_taken = 0
    if measured and measured.get("full"):
        base_cost = measured["full"]
        t32 = min(t32, base_cost) if t32 else base_cost / 3

    # the budget is for optional probes: what always runs does not eat it (a heavy task's two
    # fresh draws may cost more than the budget, and its smaller-shape probes still fit)
    fixed = 0.0

    def take(p: dict[str, Any], cost: float, must: bool = False) -> bool:
        nonlocal spent, fixed, full_taken
        if must:
            probes.append(p)
            fixed += cost
            return True
        full_size = not p.get("dims")
        if full_size and full_taken >= max_full:
            skipped.append({"probe": p["id"], "input": p["description"],
                            "reason": f"over the memory budget ({memory_budget_gb:g} GiB for task-shaped probes; "
                                      f"about {per_probe_bytes / 2**30:.2f} GiB each)"})
            return False
        if spent + cost <= budget_s:
            probes.append(p)
            spent += cost
            full_taken += int(full_size)
            return True
        skipped.append({"probe": p["id"], "input": p["description"],
                        "reason": f"over the time budget ({budget_s:.1f} s; this probe would cost about {cost:.2f} s)"})
        return False

    # always: two fresh draws (the harness's own distribution), the integrity calls
    first = spec("original", "original", base_seed)
    first["census"] = census
    take(first, base_cost + (2 * t32 if census else 0.0), must=True)
    take(spec("original_b", "original", base_seed), base_cost, must=True)
    integrity: list[dict[str, Any]] = []
    cycles = 4 if steer.has(8) else 2

    def take_integrity(kind: str, must: bool, probe: str = "original", other: str | None = None) -> None:
        nonlocal spent, fixed
        calls = cycles if kind == "follow" else INTEGRITY_CALLS[kind]
        if kind == "vary" and device == "cuda":
            calls += 4  # the stream condition's call, and the graph's warm-up, capture and replay
        if kind == "vary" and modes:
            calls += 1
        item: dict[str, Any] = {"kind": kind, "probe": probe, "id": kind if probe == "original" else f"{kind}_{probe}"}
        if kind in ("follow", "repeat"):
            item["other"] = other or "original_b"
            if other:
                item["id"] = f"{kind}_{other}"
        if kind == "follow":
            item["cycles"] = cycles
        if kind == "vary":
            item["conditions"] = conditions_for(base_seed, device=device, modes=modes)
        cost = calls * t32
        # integrity probes are cheap next to a probe (no reference calls): run them unless the
        # candidate's own calls are a real share of the budget
        if must or cost <= 0.1 * budget_s:
            integrity.append(item)
            fixed += cost
        elif spent + cost <= budget_s:
            integrity.append(item)
            spent += cost
        else:
            skipped.append({"probe": f"integrity:{kind}", "input": "get_inputs() with a fresh seed",
                            "reason": f"over the time budget ({budget_s:.1f} s; {calls} calls of about {t32:.2f} s)"})

    # caching and unwritten output are checked whatever the budget: they are what fresh seeds miss
    take_integrity("follow", True)
    # the same buffers again with two of their values swapped: a memo keyed on a sample of the
    # input (a few elements hashed or compared with the previous call's) answers with the old result
    nudged = spec("original_nudged", "nudged", base_seed)
    nudged["draw_seed"] = first["seed"]  # the original draw itself (its own seed stays for the swap)
    if take(nudged, base_cost, must=True):
        take_integrity("follow", True, other="original_nudged")
    take_integrity("poison", True)
    # the same input under other process conditions: a result keyed on them (environments.py)
    if differential_enabled():
        take_integrity("vary", True)
    if has_params:
        take(spec("params", "original", base_seed, setup="redrawn", family="params",
                  description="get_inputs() with a fresh seed; every parameter and buffer redrawn "
                              "(non-identity), identical in both models",
                  steered_by=steer.keys_for([17])), base_cost, must=True)

    shape_specs = _shape_specs(dims, steer, base_seed, skipped)
    value_specs, steered_first = _value_specs(steer, base_seed)

    # interleave: the cheapest shape probe first, then values, then the rest
    smaller = [s for s in shape_specs if s[0]["id"] == "shape_smaller_odd"]
    others = [s for s in shape_specs if s[0]["id"] != "shape_smaller_odd"]
    small_cost = _probe_cost(t32, t64, numel, smaller[0][1]) if smaller else base_cost
    if measured and measured.get("small"):
        small_cost = measured["small"]
    for p, _ratio in smaller:
        take(p, small_cost, must=steer.has(2))
    # breadth before size: every transform at the task's shape if they all fit, else the steered
    # ones there and the others at the smaller shape (a shape-general candidate passed it above)
    reduced: list[dict[str, Any]] = []
    all_fit = spent + base_cost * len(value_specs) <= budget_s and full_taken + len(value_specs) <= max_full
    for p in value_specs:
        if all_fit or (p["steered_by"] and base_cost < budget_s):
            take(p, base_cost, must=not all_fit)
        else:
            reduced.append(p)
    if reduced and smaller and smaller[0][0] in probes:
        small_dims = smaller[0][0]["dims"]
        for p in reduced:
            q = spec(p["id"] + "@small", p["transform"], base_seed, dims=small_dims,
                     description=p["description"] + " (at the smaller shape: " + _dims_text(small_dims) + ")",
                     steered_by=p["steered_by"])
            q["reduced_from"] = p["id"]
            q["family"] = p["family"]
            if not take(q, small_cost):
                skipped[-1]["reason"] += f"; at the task's shape about {base_cost:.2f} s"
    else:
        for p in reduced:
            take(p, base_cost)
    for p, ratio in sorted(others, key=lambda s: s[1]):
        take(p, _probe_cost(t32, t64, numel, ratio) if not measured else base_cost * ratio,
             must=bool(p["steered_by"]) and p["id"] != "shape_larger")
    take(spec("strided", "strided", base_seed, layout="strided"), base_cost)
    if differential_enabled() and any(p["id"] == "randn" for p in probes):
        # the conditions again on signed values: the harness's own [0, 1) draws hide a path that
        # is only approximately right (a subsampled mean, ``abs`` for ReLU) under a condition
        take_integrity("vary", False, probe="randn")
    take_integrity("repeat", False)
    take_integrity("decoy", False)
    if census:
        # the only evidence for HS508, and cheap next to the compilation a custom candidate paid
        take_integrity("census", True)
    for i in range(perf_sets):
        take(spec(f"perf_{i}", "original", base_seed, description="a fresh get_inputs() draw for timing"),
             base_cost * 0.5, must=True)
    # the process conditions run last: a tensor the candidate keeps from a call under
    # inference_mode cannot be written outside it, so an honest buffer-recycling kernel would
    # raise in every integrity call after that one (a harness never switches modes mid-run)
    integrity.sort(key=lambda item: item["kind"] == "vary")
    return Plan(probes, skipped, fixed + spent, integrity)


def _shape_specs(dims: dict[str, dict[str, Any]], steer: Steering, base_seed: int,
                 skipped: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """The shape probes, each with its input size relative to the task's; none (and a note in
    ``skipped``) when no constant of the reference changes a shape."""
    # shape variants of every dimension constant at once, then one dimension at a time where steered
    shape_ratio = {}
    for variant in SHAPE_VARIANTS:
        ratio = 1.0
        for d in dims.values():
            vals = d["value"] if isinstance(d["value"], list) else [d["value"]]
            for v in vals:
                ratio *= shape_value(variant, int(v)) / max(int(v), 1)
        shape_ratio[variant] = ratio
    shape_specs = []
    if dims:
        for variant, desc in SHAPE_VARIANTS.items():
            overrides = {n: _vary(d["value"], variant) for n, d in dims.items()}
            shape_specs.append((spec(f"shape_{variant}", "original", base_seed, dims=overrides, family="shape",
                                     description=f"{desc}: " + _dims_text(overrides),
                                     steered_by=steer.keys_for([2])), shape_ratio[variant]))
        traded = _traded_dims(dims)
        if traded is not None:
            # the same element count in another shape: a geometry latched from the first call, or
            # derived from numel alone, computes the wrong rows without raising
            shape_specs.append((spec("shape_traded", "original", base_seed, dims=traded, family="shape",
                                     description="two dimension constants traded, the same element count in "
                                                 "another shape: " + _dims_text(traded),
                                     steered_by=steer.keys_for([2])), 1.0))
        for value, keys in steer.dims.items():
            for name, d in dims.items():
                if d["value"] == value:
                    overrides = {name: shape_value("near", value)}
                    shape_specs.append((spec(f"shape_{name}", "original", base_seed, dims=overrides, family="shape",
                                             description=f"{name} alone changed: " + _dims_text(overrides),
                                             steered_by=keys), shape_value("near", value) / value))
    else:
        skipped.append({"probe": "shape_*", "input": "other shapes",
                        "reason": "no module-level constant of the reference changes an input's shape"})
    return shape_specs


def _traded_dims(dims: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Two dimensions that only shape the inputs (not the module), the first doubled and the
    second halved (it must be even and at least 4): the inputs keep their element count in another
    shape.  A dimension is a scalar constant or one element of a constant shape list
    (``input_shape = [4000]``).  None when the reference has no such pair."""
    slots = []  # (constant's name, index in its list or None, value)
    for n, d in dims.items():
        if d.get("changes_init"):
            continue
        v = d["value"]
        if isinstance(v, int):
            slots.append((n, None, v))
        elif isinstance(v, list):
            slots.extend((n, i, int(x)) for i, x in enumerate(v))
    for a, ia, va in slots:
        for b, ib, vb in slots:
            if (a, ia) == (b, ib) or vb % 2 or vb < 4:
                continue
            out: dict[str, Any] = {}
            for name, idx, value in ((a, ia, va * 2), (b, ib, vb // 2)):
                if idx is None:
                    out[name] = value
                else:
                    cur = list(out.get(name, dims[name]["value"]))
                    cur[idx] = value
                    out[name] = cur
            return out
    return None


def _value_specs(steer: Steering, base_seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The value probes in order, the steered ones (also returned by name) first."""
    # value probes; steered ones first, extra seeds for what the static stage suspects
    order = list(VALUE_ORDER)
    steered_first = []
    if steer.has(1, 6):
        steered_first += ["sign_flip", "single_negative", "shift_up"]
    if steer.has(15):
        steered_first += ["needle"]
    if steer.has(14, 16):
        steered_first += ["large", "offset", "scale_10"]
    for name in reversed(steered_first):
        order.remove(name)
        order.insert(0, name)
    from .shared.probes import TRANSFORMS

    value_specs = []
    for name in order:
        t = TRANSFORMS[name]
        value_specs.append(spec(name, name, base_seed, steered_by=steer.keys_for(t.classes)))
    if steer.has(1):
        value_specs.insert(len(steered_first), spec("single_negative_2", "single_negative", base_seed,
                                                    steered_by=steer.keys_for([1])))
    if steer.has(15):
        value_specs.insert(len(steered_first), spec("needle_2", "needle", base_seed, steered_by=steer.keys_for([15])))
    return value_specs, steered_first


def probe_bytes(load: dict[str, Any]) -> int:
    """What the parent holds for one task-shaped probe, roughly."""
    numel = int(load.get("input_numel") or 0)
    out = int(load.get("output_numel") or numel)
    return max(numel + 4 * out, 1) * 4


def _vary(value: Any, variant: str) -> Any:
    if isinstance(value, list):
        return [shape_value(variant, int(v)) for v in value]
    return shape_value(variant, int(value))


def _dims_text(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items())
