"""The timing of a candidate that passed correctness, the parent's half: the baselines, the paired
rounds on fresh pairs of workers, the torch.compile baseline, handed to ``hackscan.perf.parent_side``
to judge.  A mixin of ``stage.DynamicRun``."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..model import Finding
from ..perf import parent_side
from ..perf.options import CURVE_QUICK, CURVE_SERIES
from .plan import Plan
from .rules import found
from .rules.protocol import candidate_does_not_run
from .session import Session, WorkerFailure
from .shared.probes import derive


def _memory_failure(text: str, dead: WorkerFailure | None) -> bool:
    """A fresh timing pair that ran out of memory: the first pair's workers are still alive beside
    it (the torch.compile baseline and the final ping need them), so this can be the harness's
    doing, not the candidate's; stated in the convergence note, never a finding."""
    return (dead is not None and dead.kind == "memory") or "out of memory" in text.lower() \
        or "memoryerror" in text.lower()


class TimingPairs:
    """``DynamicRun``'s performance stage (``--perf``)."""

    def _baselines(self, device: str) -> tuple[dict[str, bool], dict[str, str]]:
        """``perf_run.wanted_baselines`` for ``--baselines``; a bad value falls back to the default
        set, with the reason in ``performance_note``."""
        from . import perf_run

        try:
            return perf_run.wanted_baselines(self.options.baselines, device)
        except ValueError as exc:
            self.info["performance_note"] = str(exc)
            return perf_run.wanted_baselines(None, device)

    def _perf_wanted(self) -> bool:
        return bool(self.options.perf)

    def _perf(self, ref: Session, cand: Session | None, j: Any, refs: dict[str, dict[str, Any]], plan: Plan,
              device: str) -> list[Finding]:
        """Time reference and candidate, check the candidate's times with this process's clock, add
        the torch.compile baseline (see ``perf_run``), and judge them (``hackscan.perf.parent_side``)."""
        if not j.correctness_passed or cand is None or cand.dead is not None or ref.dead is not None:
            why = "the candidate did not pass correctness" if not j.correctness_passed else "a worker is gone"
            self.info["performance_skipped"] = why
            self.info["_performance"] = {"measured": False, "reason": why}
            return []
        from . import perf_run

        # what passed correctness is timed, at the half-precision level too: that level passes
        # correctness (HS406 says so apart), and a candidate whose every original input lands there
        # (a convolution in TF32 or fp16) must be timed, not left with no input set to time
        passed = ("pass", "half")
        # fresh draws only: the near-repeat of the first one (``nudged``) would time it twice
        originals = [p["id"] for p in plan.probes if p["family"] == "original" and p.get("transform", "original") == "original"
                     and p["id"] in j.records and j.records[p["id"]].status in passed]
        sets: dict[str, list[str]] = {"original": originals}
        for p in plan.probes:
            if p["family"] == "value" and not p.get("dims") and j.records.get(p["id"]) and \
                    j.records[p["id"]].status in passed:
                sets.setdefault(p["transform"], []).append(p["id"])
        if not any(sets.values()):
            why = "no input set passed correctness to be timed on"
            self.info["performance_skipped"] = why
            self.info["_performance"] = {"measured": False, "reason": why}
            return []
        run_base, why_not = self._baselines(device)
        budget = float(self.opts.get("perf_budget_s") or perf_run.PERF_BUDGET_S.get(device, 1.0))
        perf_mode = str(self.opts.get("perf_mode") or "target")
        opts = {"budget_s": budget, "seed": derive(self.seed, "perf"), "sets": len(originals),
                # "target" (repeat until each main series' interval is narrow) or "thorough" (fixed)
                # ("quick" is "target" in the worker: it only spares the fresh pairs below)
                "mode": "target" if perf_mode == "quick" else perf_mode,
                # the curve's series (HS606, docs/curve.md): the two the hidden sets do not cover
                # under --perf quick, all four otherwise
                "curve": list(CURVE_QUICK if perf_mode == "quick" else CURVE_SERIES),
                # the torch.compile baseline has a request of its own (below), with its own allowance
                "compile": "never", "tf32": run_base["tf32"],
                # the other worker stays alive: the device's free memory is not this worker's alone
                "exclusive_device": False,
                "rules": {r.id: self.config.options_for(r.id, r.options) for r in self.registry
                          if r.id.startswith("HS6")}}
        host_ceilings = perf_run.HostCeilings(getattr(self.pool, "cache_root", None))
        opts["extra"] = {"known_ceilings": host_ceilings.load()}
        errors: dict[str, str] = {}
        raw: dict[str, Any] = {}
        t = time.perf_counter()
        # the reference first: it fingerprints the calls the candidate's timed outputs are checked against
        for role, session in (("reference", ref), ("candidate", cand)):
            session.restart_clock(max(float(self.options.timeout), 30.0 + 20 * budget))
            try:
                # the candidate's stored inputs are under their tokens
                role_sets = sets if role == "reference" else \
                    {k: [self.alias.token(i) for i in ids] for k, ids in sets.items()}
                reply = session.request({"cmd": "perf", "sets": role_sets, "options": opts})
                if not reply.get("ok"):
                    errors[role] = (reply.get("error") or {}).get("message", "?")
                    raw[role] = None
                else:
                    raw[role] = reply.get("perf")
                    if raw[role] is None:
                        errors[role] = reply.get("reason", "no result")
            except WorkerFailure as exc:
                errors[role] = f"the {role} worker {exc.kind}: {exc}"
                raw[role] = None
        self.timings["perf_s"] = time.perf_counter() - t
        host_ceilings.remember(raw.get("reference"), trusted=not self.sub.self_reference)

        outside = None
        if isinstance(raw.get("candidate"), dict) and not raw["candidate"].get("error") and cand.dead is None:
            t = time.perf_counter()
            outside = perf_run.outside_clock(cand, raw["candidate"], perf_run.SPIN_BUDGET_S.get(device, 0.5),
                                             max(float(self.options.timeout), 60.0))
            self.timings["perf_outside_clock_s"] = time.perf_counter() - t
            if outside is not None and "error" in outside:
                self.info["performance_outside_clock"] = outside["error"]
                outside = None

        paired = None
        if (isinstance(raw.get("candidate"), dict) and not raw["candidate"].get("error") and cand.dead is None
                and isinstance(raw.get("reference"), dict) and not raw["reference"].get("error") and ref.dead is None
                and self.opts.get("perf_paired", True)):
            # the speedup a user acts on: candidate and baselines in alternating short blocks, the
            # ratio taken per pair (perf_run.paired_rounds); absolute times above move with the load
            # The rounds are spread over several pairs of fresh worker processes: each pair carries
            # a bias of its own that no statistic over its rounds can see (stats.between_processes)
            t = time.perf_counter()
            cap = self.opts.get("perf_pair_cap_s")
            per = self.opts.get("perf_pair_process_s")
            most = self.opts.get("perf_pair_processes_max")
            least = self.opts.get("perf_pair_processes")
            if perf_mode == "quick":
                # the RL gate's budget (about 10 s of timing per candidate): the scan's
                # own pair only; the report then says the spread between processes is unknown
                least = most = 1
            originals_specs = [p for p in plan.probes if p["id"] in set(originals)]
            paired = perf_run.process_pairs(
                (ref, cand), lambda i: self._fresh_pair(i, originals_specs, sets, opts, device),
                raw["candidate"], raw["reference"], device, float(self.opts.get("perf_target_rel") or 0.05),
                min_processes=int(least or perf_run.PROCESS_MIN),
                max_processes=int(most) if most else None, rounds_s=float(per) if per else None,
                cap_s=float(cap) if cap else None, timeout=max(float(self.options.timeout), 60.0),
                relayout=bool(self.opts.get("perf_pair_relayout", True)),
                pin=bool(self.opts.get("perf_pair_pin", True)), unlocked=self._between_timings)
            self.timings["perf_paired_s"] = time.perf_counter() - t

        if isinstance(raw.get("reference"), dict) and isinstance(raw["reference"].get("baselines"), dict):
            t = time.perf_counter()
            raw["reference"]["baselines"]["compile"] = self._compile_baseline(ref, sets, run_base, why_not, raw,
                                                                              device, opts)
            self.timings["perf_compile_s"] = time.perf_counter() - t
        from .protocol import PerfContext

        ctx = PerfContext(
            device=device, options=opts, errors=errors,
            reference_outputs={k: [refs[i]["out32"] for i in ids] for k, ids in sets.items()},
            reference_outputs64={k: [refs[i].get("out64") for i in ids] for k, ids in sets.items()},
            structures={k: [refs[i]["structure"] for i in ids] for k, ids in sets.items()},
            tolerance=self.tol, finding_factory=self.make, static_report=self.report, outside=outside,
            paired=paired)
        try:
            performance, findings = parent_side.evaluate(raw.get("candidate"), raw.get("reference"), ctx)
        except Exception as exc:  # the perf stage's bug must not lose the dynamic findings
            self.info["performance_error"] = f"{type(exc).__name__}: {exc}"
            return []
        if self.timing_sets is not None and performance.get("measured"):
            performance["input_sets"] = perf_run.timing_sets_report(self.timing_sets, len(originals), performance)
        self.info["_performance"] = performance
        return list(findings)

    def _fresh_pair(self, index: int, specs: list[dict[str, Any]], sets: dict[str, list[str]], opts: dict[str, Any],
                    device: str) -> tuple[Session, Session, Callable[[], None]] | str:
        """A new reference and candidate worker, loaded as the first ones were, given the timing
        sets (drawn again by the new reference from the same probe specs, handed to the candidate as
        stored inputs) and readied for ``perf_block`` (``perf_setup``: no measurement of their own).
        Returns the two sessions and a function that closes them, or why they could not be readied
        (the paired speedup is then stated over the pairs that timed).  Their channels are checked
        like the first pair's (they join ``self.sessions``)."""
        again = self._again
        if again is None:
            return f"pair {index + 1}: no worker server to start it from"
        zygote, timeout = again["zygote"], float(again["timeout"])
        sub = self.sub
        made: list[Session] = []
        t_ready = time.perf_counter()

        def close(report_death: bool = True) -> None:
            cand_now = made[1] if len(made) > 1 else None
            if report_death and cand_now is not None and cand_now.dead is not None \
                    and not _memory_failure(str(cand_now.dead), cand_now.dead):
                # it died, hung or broke its channel while timed: the candidate did it, as in the
                # first pair (the rounds it left stay in the figure, the death is a finding)
                self.protocol_findings.append(self._crash_finding(cand_now.dead, "being timed in a fresh pair of workers"))
            for sess in made:
                try:
                    sess.close()
                except Exception:  # noqa: BLE001 - a worker that will not close is killed at the end
                    pass

        blame = None  # "candidate" once a failure is the candidate's own (it ran the same requests before)
        try:
            ref = self._spawn(zygote, "reference", sub.reference_path or "<reference>", device, timeout)
            made.append(ref)
            cand = self._spawn(zygote, "candidate", sub.file or sub.path, device, timeout)
            made.append(cand)
            cand.compile_allowance = float(again["compile_allowance"])
            cand.send(again["candidate"])  # the two loads overlap, as in the scan
            r_load = self._ask(ref, again["reference"])
            blame = "candidate"
            c_load = cand.recv()
            if not isinstance(c_load, dict) or not c_load.get("ok") or c_load.get("failed"):
                why = (c_load.get("error") or {}).get("message") if isinstance(c_load, dict) else None
                raise RuntimeError(f"ModelNew did not load again in a fresh worker: {str(why or c_load)[-200:]}")
            blame = None
            if not r_load.get("ok"):
                raise RuntimeError(f"the reference did not load: {str((r_load.get('error') or {}).get('message'))[-200:]}")
            r_probe = self._ask(ref, {"cmd": "probe", "probes": specs})
            drawn = {p["id"]: p for p in r_probe.get("probes", []) if isinstance(p, dict) and "inputs" in p} \
                if r_probe.get("ok") else {}
            missing = [p["id"] for p in specs if p["id"] not in drawn]
            if missing:
                raise RuntimeError(f"the reference did not draw the timing inputs again ({', '.join(missing[:4])})")
            tok = self.alias.token
            blame = "candidate"
            stored = self._ask(cand, {"cmd": "probe", "probes": [
                {"id": tok(pid), "setup": tok("harness"), "inputs": drawn[pid]["inputs"], "store_only": True}
                for pid in drawn]})
            if not stored.get("ok"):
                raise RuntimeError(f"the candidate worker did not take the timing inputs: "
                                   f"{str((stored.get('error') or {}).get('message'))[-200:]}")
            for role, sess in (("reference", ref), ("candidate", cand)):
                blame = role if role == "candidate" else None
                role_sets = sets if role == "reference" else {k: [tok(i) for i in ids] for k, ids in sets.items()}
                ready = self._ask(sess, {"cmd": "perf_setup", "sets": role_sets, "options": opts})
                if not ready.get("ok") or not ready.get("ready"):
                    why = ready.get("reason") or (ready.get("error") or {}).get("message") or "?"
                    raise RuntimeError(f"the {role} worker could not ready its blocks: {str(why)[-200:]}")
        except (WorkerFailure, RuntimeError, KeyError, TypeError) as exc:
            dead = made[1].dead if len(made) > 1 else None
            if blame == "candidate" and not self._fresh_failed and not _memory_failure(str(exc), dead):
                # it loaded, passed every probe and was timed in the first pair; in a pair started
                # the same way it fails: the candidate tells the two apart (fail closed), reported once
                self.protocol_findings.append(found(self.make, candidate_does_not_run, candidate_does_not_run(
                    self.seed, "timing pair", str(exc)[-300:], pair=index + 1)))
                self._fresh_failed = True
            close(report_death=blame != "candidate")
            return f"pair {index + 1}: {exc}"
        self.timings["perf_pair_ready_s"] = self.timings.get("perf_pair_ready_s", 0.0) + time.perf_counter() - t_ready
        if hasattr(zygote, "quiet"):
            # the two spares started behind this pair import torch: CPU work the rounds must not share
            zygote.quiet()
        return ref, cand, close

    def _compile_baseline(self, ref: Session, sets: dict[str, list[str]], run_base: dict[str, bool],
                          why_not: dict[str, str], raw: dict[str, Any], device: str,
                          opts: dict[str, Any]) -> dict[str, Any]:
        """The torch.compile entry: measured now, reused from an earlier candidate of the same
        reference in this process, or skipped with the reason."""
        from . import perf_run

        tf32 = device == "cuda" and run_base["tf32"]
        if not run_base["compile"]:
            return {"tf32": tf32, "skipped": why_not.get("compile", "not requested")}
        if ref.dead is not None:
            return {"tf32": tf32, "skipped": f"the reference worker is gone: {ref.dead}"}
        compile_opts = {k: v for k, v in opts.items() if k != "compile"}
        compile_opts["compile_mode"] = str(self.opts.get("perf_compile_mode") or "default")
        device_info = raw["reference"].get("device") if isinstance(raw["reference"].get("device"), dict) else {}
        key = perf_run.CompileCache.key(self.sub.reference or "", device_info, self._r_load or {}, compile_opts)
        cached = perf_run.COMPILE_CACHE.get(key)
        if cached is not None:
            cached["reused"] = True
            return cached
        timeout = float(self.opts.get("perf_compile_timeout") or perf_run.COMPILE_TIMEOUT_S)
        if self._timing_held is not None:
            # among other candidates: compile with the device shared (Inductor's code generation is
            # CPU work; 7-9 s per task on an H200), then time it exclusively
            with self._between_timings():
                warm = perf_run.measure_compile(ref, sets, compile_opts, timeout, tf32, warm_only=True)
            if "skipped" in warm:
                perf_run.COMPILE_CACHE.put(key, warm)
                return warm
        entry = perf_run.measure_compile(ref, sets, compile_opts, timeout, tf32)
        entry["measured_with"] = self.sub.path
        perf_run.COMPILE_CACHE.put(key, entry)
        return entry
