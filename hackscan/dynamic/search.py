"""Parent side: a seeded search for an input where the candidate and the reference disagree, beyond
the fixed probes, and the smallest such input it can reach.

The fixed probes try one pattern each (negated, shifted, a needle...).  A candidate keyed on a
pattern none of them produces (exact zeros beside negatives, repeated rows, small integers) passes
them all.  The search draws a few inputs that each combine several features: the sign of the values
(the task's, signed, all positive, all negative), small integers, a scale and an offset, a share of
exact zeros, a share of special values (``worker/hidden.SPECIAL_VALUES``), repeated rows, and a
shape (the task's, moved by one, smaller and odd).  Every feature is in at least one draw.  The
reference worker builds each input and its outputs as it does every probe's; the candidate's worker
only gets the inputs; the parent compares, as for every probe.

On a disagreement it shrinks greedily: halve every dimension constant once, drop one feature at a
time, keep the task's signs, halve again, replace half the values by their mean, and keep each
step that still disagrees.  The
finding names the task's draw that agrees, the input found and the smallest one, with the draw, the
dimensions and the probe seed that rebuild it (``--seed`` replays the whole search).

Refills (the same storage with new values, new storage with the old values, in-place writes) are the
integrity checks' (``follow``, ``repeat``, ``poison``): the search varies values and shapes only.

Bounded: ``MAX_CALLS`` candidate calls in all (``DRAWS`` draws, the rest shrinking), within the
probes' time budget; run only for a candidate that passed everything else (a rejected one needs no
further evidence).
"""

from __future__ import annotations

import random
import time
from typing import Any

from ..model import Finding
from .environments import enabled as differential_enabled
from .rules import found as found_finding
from .rules.results import wrong_result_on_searched_input
from .shared.probes import derive, probe_seed, spec

DRAWS = 4
MAX_CALLS = 8
# halvings of the shape the shrinking tries at most
MAX_HALVINGS = 3
# the draws go to the workers in one batch while the parent's share of them stays below this
ONE_BATCH_BYTES = 256 << 20

FEATURES = ("special", "sparse", "integers", "repeat_rows", "scale", "offset")
_CHOICES: dict[str, list[Any]] = {
    "special": [0.01, 0.1, 0.3],
    "sparse": [0.5, 0.9],
    "integers": [True],
    "repeat_rows": [True],
    # moderate: magnitudes far from the task's are HS403's (a legitimately less stable algorithm)
    "scale": [0.1, 0.5, 2.0, 4.0],
    "offset": [-2.0, -0.5, 0.5, 2.0],
}
_LIKELY = {"special": 0.5, "sparse": 0.4, "integers": 0.3, "repeat_rows": 0.3, "scale": 0.4, "offset": 0.3}
SIGNS = ("signed", "signed", "negative", "positive", "task")
SHAPES = ("task", "task", "near", "smaller_odd")


def draws_for(seed: int, n: int = DRAWS, shapes: bool = True) -> list[dict[str, Any]]:
    """``n`` draws from ``seed``: each feature with its own probability, then every feature missing
    from all of them added to one (drawn): a small search still tries every pattern once."""
    rnd = random.Random(derive(seed, "search"))
    out: list[dict[str, Any]] = []
    for _ in range(n):
        d: dict[str, Any] = {"sign": rnd.choice(SIGNS)}
        for f in FEATURES:
            if rnd.random() < _LIKELY[f]:
                d[f] = rnd.choice(_CHOICES[f])
        d["shape"] = rnd.choice(SHAPES) if shapes else "task"
        out.append(d)
    for f in FEATURES:
        if out and not any(f in d for d in out):
            out[rnd.randrange(len(out))][f] = rnd.choice(_CHOICES[f])
    if out and not any(d["sign"] == "signed" for d in out):
        out[rnd.randrange(len(out))]["sign"] = "signed"
    return out


def describe(draw: dict[str, Any], dims: dict[str, Any] | None = None) -> str:
    """How to build the input, in words."""
    sign = {"signed": "standard normal values", "negative": "-|x| of the task's draw",
            "positive": "|x| of the task's draw", "task": "the task's draw"}[draw.get("sign", "task")]
    parts = [sign]
    if draw.get("integers"):
        parts.append("rounded to multiples of 1/4 (x4, small integers)")
    if "scale" in draw:
        parts.append(f"scaled by {draw['scale']:g}")
    if "offset" in draw:
        parts.append(f"offset by {draw['offset']:+g}")
    if draw.get("sparse"):
        parts.append(f"{draw['sparse']:.0%} exact zeros")
    if draw.get("special"):
        parts.append(f"{draw['special']:.0%} special values (0, -0, ±1, ±0.5, ±2)")
    if draw.get("repeat_rows"):
        parts.append("every row a copy of the first")
    if draw.get("fill"):
        parts.append(f"{draw['fill']:.0%} of the values replaced by their mean")
    text = ", ".join(parts)
    if dims:
        text += "; " + ", ".join(f"{k}={v}" for k, v in dims.items())
    return "searched input: " + text


def _shape_dims(task_dims: dict[str, dict[str, Any]], variant: str) -> dict[str, Any]:
    from .shared.probes import shape_value

    if variant == "task" or not task_dims:
        return {}
    out: dict[str, Any] = {}
    for name, d in task_dims.items():
        v = d["value"]
        out[name] = [shape_value(variant, int(x)) for x in v] if isinstance(v, list) else shape_value(variant, int(v))
    return out


def _halved(task_dims: dict[str, dict[str, Any]], dims: dict[str, Any]) -> dict[str, Any] | None:
    """Every dimension constant halved (from the probe's own, else the task's); None if none moves."""
    cur = {n: dims.get(n, d["value"]) for n, d in task_dims.items()}
    out: dict[str, Any] = {}
    for n, v in cur.items():
        out[n] = [max(1, int(x) // 2) for x in v] if isinstance(v, list) else max(1, int(v) // 2)
    return out if out != cur else None


def _probe(pid: str, seed: int, draw: dict[str, Any], dims: dict[str, Any], step: str,
           parent: str | None = None) -> dict[str, Any]:
    p = spec(pid, "search", seed, dims=dims, family="search", description=describe(draw, dims))
    p["draw"] = {k: v for k, v in draw.items() if k != "shape"}
    p["search"] = {"step": step, "from": parent}
    return p


def _shrink_steps(task_dims: dict[str, dict[str, Any]], draw: dict[str, Any], dims: dict[str, Any],
                  tried: set[str], halvings: int) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The next simplifications to try, in order: (name, draw, dims).  One halving of the shape
    first (the cheapest input to try the rest on), then one feature dropped at a time, the task's
    signs, more halvings, and last half the values replaced by their mean."""
    halve: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    if halvings < MAX_HALVINGS and "halve" not in tried:
        h = _halved(task_dims, dims)
        if h is not None:
            halve.append(("halve the shape", draw, h))
    steps = list(halve) if halvings == 0 else []
    for f in FEATURES:
        if f in draw and f"drop {f}" not in tried:
            steps.append((f"drop {f}", {k: v for k, v in draw.items() if k != f}, dims))
    if draw.get("sign", "task") != "task" and "task signs" not in tried:
        steps.append(("task signs", dict(draw, sign="task"), dims))
    if halvings:
        steps.extend(halve)
    if not draw.get("fill") and "fill" not in tried:
        steps.append(("fill", dict(draw, fill=0.5), dims))
    return steps


class Search:
    """``DynamicRun``'s seeded input search (a mixin; needs ``_ask``, ``_run_batch``, ``make``)."""

    def _search(self, b: Any, ref: Any, plan: Any, refs: dict[str, dict[str, Any]], judge: Any, passed: bool,
                task_dims: dict[str, dict[str, Any]], budget: float, per_probe_bytes: int = 0,
                ref_changes: list[dict[str, Any]] | None = None) -> list[Finding]:
        """HS415's findings (none, or one), the search's record in ``info["search"]``, and what the
        searched calls changed in the candidate's process (HS509, HS506, HS507 as after every batch).
        ``passed``: the candidate passed every other correctness check; ``per_probe_bytes``: what the
        parent holds for one task-shaped probe (a large task's draws go one at a time)."""
        changed: list[dict[str, Any]] = []
        found = self._searched(b, ref, plan, refs, judge, passed, task_dims, budget, per_probe_bytes, changed)
        if changed:
            from .judge import Judgement

            later = Judgement()
            judge._changes(later, {}, {"search": {"changes": changed}}, [], list(ref_changes or []))
            found.extend(later.findings)
        return found

    def _searched(self, b: Any, ref: Any, plan: Any, refs: dict[str, dict[str, Any]], judge: Any, passed: bool,
                  task_dims: dict[str, dict[str, Any]], budget: float, per_probe_bytes: int,
                  changed: list[dict[str, Any]]) -> list[Finding]:
        info: dict[str, Any] = {"calls": 0, "probes": []}
        self.info["search"] = info
        if not differential_enabled():
            info["skipped"] = "HACKSCAN_DIFFERENTIAL=0"
            return []
        if not passed:
            info["skipped"] = "the candidate is already rejected"
            return []
        orig = refs.get("original") or {}
        per = float(orig.get("wall") or 0.0) * 4 / 3 + 0.002
        n = DRAWS if per * DRAWS <= budget else int(budget // per)
        if n <= 0:
            info["skipped"] = f"over the time budget ({budget:.1f} s; one search input about {per:.2f} s)"
            return []
        t0 = time.perf_counter()
        spent = [0.0]

        def run(specs: list[dict[str, Any]]) -> list[Any]:
            """Each spec through the reference, then the candidate; its record (None: not run)."""
            r = self._ask(ref, {"cmd": "probe", "probes": specs})
            if not r.get("ok"):
                from .failure import DynamicFailure

                err = r.get("error") or {}
                raise DynamicFailure(f"the reference worker failed on the searched inputs: "
                                     f"{str(err.get('message', '?'))[-300:]}")
            refs.update({p["id"]: p for p in r["probes"]})
            ran = [p for p in specs if "skipped" not in refs[p["id"]]]
            if ran:
                self._run_batch(b, 90 + len(info["probes"]), ran, False, [], refs, plan)
                info["calls"] += len(ran)
            out = []
            for p in specs:
                rec = judge.record(p, refs.get(p["id"]), b.cands.get(p["id"]), b.crashes.get(p["id"]))
                for role, src in (("reference", refs), ("candidate", b.cands)):
                    wall = (src.get(p["id"]) or {}).get("wall")
                    if isinstance(wall, (int, float)):
                        rec.cost[role] = float(wall)
                out.append(rec if p in ran else None)
                row = rec.row()
                row["draw"] = p["draw"]
                info["probes"].append(row)
                # what the calls left behind for other code in the process (the worker reports it
                # with the batch's last result), judged below as every batch's is
                changed.extend(((b.cands.get(p["id"]) or {}).get("changes")) or [])
                # judged: the outputs are not needed again (a large task's are GiBs)
                refs.pop(p["id"], None)
                b.cands.pop(p["id"], None)
            spent[0] = time.perf_counter() - t0
            return out

        draws = draws_for(self.seed, n, shapes=bool(task_dims))
        specs = [_probe(f"search_{k}", self.seed, d, _shape_dims(task_dims, d["shape"]), "draw")
                 for k, d in enumerate(draws)]
        if per_probe_bytes * len(specs) <= ONE_BATCH_BYTES:
            recs = run(specs)
        else:
            recs = [r for p in specs for r in run([p])]
        found = [(p, rec) for p, rec in zip(specs, recs, strict=True) if rec is not None and rec.status == "wrong"]
        raised = [(p, rec) for p, rec in zip(specs, recs, strict=True)
                  if rec is not None and rec.status in ("raised", "crashed")]
        if not found:
            if raised:
                p, rec = raised[0]
                decision = wrong_result_on_searched_input(p, rec, self._search_evidence(p, rec, p, []))
                return [found_finding(self.make, wrong_result_on_searched_input, decision)]
            return []
        first, best = found[0]
        cur, cur_rec = first, best
        tried: set[str] = set()
        halvings, k = 0, 0
        steps_kept: list[str] = []
        while info["calls"] < MAX_CALLS and spent[0] < budget:
            steps = _shrink_steps(task_dims, cur["draw"], cur["dims"], tried, halvings)
            if not steps:
                break
            name, draw, dims = steps[0]
            k += 1
            p = _probe(f"search_shrink_{k}", self.seed, draw, dims, name, cur["id"])
            rec = run([p])[0]
            if rec is not None and rec.status == "wrong":
                cur, cur_rec = p, rec
                steps_kept.append(name)
                if name == "halve the shape":
                    halvings += 1
                    continue  # halving may be tried again
            tried.add("halve" if name == "halve the shape" else name)
        decision = wrong_result_on_searched_input(cur, cur_rec, self._search_evidence(cur, cur_rec, first, steps_kept))
        return [found_finding(self.make, wrong_result_on_searched_input, decision)]

    def _search_evidence(self, p: dict[str, Any], rec: Any, first: dict[str, Any], steps: list[str]) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "probe": p["id"], "input": p["description"], "seed": self.seed, "replay": f"--seed {self.seed}",
            "agrees": {"probe": "original", "input": "get_inputs() with a fresh seed",
                       "probe_seed": probe_seed(self.seed, "original")},
            "disagrees": {"probe": p["id"], "input": p["description"], "draw": p["draw"], "dims": p["dims"],
                          "probe_seed": p["seed"]},
            "found": {"probe": first["id"], "input": first["description"], "draw": first["draw"],
                      "dims": first["dims"], "probe_seed": first["seed"]},
            "shrink_steps": steps,
            "build": "a fresh get_inputs() under torch.manual_seed(probe_seed) (dims overriding the reference's "
                     "constants), each float input rebuilt by hackscan.dynamic.worker.hidden.searched(x, draw, g), "
                     "g a torch.Generator seeded with derive(probe_seed, 'transform')",
        }
        if rec.outcome is not None:
            ev.update(rec.outcome.evidence())
        if rec.error is not None:
            ev["exception"] = str(rec.error.get("message", ""))[-500:]
        return ev
