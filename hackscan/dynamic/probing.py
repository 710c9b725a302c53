"""Probing, the parent's half: the reference's later rounds and extra runs, the candidate's requests
with every name replaced by a token (``Aliases``) and its replies mapped back.  A mixin of
``stage.DynamicRun`` and the helpers it needs."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .failure import DynamicFailure
from .judge import audit_probe_reply
from .plan import Plan
from .rules import found
from .rules.protocol import candidate_does_not_run, unanswered_check
from .session import Session, WorkerFailure

# the candidate's probes go in these batches of families, the task's own inputs first; then the
# integrity checks
BATCHES = (("original", "params"), ("value", "magnitude", "layout"), ("shape",))
# fresh workers a candidate gets after its worker died on a batch
MAX_RESPAWNS = 2


@dataclass
class Batches:
    """The candidate's side of the probes while they run: its current worker (a dead one is
    replaced for the next batch), what it answered, what it died on, and how to start another."""
    cand: Any
    t_load: float
    zygote: Any
    device: str
    timeout: float
    compile_allowance: float
    load_msg: dict[str, Any]
    cands: dict[str, dict[str, Any]] = field(default_factory=dict)
    crashes: dict[str, str] = field(default_factory=dict)
    integrity: list[dict[str, Any]] = field(default_factory=list)
    respawns: int = 0


class Aliases:
    """Opaque tokens for the names the candidate worker must not see (probe ids such as
    ``shift_up``, setups such as ``redrawn``, plan items such as ``poison``), and back.

    Random per run (``secrets``), never derived from the seed: they are the candidate's view only,
    and findings, which use the names, replay with ``--seed`` as before."""

    def __init__(self) -> None:
        self._to: dict[str, str] = {}
        self._from: dict[str, str] = {}

    def token(self, name: str) -> str:
        t = self._to.get(name)
        if t is None:
            import secrets

            t = secrets.token_hex(6)
            while t in self._from:
                t = secrets.token_hex(6)
            self._to[name], self._from[t] = t, name
        return t

    def name(self, token: str) -> str:
        return self._from.get(token, token)

    def restore(self, value: Any) -> Any:
        """``value`` (a reply: dicts, lists, strings, arrays) with every token back to its name,
        whole strings and inside short ones (``"call on <token>"``); arrays are left alone."""
        if isinstance(value, str):
            if value in self._from:
                return self._from[value]
            if len(value) < 300 and self._from:
                for t, n in self._from.items():
                    if t in value:
                        value = value.replace(t, n)
            return value
        if isinstance(value, dict):
            return {self.restore(k) if isinstance(k, str) else k: self.restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.restore(v) for v in value]
        return value


def _one_dim_at_a_time(plan: Plan, refs: dict[str, dict[str, Any]], dims: dict[str, Any], seed: int,
                       limit: int = 4) -> list[dict[str, Any]]:
    from .shared.probes import shape_value, spec

    joint_failed = [p for p in plan.probes if p["family"] == "shape" and p["id"] in ("shape_smaller_odd", "shape_near")
                    and "skipped" in (refs.get(p["id"]) or {})]
    if not joint_failed or len(dims) < 2:
        return []
    out = []
    for name, d in list(dims.items())[:limit]:
        v = d["value"]
        changed = [shape_value("near", int(x)) for x in v] if isinstance(v, list) else shape_value("near", int(v))
        pid = f"shape_{name}_alone"
        if pid in refs:
            continue
        out.append(spec(pid, "original", seed, dims={name: changed}, family="shape",
                        description=f"{name} alone changed ({name}={changed}): the reference rejects all at once"))
    return out


def _measured(refs: dict[str, dict[str, Any]], load: dict[str, Any]) -> dict[str, float]:
    """Seconds per probe at the task's shape and at the smaller shape, from the first round
    (the reference's wall time, plus about a third again for the candidate's call)."""
    def wall(pid: str) -> float | None:
        r = refs.get(pid) or {}
        return float(r["wall"]) * 4 / 3 if "wall" in r and "skipped" not in r else None

    full = [w for w in (wall("original"), wall("original_b")) if w is not None]
    out: dict[str, float] = {}
    if full:
        out["full"] = min(full)
    small = wall("shape_smaller_odd")
    if small is not None:
        out["small"] = small
    return out


def _dtype(x: Any) -> str:
    from .shared.wire import BF16Array

    if isinstance(x, BF16Array):
        return "bfloat16"
    return str(getattr(x, "dtype", "float32"))


def _sane_load(c_load: dict[str, Any]) -> dict[str, Any]:
    """The candidate's load reply with the fields the parent reads type-checked: a value of the
    wrong type is dropped (an observation the candidate reports can only add findings)."""
    from .judge import _typed_common

    out = _typed_common(c_load)
    if not isinstance(out.get("matches", {}), dict):
        out["matches"] = {}
    # builds and counted extensions feed findings only (HS412, HS413, a compile message)
    if not isinstance(out.get("builds", []), list):
        out["builds"] = []
    out["builds"] = [{k: v for k, v in b.items() if isinstance(v, (str, int, float, bool))}
                     for b in out.get("builds", []) if isinstance(b, dict)]
    for key in ("extensions", "extensions_partial"):
        if not isinstance(out.get(key, []), list):
            out[key] = []
    if "crash" in c_load:
        out["crash"] = c_load["crash"]  # the parent's own description of the death
    return out


class Probing:
    """``DynamicRun``'s requests to the reference and the candidate for the probes and checks."""

    def _reference_round2(self, ref: Session, plan: Plan, refs: dict[str, dict[str, Any]], r_load: dict[str, Any],
                          r_probe: dict[str, Any]) -> None:
        """The probes the first round priced, then each dimension alone where all at once failed."""
        round2 = [p for p in plan.probes if p["id"] not in refs]
        if round2:
            r_more = self._ask(ref, {"cmd": "probe", "probes": round2})
            if r_more.get("ok"):
                refs.update({p["id"]: p for p in r_more["probes"]})
                r_probe["changes"] = r_more.get("changes", r_probe.get("changes", []))
            else:
                # a probe the reference cannot build comes back "skipped" inside an ok reply; a
                # failed request means the worker is gone or broken: nothing it did can be trusted
                err = r_more.get("error") or {}
                raise DynamicFailure(f"the reference worker failed on its second round of probes: "
                                     f"{str(err.get('message', '?'))[-300:]}")
        # a joint change of every dimension the reference rejects (a conv whose kernel no longer
        # fits, channels no longer divisible by groups): try each dimension alone
        alone = _one_dim_at_a_time(plan, refs, r_load.get("dims") or {}, self.seed)
        if alone:
            r_alone = self._ask(ref, {"cmd": "probe", "probes": alone})
            if not r_alone.get("ok"):
                err = r_alone.get("error") or {}
                raise DynamicFailure(f"the reference worker failed on the one-dimension probes: "
                                     f"{str(err.get('message', '?'))[-300:]}")
            refs.update({p["id"]: p for p in r_alone["probes"]})
            plan.probes.extend(alone)

    def _fetch_extras(self, ref: Session, refs: dict[str, dict[str, Any]], cands: dict[str, dict[str, Any]],
                      integrity: list[dict[str, Any]]) -> None:
        """Ask the reference for the runs only some comparisons need (see ReferenceWorker.extras)."""
        from .compare import bitwise_equal, compare

        rounded: set[str] = set()

        def check(out: Any, structure: str, pid: str) -> None:
            r = refs.get(pid)
            if not r or "skipped" in r or out is None:
                return
            if compare(out, structure, r["out32"], r.get("out64"), r["structure"], self.tol).level != "pass":
                rounded.add(pid)

        for pid, c in cands.items():
            if "out" in c:
                check(c["out"], c["structure"], pid)
        repeat: list[str] = []
        for item in integrity:
            if item.get("kind") == "follow":
                for out, src in zip(item.get("outs") or [], item.get("order") or [], strict=False):
                    r = refs.get(src) or {}
                    check(out, r.get("structure", ""), src)
            elif item.get("kind") == "poison" and item.get("out") is not None:
                check(item["out"], (refs.get("original") or {}).get("structure", ""), "original")
            elif item.get("kind") == "repeat":
                outs = item.get("outs") or []
                if any(not bitwise_equal(outs[0], o) for o in outs[1:]):
                    repeat.append(item.get("probe", "original"))
        if not rounded and not repeat:
            return
        t = time.perf_counter()
        reply = self._ask(ref, {"cmd": "extras", "rounded": sorted(rounded), "repeat": repeat})
        self.timings["reference_extras_s"] = time.perf_counter() - t
        if not reply.get("ok"):
            err = reply.get("error") or {}
            raise DynamicFailure(f"the reference worker failed on its extra runs: {str(err.get('message', '?'))[-300:]}")
        for pid, extra in (reply.get("extras") or {}).items():
            if pid in refs:
                refs[pid].update(extra)

    def _candidate_batch(self, batch: list[dict[str, Any]], refs: dict[str, dict[str, Any]], plan: Plan,
                         integrity: bool) -> dict[str, Any]:
        """The candidate's request for one batch.  Nothing in it names a probe, a setup or a check:
        ids are tokens (``Aliases``), a strided layout is ``view: 1``, and each plan item says what
        to do (``_plan_item``); ``_restore_reply`` maps the answer back."""
        tok = self.alias.token
        probes = []
        for p in batch:
            r = refs.get(p["id"])
            if not r or "skipped" in r:
                continue
            item = {"id": tok(p["id"]), "setup": tok(p["setup"]),
                    "view": 1 if p.get("layout") == "strided" else 0, "inputs": r["inputs"]}
            if "init_inputs" in r:
                item["init_inputs"] = r["init_inputs"]
                item["state"] = r.get("state", {})
            probes.append(item)
        msg: dict[str, Any] = {"cmd": "probe", "probes": probes}
        if integrity:
            needed = {i["probe"] for i in plan.integrity} | {i.get("other") for i in plan.integrity if i.get("other")}
            ok = [pid for pid in needed if refs.get(pid) and "skipped" not in refs[pid]]
            msg["probes"] = [{"id": tok(pid), "setup": tok("harness"), "inputs": refs[pid]["inputs"], "store_only": True}
                             for pid in ok]
            items = []
            ref_o = refs.get("original") or {}
            for i in plan.integrity:
                if i["probe"] not in ok or (i.get("other") and i["other"] not in ok):
                    continue
                item = self._plan_item(i)
                if i["kind"] in ("poison", "decoy") and "out32" in ref_o:
                    item["out_shapes"] = [list(getattr(x, "shape", ())) for x in ref_o["out32"] if x is not None]
                    item["out_dtypes"] = [_dtype(x) for x in ref_o["out32"] if x is not None]
                items.append(item)
            msg["plan"] = items
        return msg

    def _plan_item(self, i: dict[str, Any]) -> dict[str, Any]:
        """A plan item as the candidate worker gets it: an operation, not the check's name."""
        from .judge import DECOY

        tok = self.alias.token
        item: dict[str, Any] = {"id": tok(i["id"]), "on": tok(i["probe"]), "setup": tok(i.get("setup", "harness"))}
        if i.get("other"):
            item["other"] = tok(i["other"])
        kind = i["kind"]
        if kind == "repeat":
            item["do"] = "again"
        elif kind == "follow":
            item.update(do="refill", cycles=int(i.get("cycles", 2)))
        elif kind == "poison":
            # NaN as text: JSON has no NaN literal
            item.update(do="fill", value="nan", det=True)
        elif kind == "decoy":
            item.update(do="fill", value=repr(float(DECOY)), det=False)
        elif kind == "census":
            item["do"] = "count"
        elif kind == "vary":
            item.update(do="vary", conditions=[dict(c) for c in i["conditions"]])
        else:
            raise ValueError(f"unknown integrity probe {kind}")
        return item

    def _named_request(self, msg: dict[str, Any], plan: Plan) -> dict[str, Any]:
        """The request as the judge reads it: probe ids and plan items by name (the reply is
        restored to names before it is audited against this)."""
        by_id = {i["id"]: i for i in plan.integrity}
        named: dict[str, Any] = {"probes": [dict(p, id=self.alias.restore(p["id"])) for p in msg.get("probes", [])]}
        if "plan" in msg:
            named["plan"] = [by_id.get(self.alias.restore(i["id"]), {"kind": "?", "id": i["id"]})
                             for i in msg["plan"]]
        return named

    def _restore_reply(self, reply: dict[str, Any], plan: Plan) -> dict[str, Any]:
        """The candidate's answer with names in place of tokens, and each plan item's result as
        the judge reads it (``kind``, ``id``, ``probe``, ``other``)."""
        reply = self.alias.restore(reply)
        by_id = {i["id"]: i for i in plan.integrity}
        items = []
        for res in reply.pop("items", None) or []:
            planned = by_id.get(res.get("id"))
            if planned is not None:
                res = dict(res, kind=planned["kind"], probe=planned["probe"], other=planned.get("other"))
            items.append(res)
        reply["integrity"] = items
        return reply

    def _probe_candidate(self, b: Batches, ref: Session, plan: Plan, refs: dict[str, dict[str, Any]],
                         r_load: dict[str, Any], r_probe: dict[str, Any]) -> None:
        """The candidate's probes, batch by batch; a dead worker is replaced for the next batch.
        The task's own inputs go first, so that a candidate that cannot run here (or at all) costs
        the reference no more probes."""
        first_batch = [p for p in plan.probes if p["family"] in BATCHES[0]]
        go_on = self._run_batch(b, 0, first_batch, False, [], refs, plan)
        runs = any(b.cands.get(p["id"], {}).get("out") is not None for p in first_batch)
        if go_on and runs:
            t2 = time.perf_counter()
            self._reference_round2(ref, plan, refs, r_load, r_probe)
            self.timings["reference_probes_s"] += time.perf_counter() - t2
            batches = [[p for p in plan.probes if p["family"] in fams] for fams in BATCHES[1:]]
            batches.append([])  # integrity
            for bi, batch in enumerate(batches, start=1):
                is_integrity = bi == len(batches)
                if not batch and not is_integrity:
                    continue
                if not self._run_batch(b, bi, batch, is_integrity, batches[bi:], refs, plan):
                    break
        else:
            # nothing runs on the task's own inputs: other probes would only repeat that
            for p in plan.probes:
                if p["family"] not in BATCHES[0]:
                    refs.setdefault(p["id"], {"id": p["id"], "skipped": "not run: ModelNew fails on the task's "
                                                                       "own inputs"})

    def _respawned(self, b: Batches, bi: int, batch: list[dict[str, Any]],
                   later: list[list[dict[str, Any]]]) -> Any:
        """A live candidate worker for batch ``bi``: the current one, a fresh one loaded again, or
        None (too many deaths: True is then what the batch returns; it failed to load: False)."""
        c = b.cand
        if c is not None and c.dead is None:
            return c
        if b.respawns >= MAX_RESPAWNS:
            for p in batch:
                b.crashes[p["id"]] = "not run: the candidate worker died too often"
            return True
        b.respawns += 1
        # a worker server that cannot fork any more (the candidate may have killed it)
        # raises here: the run is unproven, verdict error (execute)
        c = self._spawn(b.zygote, "candidate", self.sub.file or self.sub.path, b.device, b.timeout)
        b.cand = c
        c.compile_allowance = b.compile_allowance
        again = self._ask(c, b.load_msg)
        if not again.get("ok") or again.get("failed"):
            for rest in [batch, *later]:
                for p in rest:
                    b.crashes.setdefault(p["id"], "not run: the respawned candidate worker did not load")
            self.protocol_findings.append(found(self.make, candidate_does_not_run, candidate_does_not_run(
                self.seed, "reload", str((again.get('error') or {}).get('message', '?'))[-300:], batch=bi)))
            return False
        return c

    def _run_batch(self, b: Batches, bi: int, batch: list[dict[str, Any]], is_integrity: bool,
                   later: list[list[dict[str, Any]]], refs: dict[str, dict[str, Any]], plan: Plan) -> bool:
        """One batch of probes (or the integrity checks) to the candidate.  False when the
        remaining batches should not run."""
        msg = self._candidate_batch(batch, refs, plan, is_integrity)
        if not msg["probes"] and not msg.get("plan"):
            return True
        c = self._respawned(b, bi, batch, later)
        if isinstance(c, bool):
            return c
        c.restart_clock(b.timeout)
        try:
            reply = self._restore_reply(c.request(msg), plan)
        except WorkerFailure as exc:
            return self._batch_died(b, bi, batch, is_integrity, later, exc)
        if not isinstance(reply, dict) or not reply.get("ok"):
            err = reply.get("error") if isinstance(reply, dict) else None
            err = err if isinstance(err, dict) else {"message": "a malformed reply"}
            for p in batch:
                b.cands[p["id"]] = {"id": p["id"], "error": err}
            # the whole request raised, not one probe in it (each probe's own exception is
            # answered inside an ok reply): a worker subverted from inside, SystemExit out of
            # the probe loop.  Not one probe or check was answered
            self.protocol_findings.append(found(self.make, unanswered_check, unanswered_check(
                self.seed, batch=bi, batch_error=str(err.get("message", "?")),
                probes=[self.alias.restore(p["id"]) for p in msg["probes"]][:20],
                checks=[i["kind"] for i in self._named_request(msg, plan).get("plan", [])])))
            return True
        built_later = [{k: x.get(k) for k in ("name", "key", "seconds", "compiled", "failed", "replayed") if k in x}
                       for x in reply.get("builds") or [] if isinstance(x, dict)]
        if built_later:
            # built on first use, during the probes: compiled here (under the gate) or found in
            # the cache the farm filled; the worker's word, for the run's timings only
            info = self.info["compile"]
            info["later_builds"] = info.get("later_builds", []) + built_later[:20]
            info["compiled"] += sum(1 for x in built_later if x.get("compiled") is True)
        # every probe and check asked for comes back once, as raw outputs (judge.audit_probe_reply)
        answered, checks, problems = audit_probe_reply(self._named_request(msg, plan), reply)
        if problems:
            self.info.setdefault("unanswered", []).extend(problems[:20])
            self.protocol_findings.append(found(self.make, unanswered_check, unanswered_check(
                self.seed, batch=bi, problems=problems)))
        stored = {self.alias.restore(p["id"]) for p in msg["probes"] if p.get("store_only")}
        for r in answered:
            if r["id"] not in stored:
                b.cands[r["id"]] = r
        # forwarded: the parent no longer needs them (a large task's are GiBs), except those a plan
        # item calls again (the integrity batch re-sends them)
        kept = {"original", "original_b"} | {i["probe"] for i in plan.integrity} | \
            {i["other"] for i in plan.integrity if i.get("other")}
        for p in batch:
            if p["id"] not in kept and p["id"] in refs:
                refs[p["id"]].pop("inputs", None)
        b.integrity.extend(checks)
        return True

    def _batch_died(self, b: Batches, bi: int, batch: list[dict[str, Any]], is_integrity: bool,
                    later: list[list[dict[str, Any]]], exc: WorkerFailure) -> bool:
        """The candidate's worker died, hung or broke its channel on batch ``bi``."""
        what = f"the candidate worker {exc.kind}: {exc}"
        for p in batch:
            b.crashes[p["id"]] = what
        if is_integrity:
            b.integrity.append({"kind": "integrity", "error": {"message": what}, "unanswered": what})
        self.info.setdefault("worker_failures", []).append(dict(exc.describe(), batch=bi))
        if bi or exc.kind == "protocol":
            # batch 0's crash is HS408 through the original probes (judge); a later one is
            # a death the candidate caused all the same
            self.protocol_findings.append(self._crash_finding(
                exc, f"running {'the integrity checks' if is_integrity else 'probe batch ' + str(bi)} "
                     f"({', '.join(p['id'] for p in batch[:4]) or 'integrity plan'})"))
        if bi == 0 or exc.kind == "timeout":
            # a hang costs the time limit once, not once per batch
            for rest in later:
                for p in rest:
                    b.crashes.setdefault(p["id"], f"not run: the candidate worker {exc.kind} on an "
                                                   "earlier batch")
            return False
        return True
