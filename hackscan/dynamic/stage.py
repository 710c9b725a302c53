"""The dynamic stage for one submission: plan, run both workers, judge, hand over to perf, report.

``run_dynamic_stage(sub, report, options, config)`` is what ``hackscan.pipeline`` calls after the
static stage.  It never raises for anything a candidate does: a crash, a hang, an import error
or an unrunnable candidate ends up in the report (as a finding, or in ``report.dynamic`` with the
reason), and the scan goes on.

It fails closed: what the candidate causes (a death, a hang, a missing or forged answer) is an
error-severity finding; what the candidate cannot be blamed for but still leaves the run unproven
(the reference or the worker server dying, a lost channel, a bug in hackscan) makes the verdict
``error`` with ``report.dynamic["failed"]`` true and the reason, never the static verdict alone.
A stage that legitimately cannot run here (no reference, no GPU for a CUDA candidate) keeps the
static verdict and says why in ``report.dynamic["reason"]``.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..config import Config
from ..inputs import Submission
from ..model import Confidence, Finding, Location, Report, Severity, Stage, Verdict, verdict_for
from ..registry import Registry, load_registry
from ..suppress import find_suppressions
from . import confirm, runnable
from .compare import Tolerance
from .failure import DynamicFailure
from .holds import DeviceHolds
from .judge import Judge, ProbeRecord
from .link import link_findings
from .options import DynamicOptions
from .plan import FIRST_ROUND, Plan, make_plan, steering_from
from .pool import WorkerPool, default_pool
from .prebuild import Prebuild
from .probing import Aliases, Batches, Probing, _measured, _sane_load
from .protocol import CheckedSession
from .rules import found, rule_id_of
from .rules.custom_code import runtime_reference_fallback
from .rules.protocol import candidate_does_not_run, forged_reply
from .rules.results import precision_below_float32, wrong_result_on_fresh_inputs
from .rules.state import busy_while_idle
from .search import Search
from .session import Session, WorkerFailure
from .shared.probes import derive
from .shared.profiles import get_profile
from .spill import total_memory
from .timing_pairs import TimingPairs


def _pipeline_options(options: DynamicOptions) -> dict[str, Any]:
    extra = options.extra or {}
    return dict(extra.get("dynamic", extra))


# the candidate's worker left idle after the probes (HS510): a pause for a pool's spin-wait to end,
# then the window whose CPU time is read
IDLE_SETTLE_S = 0.05
IDLE_WINDOW_S = 0.25


class DynamicRun(DeviceHolds, Prebuild, Probing, Search, TimingPairs):
    """One submission's dynamic run; its parts are mixins: the device holds (holds.py), the build
    farm (prebuild.py), the probe requests (probing.py) and the timing (timing_pairs.py)."""

    def __init__(self, sub: Submission, report: Report, options: DynamicOptions, config: Config, pool: WorkerPool,
                 registry: Registry, on_phase: Callable[[str], None] | None = None, slot: Any = None):
        self.sub = sub
        # where this candidate runs among others (schedule.py): its device gate and GPU; None: alone
        self.slot = slot
        self._work_held: Any = None
        # the exclusive timing hold while timed (_exclusive), dropped between fresh timing pairs
        self._timing_held: Any = None
        self._timing_zygote: Any = None
        # what a fresh pair of timing workers needs to load again (set once the first pair loads)
        self._again: dict[str, Any] | None = None
        self._fresh_failed = False  # a fresh timing pair's candidate failed: reported once (_fresh_pair)
        self.on_phase = on_phase
        self.report = report
        self.options = options
        self.config = config
        self.pool = pool
        self.registry = registry
        # the stage's options are held by the rules whose units use them
        fresh, fallback, precision = (rule_id_of(u) for u in (wrong_result_on_fresh_inputs, runtime_reference_fallback,
                                                              precision_below_float32))
        rule = registry.get(fresh)
        self.opts = config.options_for(fresh, rule.options)
        self.opts.update(_pipeline_options(options))
        self.fallback_opts = config.options_for(fallback, registry.get(fallback).options)
        self.idle_opts = config.options_for(rule_id_of(busy_while_idle), registry.get(rule_id_of(busy_while_idle)).options)
        self.tol = Tolerance.from_options(config.options_for(precision, registry.get(precision).options) | self.opts)
        # the run's secret: never sent to a worker; every seed a worker gets is derived from it one-way
        # (probes.derive), and the construction seed of the harness setup is the profile's own
        self.seed = int(options.seed) if options.seed is not None else \
            int.from_bytes(os.urandom(8), "little") & 0x7FFF_FFFF_FFFF_FFFF
        self.profile = get_profile(getattr(config, "harness", None))
        # what the candidate worker sees instead of probe, setup and plan-item names
        self.alias = Aliases()
        self.timings: dict[str, float] = {}
        self.info: dict[str, Any] = {"ran": False, "seed": self.seed}
        self.target = runnable.inspect(sub, report.program)
        mem_gb = self.opts.get("memory_gb")
        # two workers and the parent share the machine: each worker gets about a third of it
        self.mem_bytes = int(float(mem_gb) * 2**30) if mem_gb else max(2 << 30, int(total_memory() * 0.3))
        self.sessions: list[Session] = []
        self.lines = sub.code.splitlines()
        self.timing_sets: Any = None
        self._r_load: dict[str, Any] | None = None
        # findings about the conversation itself (unanswered checks, dead workers), added to the judge's
        self.protocol_findings: list[Finding] = []
        # build key -> torch's error, for builds that failed to compile in the build farm (farm.py)
        self.build_failures: dict[str, str] = {}
        # the candidate's wall-clock deadline (monotonic), set when its first worker starts: every
        # worker of the candidate ends by then, whatever it sends (``Session.bound``)
        self._wall_end: float | None = None
        self._farm_thread: threading.Thread | None = None
        self._farm_out: dict[str, Any] | None = None

    def _phase(self, name: str) -> None:
        """Tell the caller (a progress display) which phase the run is entering: setup, build,
        probes, timing.  A broken display must not change the verdict, so its errors stop here."""
        if self.on_phase is not None:
            try:
                self.on_phase(name)
            except Exception:  # noqa: BLE001 - progress is cosmetic
                pass

    # ------------------------------------------------------------------------------- findings
    def make(self, rule_id: str, message: str, evidence: dict[str, Any] | None = None,
             severity: Severity | None = None, confidence: Confidence | None = None, stage: str = "dynamic") -> Finding:
        rule = self.registry.get(rule_id)
        sev = self.config.severity.get(rule_id) or severity or rule.severity
        line = self.target.forward_line
        return Finding(
            rule=rule.id, name=rule.name, severity=sev, confidence=confidence or rule.confidence, message=message,
            location=Location(self.sub.file or self.sub.path, line, self.target.forward_column, record=self.sub.record),
            stage=Stage(stage), evidence=dict(evidence or {}),
            snippet=self.lines[line - 1] if 0 < line <= len(self.lines) else None)

    # ------------------------------------------------------------------------------- entry
    def execute(self) -> Report:
        t0 = time.perf_counter()
        findings: list[Finding] = []
        try:
            # the candidate's extensions are compiled while its reference loads (farm.py)
            self._start_prebuild()
            self._hold_work()
            findings = self._run()
            findings += self.protocol_findings + self._channel_findings()
        except DynamicFailure as exc:
            self._failed(str(exc))
        except WorkerFailure as exc:  # the worker server, or a worker the candidate does not own
            self._failed(f"the dynamic stage could not run: {exc}")
        except Exception as exc:  # a bug in hackscan: the run proves nothing, so the verdict is error
            self._failed(f"internal error in the dynamic stage: {type(exc).__name__}: {exc}",
                         traceback=traceback.format_exc(limit=8))
        finally:
            self._release_work()
            # the farm's outcome is reported even when the stage stopped before the candidate loaded
            self._await_prebuild()
            for s in self.sessions:
                try:
                    s.close()
                except Exception:  # noqa: BLE001 - closing must not hide the verdict
                    pass
        if self.info.get("failed"):
            # what the candidate was already caught at stays in the report; the verdict is error anyway
            findings = list(self.protocol_findings)
        findings += self._unreported_build_failures()
        self.timings["total_s"] = time.perf_counter() - t0
        self.info["timings"] = {k: round(v, 4) for k, v in self.timings.items()}
        return self._finish(findings)

    def _finish(self, dyn: list[Finding]) -> Report:
        findings = self._settled(dyn)
        verdict = self.report.verdict if self.report.verdict.value == "error" else verdict_for(findings)
        error = self.report.error
        if self.info.get("failed"):
            verdict, error = Verdict.ERROR, str(self.info.get("reason"))
        return self.report.with_(findings=findings, verdict=verdict, dynamic=self.info, error=error,
                                 performance=self.info.pop("_performance", self.report.performance))

    # ------------------------------------------------------------------------------- verdict
    def _settled(self, dyn: list[Finding]) -> tuple[Finding, ...]:
        """The static findings and ``dyn`` as the report states them: selected, deduplicated,
        suppressed (audit mode), linked, and reconciled (what each stage proves about the other's
        findings: confirmed, downgraded, withdrawn)."""
        selected = {r.id for r in self.registry.select(self.config.select, self.config.ignore)}
        dyn = [f for f in dyn if f.rule in selected]
        dyn = _dedupe(dyn)
        if self.config.mode == "audit":
            sups = find_suppressions(self.sub.code)
            dyn = [next((f.with_(suppressed=True, suppression_reason=s.reason or "(no reason given)")
                         for s in sups if s.covers(f.rule, f.name, f.location.line)), f) for f in dyn]
        static, dyn = link_findings(list(self.report.findings), dyn, self.registry, self.info.get("probes", []))
        static, dyn = confirm.reconcile(static, dyn, self.info.get("custom_code"), self.registry)
        return tuple(static + dyn)

    def _rejected_before_timing(self, dyn: list[Finding]) -> list[str]:
        """Rules whose errors already reject the candidate, with every finding up to correctness
        settled as the report will settle them; empty when it may still pass.  Timing can only add
        findings (a stream suspicion confirmed by an escape, HS6xx); ``confirm.reconcile`` never
        softens a finding, so nothing later can clear what rejects here."""
        if self.report.verdict.value == "error":
            return []
        settled = self._settled(dyn + list(self.protocol_findings))
        if verdict_for(settled) is not Verdict.HACK:
            return []
        # a gate that rejects only some classes (``reject_classes``) still scores the others by their
        # speed: their errors alone do not make timing pointless
        from ..classes import CLASSES, class_of_rule

        wanted = set(CLASSES if self.config.reject_classes is None else self.config.reject_classes)
        return sorted({f.rule for f in settled if not f.suppressed and f.severity is Severity.ERROR
                       and class_of_rule(f.rule) in wanted})


    def _failed(self, reason: str, **more: Any) -> None:
        self.info.update(ran=False, failed=True, reason=reason, **more)

    def _cannot_run_here(self, reason: str) -> list[Finding]:
        """The candidate's process says it cannot run here (a missing device, driver or library, read
        from its own exception or its build wrapper's count).  Only the parent's own facts (the
        static target, the machine's info) may skip the stage; this word of the candidate's makes
        the run ``error`` (exit 2), so that a ModelNew raising a plausible "no CUDA driver" on
        purpose never keeps the static verdict."""
        self._failed("not checked: " + reason, cannot_run_here=True)
        return []

    def _channel_findings(self) -> list[Finding]:
        """Frames that answered no request (PROTOCOL.md, "Replies").  On the candidate's channel a
        finding; on the reference's, which the candidate cannot write, a broken run, unless the
        reference is the candidate's own file."""
        out: list[Finding] = []
        for s in self.sessions:
            bad = getattr(s, "violations", None)
            if not bad:
                continue
            if s.role == "reference" and not self.sub.self_reference:
                raise DynamicFailure(f"the reference worker sent {len(bad)} frame(s) that answer no request: "
                                     f"{bad[0]['why']}")
            self.info.setdefault("stray_frames", []).extend(dict(v, role=s.role) for v in bad[:20])
            out.append(found(self.make, forged_reply, forged_reply(self.seed, s.role, frames=bad)))
        return out

    def _crash_finding(self, exc: WorkerFailure, what: str) -> Finding:
        """A death, hang or memory overrun of the candidate's worker (the candidate caused it)."""
        if exc.kind == "protocol":
            return found(self.make, forged_reply, forged_reply(self.seed, "candidate", broke=f"{what}: {exc}",
                                                               kind=exc.kind, log_tail=exc.log_tail[-800:]))
        return found(self.make, candidate_does_not_run, candidate_does_not_run(
            self.seed, what, str(exc), worker=exc.kind, log_tail=exc.log_tail[-800:]))

    # ------------------------------------------------------------------------------- the run
    def _skip(self, reason: str) -> list[Finding]:
        self.info.update(ran=False, reason=reason)
        return []

    def _run(self) -> list[Finding]:
        sub, target = self.sub, self.target
        if target.problem:
            return self._skip(target.problem)
        if not sub.reference:
            return self._skip("no reference problem: pass --ref, or put a reference.py next to the candidate")
        zygote = self._start_server()
        device, why = runnable.choose_device(self.options.device, zygote.info, target)
        if device is None:
            return self._skip(why or "cannot run here")
        self.info["device"] = device
        timeout = float(self.options.timeout)
        if target.custom or self._perf_wanted():
            # the op census (HS508) needs a dispatch mode, and the performance stage's FLOP counter
            # a FlopCounterMode, whose first use imports torch._dynamo (4-8 s on a busy machine):
            # paid by the spare workers while they wait, not on the candidate's clock
            t = time.perf_counter()
            zygote.preload(["torch._dynamo"])
            self.timings["preload_s"] = time.perf_counter() - t
        setups = self._setups()
        ref, ref_load_msg, r_load = self._load_reference(zygote, device, timeout, setups)
        # the probes that always run (two fresh draws, the redrawn parameters) must fit in memory
        from .plan import probe_bytes

        mem_budget, held_in = self._holding_budget_gb(r_load)
        need = 3 * probe_bytes(r_load)
        if need > mem_budget * 2**30:
            return self._skip(f"the task's outputs are too large to compare here: about {need / 2**30:.1f} GiB for "
                              f"the probes that always run, over {held_in} "
                              f"(output: {r_load.get('output_numel')} elements)")
        batches = self._start_candidate(zygote, device, timeout, setups, r_load, ref_load_msg)
        plan, refs, r_probe, budget = self._plan_probes(ref, r_load, device, mem_budget)
        c_load = self._receive_load(batches.cand, batches.t_load, timeout)
        if device == "cpu" and c_load.get("cuda_builds"):
            # its custom path is CUDA: on a CPU only a fallback could run, which is not the candidate.
            # The count is the candidate worker's word (the static stage saw no CUDA): not run is error
            return self._cannot_run_here("the candidate builds CUDA code at run time and needs a CUDA GPU")
        if not c_load.get("ok") or c_load.get("failed"):
            return self._load_failure(c_load)
        matches = c_load.get("matches", {})
        self.info["parameters"] = matches
        for p in plan.probes:
            if p["setup"] == "redrawn":
                p["match_method"] = (matches.get("redrawn") or {}).get("method")

        self._phase("probes")
        t = time.perf_counter()
        self._probe_candidate(batches, ref, plan, refs, r_load, r_probe)
        cand = batches.cand
        self.timings["candidate_probes_s"] = time.perf_counter() - t
        cands, integrity = batches.cands, batches.integrity

        # "needs CUDA" is the candidate worker's word, read from an exception the candidate could
        # raise on purpose: a ModelNew that fails that way on every one of the task's own inputs was
        # not checked, which is error (never the static verdict); failing that way only elsewhere
        # is a failure like any other
        orig = [cands.get(p["id"]) or {} for p in plan.probes if p["family"] == "original"]
        needs = [(c.get("error") or {}).get("needs") if "error" in c else None for c in orig]
        if orig and all(n in ("cuda", "triton") for n in needs):
            return self._cannot_run_here(f"the candidate says it needs {needs[0].upper() if needs[0] == 'cuda' else 'Triton'}"
                                         " at run time: " + str(orig[0]["error"].get("message", ""))[-200:])
        judge = self._judge()
        self._fetch_extras(ref, refs, cands, integrity)
        findings, j = self._judge_probes(judge, plan, refs, batches, c_load, r_load, r_probe, device, budget)
        # beyond the fixed probes: a seeded search for an input where the two disagree (search.py)
        t = time.perf_counter()
        passed = j.correctness_passed and not any(f.severity is Severity.ERROR for f in findings)
        findings.extend(self._search(batches, ref, plan, refs, judge, passed, r_load.get("dims") or {}, budget,
                                     probe_bytes(r_load), r_load.get("changes", []) + r_probe.get("changes", [])))
        self.timings["search_s"] = time.perf_counter() - t
        cand = batches.cand  # a worker that died on the search was replaced
        findings.extend(self._idle_cpu(cand))
        self.info["peak_rss_mb"] = {"reference": round(ref.peak_rss / 2**20, 1),
                                    "candidate": round(cand.peak_rss / 2**20, 1) if cand is not None else None}
        # the reference and the worker server must have lasted the whole correctness run: a reply
        # lost on the way would otherwise read as "no result", and a probe without one as skipped
        self._check_infrastructure(ref, zygote)
        findings.extend(self._timing(zygote, ref, cand, j, refs, plan, device, findings))
        if cand is not None and cand.dead is None and not cand.sync():
            # answered every probe, then could not answer a ping: it died or broke its channel
            self.protocol_findings.append(self._crash_finding(
                cand.dead or WorkerFailure("crash", "no answer to the final ping"), "answering the final ping"))
        elif cand is not None and cand.dead is not None and self.info.get("performance_skipped") is None \
                and self._perf_wanted() and j.correctness_passed:
            self.protocol_findings.append(self._crash_finding(cand.dead, "being timed"))
        return findings

    def _idle_cpu(self, cand: Session | None) -> list[Finding]:
        """The CPU the candidate's worker tree uses while nothing is asked of it (HS510), read by
        the parent from ``/proc`` after a short settling pause (a thread pool may spin briefly
        after its last task)."""
        if cand is None or cand.dead is not None:
            return []
        time.sleep(IDLE_SETTLE_S)
        before, t0 = cand.cpu_seconds(), time.monotonic()
        time.sleep(IDLE_WINDOW_S)
        cpu, window = cand.cpu_seconds() - before, time.monotonic() - t0
        self.info["idle_cpu"] = {"cpu_s": round(cpu, 4), "window_s": round(window, 3)}
        decided = busy_while_idle(max(0.0, cpu), window, self.idle_opts, self.seed)
        return [found(self.make, busy_while_idle, decided)] if decided is not None else []

    def _start_server(self) -> Any:
        """The worker server (a zygote of sandboxes) for this candidate's device, and what it runs."""
        self._phase("setup")  # the worker server and the reference
        t = time.perf_counter()
        zygote = self.pool.zygote(self.options.device, self.profile.name,
                                  gpu=self.slot.gpu if self.slot is not None else None)
        self.timings["startup_s"] = time.perf_counter() - t
        info = zygote.info
        self.info.update(torch=info.get("torch"), python=info.get("python"))
        # what walls the candidate ran in (docs/dynamic.md, "Security"); absent: --sandbox off
        self.info["sandbox"] = info.get("sandbox") or {"kind": "none"}
        return zygote

    def _setups(self) -> list[dict[str, Any]]:
        # the harness setup is built as the harness builds it (its profile's fixed seed, public
        # anyway); the redrawn one under a seed derived from the secret
        eval_mode = self.profile.eval_mode
        return [{"name": "harness", "seed": self.profile.construction_seed, "perturb": False, "eval": eval_mode},
                {"name": "redrawn", "seed": derive(self.seed, "construct:redrawn"), "perturb": True,
                 "eval": eval_mode}]

    def _load_reference(self, zygote: Any, device: str, timeout: float, setups: list[dict[str, Any]]
                        ) -> tuple[Session, dict[str, Any], dict[str, Any]]:
        """The reference worker, loaded (imports it, builds both setups, times one call): the
        session, its load request (a fresh timing pair sends it again) and its reply."""
        sub = self.sub
        t = time.perf_counter()
        ref = self._spawn(zygote, "reference", sub.reference_path or "<reference>", device, timeout)
        # get_init_inputs() and the warm-up draw under the harness's construction seed (KernelBench:
        # set_seed(42) before get_init_inputs()): the init inputs reach the candidate
        ref_load_msg = {"cmd": "load", "code": sub.reference, "seed": self.profile.construction_seed, "setups": setups}
        r_load = self._ask(ref, ref_load_msg)
        if not r_load.get("ok"):
            # nothing can be compared: the candidate is unproven, not clean
            err = r_load.get("error") or {}
            raise DynamicFailure(f"the reference does not run: {str(err.get('message', '?'))[-400:]}")
        self.timings["reference_load_s"] = time.perf_counter() - t
        self._r_load = {k: r_load.get(k) for k in ("input_shapes", "input_dtypes", "dims")}
        return ref, ref_load_msg, r_load

    def _start_candidate(self, zygote: Any, device: str, timeout: float, setups: list[dict[str, Any]],
                         r_load: dict[str, Any], ref_load_msg: dict[str, Any]) -> Batches:
        """The candidate's worker, its load sent and not waited for (its compilation overlaps the
        reference's probes); the batches of probes it will answer start from it."""
        sub = self.sub
        cand_setups = []
        for s in setups:
            cand_setups.append(dict(s, name=self.alias.token(s["name"]), init_inputs=r_load["init_inputs"],
                                    state=r_load["states"].get(s["name"], {})))
        # compiling an extension takes 35-45 s here and about a minute on a GPU host, and more on a
        # busy machine: the clock stops while the worker reports a build running (up to
        # compile_timeout per build), and restarts for the probes after the load
        compile_allowance = float(self.opts.get("compile_timeout", 900.0))
        self._phase("build")  # the candidate's import, and its extension builds
        # the worker finds what the farm built (or failed to build) only once the farm is done
        self._await_prebuild()
        cand = self._spawn(zygote, "candidate", sub.file or sub.path, device, timeout)
        cand.compile_allowance = compile_allowance
        load_msg = {"cmd": "load", "code": sub.code, "setups": cand_setups, "profile": self.profile.to_dict()}
        t_cand = time.perf_counter()
        cand.send(load_msg)
        # what a fresh pair of workers for the paired timing loads again (_fresh_pair)
        self._again = {"zygote": zygote, "timeout": timeout, "reference": ref_load_msg, "candidate": load_msg,
                       "compile_allowance": compile_allowance}
        return Batches(cand=cand, t_load=t_cand, zygote=zygote, device=device, timeout=timeout,
                       compile_allowance=compile_allowance, load_msg=load_msg)

    def _plan_probes(self, ref: Session, r_load: dict[str, Any], device: str, mem_budget: float
                     ) -> tuple[Plan, dict[str, dict[str, Any]], dict[str, Any], float]:
        """The plan, in two rounds: the probes that always run and the smaller shape first, whose
        measured costs then price the rest (a matmul's cost scales with the cube of its size, a
        ReLU's linearly).  Returns the plan, the reference's first-round probes, its reply and the
        time budget."""
        from .plan import probe_bytes

        has_params = any(getattr(v, "size", 0) for v in r_load["states"].get("harness", {}).values())
        steer = steering_from(self.report.findings, self.registry)
        budget = float(self.opts.get("budget_s", 2.0))
        perf_sets = 0
        if self._perf_wanted():
            from .perf_run import TimingSets

            self.timing_sets = TimingSets.plan(device, probe_bytes(r_load), mem_budget,
                                               int(self.opts.get("perf_input_sets") or 0) or None)
            perf_sets = self.timing_sets.extra
        from .environments import mode_free

        kw = dict(has_params=has_params, perf_sets=perf_sets, census=self.target.custom,
                  memory_budget_gb=mem_budget, device=device, modes=mode_free(self.sub.reference or ""))
        first = make_plan(r_load, self.seed, steer, budget, **kw)
        round1 = [p for p in first.probes if p["id"] in FIRST_ROUND or p["id"].startswith("perf_")]
        t = time.perf_counter()
        r_probe = self._ask(ref, {"cmd": "probe", "probes": round1})
        if not r_probe.get("ok"):
            err = r_probe.get("error") or {}
            raise DynamicFailure(f"the reference fails while building probes: {str(err.get('message', '?'))[-400:]}")
        refs = {p["id"]: p for p in r_probe["probes"]}
        plan = make_plan(r_load, self.seed, steer, budget, measured=_measured(refs, r_load), **kw)
        self.timings["reference_probes_s"] = time.perf_counter() - t
        return plan, refs, r_probe, budget

    def _receive_load(self, cand: Session, t_cand: float, timeout: float) -> dict[str, Any]:
        """The candidate's load reply, type-checked, names restored; its builds into ``info``."""
        try:
            c_load = cand.recv()
        except WorkerFailure as exc:
            c_load = {"ok": True, "failed": "import", "crash": exc.describe()}
        if not isinstance(c_load, dict):
            c_load = {"ok": True, "failed": "import", "error": {"message": "a load reply that is not an object"}}
        c_load = _sane_load(self.alias.restore(c_load))
        self.timings["candidate_load_s"] = time.perf_counter() - t_cand
        cand.restart_clock(timeout)
        self.timings["compile_s"] = float(c_load.get("compile_s") or 0.0)
        # a build's error is in the load failure's message; the list keeps its type only
        builds = [{k: v for k, v in b.items() if k != "error"} if isinstance(b, dict) else b
                  for b in c_load.get("builds", []) or []]
        # builds the worker compiled itself, holding its device's gate (the farm's misses: a build
        # whose arguments depend on the device, a farm that could not run)
        self.info["compile"] = {"seconds": round(self.timings["compile_s"], 3), "builds": builds,
                                "compiled": sum(1 for b in builds if isinstance(b, dict) and b.get("compiled"))}
        return c_load

    def _judge_probes(self, judge: Judge, plan: Plan, refs: dict[str, dict[str, Any]], batches: Batches, c_load: dict[str, Any],
                      r_load: dict[str, Any], r_probe: dict[str, Any], device: str, budget: float) -> tuple[list[Finding], Any]:
        """The judge's findings on every probe and check, and whether the candidate's own code ran;
        the run's record in ``info``."""
        sub, target = self.sub, self.target
        cands, crashes, integrity = batches.cands, batches.crashes, batches.integrity
        findings: list[Finding] = []
        records: dict[str, ProbeRecord] = {}
        for p in plan.probes:
            rec = judge.record(p, refs.get(p["id"]), cands.get(p["id"]), crashes.get(p["id"]))
            for role, src in (("reference", refs), ("candidate", cands)):
                wall = (src.get(p["id"]) or {}).get("wall")
                if wall is not None:
                    rec.cost[role] = float(wall)
            records[p["id"]] = rec
        j = judge.judge(records, refs, cands, integrity, c_load, r_load.get("changes", []) + r_probe.get("changes", []))
        findings.extend(j.findings)
        if target.custom or c_load.get("builds"):
            # did the candidate's own code run at all (HS412, HS413); reconcile() settles static
            # suspicions with it in _finish
            # extensions built on first use are counted too (their functions are wrapped the same way)
            later = [str(b.get("name")) for b in self.info.get("compile", {}).get("later_builds", [])
                     if isinstance(b, dict) and not b.get("failed") and b.get("name")]
            counted_load = dict(c_load, extensions=list(c_load.get("extensions") or []) + later) if later else c_load
            facts = confirm.custom_code_facts(self.report.program, target.needs, device, counted_load, cands, integrity,
                                              {pid: r.spec["family"] for pid, r in records.items()},
                                              confirm.own_kernel_names(sub.code, self.report.program))
            self.info["custom_code"] = facts
            findings.extend(confirm.custom_code_findings(self.make, facts, self.seed))
        self.info.update(
            ran=True,
            probes=[r.row() for r in records.values()],
            integrity=j.integrity,
            global_changes=j.global_changes,
            skipped=plan.skipped,
            estimate_s=round(plan.estimate_s, 3),
            budget_s=budget,
            reference={"t32": r_load.get("t32"), "t64": r_load.get("t64"), "dims": r_load.get("dims"),
                       "input_shapes": r_load.get("input_shapes"), "input_dtypes": r_load.get("input_dtypes")},
            tolerance={"k32": self.tol.k32, "floor_ulps": self.tol.floor_ulps, "half_ratio": self.tol.half_ratio,
                       "half_cap": self.tol.half_cap},
        )
        return findings, j

    def _timing(self, zygote: Any, ref: Session, cand: Session | None, j: Any, refs: dict[str, dict[str, Any]],
                plan: Plan, device: str, findings: list[Finding]) -> list[Finding]:
        """The performance stage's findings, when ``--perf`` asks for it and the candidate is not
        already rejected under ``--perf quick``."""
        rejected = self._rejected_before_timing(findings) \
            if self._perf_wanted() and str(self.opts.get("perf_mode") or "target") == "quick" else []
        if rejected:
            # --perf quick (an RL gate): a candidate the findings so far already reject gets reward
            # zero whatever it measures, and a rejected record counts as 1.0x in the verified
            # table; its timing (the exclusive device, torch.compile of the reference: 10-80 s of
            # a GPU host shared by a batch) would decide nothing
            why = (f"already rejected ({', '.join(rejected[:5])}): --perf quick does not time a candidate whose "
                   "verdict timing cannot change (--perf target times it)")
            run_base, _ = self._baselines(device)
            self.info["performance_skipped"] = why
            # the baselines the run times: the verified table credits this rejected record 1.0x
            # against each of them, as it would had it been timed (output/verified.py)
            self.info["_performance"] = {"measured": False, "reason": why, "baselines_wanted": [
                k for k, on in (("eager_fp32", True), ("eager_tf32", run_base["tf32"]), ("compile", run_base["compile"]))
                if on]}
            return []
        if not self._perf_wanted():
            return []
        if j.correctness_passed:
            self._phase("timing")
        if j.correctness_passed and cand is not None and cand.dead is None:
            return self._exclusive(zygote, lambda: self._perf(ref, cand, j, refs, plan, device))
        return self._perf(ref, cand, j, refs, plan, device)

    def _check_infrastructure(self, ref: CheckedSession, zygote: Any) -> None:
        if not ref.sync():
            why = ref.dead or "no answer to a ping"
            raise DynamicFailure(f"the reference worker is gone: {why}")
        if not zygote.alive():
            raise DynamicFailure("the worker server died during the run")

    # ------------------------------------------------------------------------------- pieces

    def _memory_budget_gb(self) -> float:
        """What the parent may hold of reference and candidate outputs (default: a quarter of RAM)."""
        value = self.opts.get("memory_budget_gb")
        # candidates in flight together (schedule.py) split the default budget between them
        share = self.slot.share if self.slot is not None else 1
        return float(value) if value else total_memory() * 0.25 / 2**30 / share

    def _holding_budget_gb(self, r_load: dict[str, Any]) -> tuple[float, str]:
        """What the parent may hold of this task's probes, and where (for the reason of a skip).
        A probe whose reference frame (inputs and output) is at least ``spill.SPILL_BYTES`` is
        received into a file (spill.py), and compared a chunk at a time: its budget is the spill
        folder's free space (half of it, split between the candidates in flight; option
        ``spill_budget_gb``), not the parent's memory."""
        from . import spill

        numel = int(r_load.get("input_numel") or 0)
        out = int(r_load.get("output_numel") or numel)
        if 4 * (numel + out) < spill.SPILL_BYTES:
            budget = self._memory_budget_gb()
            return budget, f"memory_budget_gb = {budget:g}"
        share = self.slot.share if self.slot is not None else 1
        value = self.opts.get("spill_budget_gb")
        budget = float(value) if value else spill.room() * 0.5 / 2**30 / share
        return budget, f"the spill folder's budget ({budget:.1f} GiB free for this candidate in {spill.spill_dir()})"


    def _judge(self) -> Judge:
        return Judge(self.make, self.tol, self.seed, bool(self.sub.self_reference), self.target.custom,
                     self.fallback_opts)

    def _spawn(self, zygote: Any, role: str, path: str, device: str, timeout: float) -> Session:
        from .environments import enabled as differential_enabled

        threads = self.opts.get("threads") or max(1, (os.cpu_count() or 2) // 2)
        # perf: the worker binds its clocks and takes the memory baseline before the untrusted import
        s = zygote.spawn({"role": role, "path": path, "device": device, "threads": int(threads),
                          "cache_dir": self.opts.get("cache_dir"), "perf": self._perf_wanted(),
                          "world": differential_enabled(),
                          **({"known_build_failures": self.build_failures}
                             if role == "candidate" and self.build_failures else {})},
                         timeout=timeout, mem_bytes=self.mem_bytes,
                         source=self.sub.reference if role == "reference" else self.sub.code)
        if role == "candidate":
            if self._wall_end is None:
                self._wall_end = time.monotonic() + self._wall_seconds()
            s.bound(self._wall_end - time.monotonic())
        # every request carries a nonce and a sequence number its reply must echo (protocol.py)
        checked = CheckedSession(s, role)
        self.sessions.append(checked)
        return checked  # type: ignore[return-value]

    def _wall_seconds(self) -> float:
        """The candidate's whole wall time (``wall_s`` in the dynamic options): by default its
        builds' allowance and twenty time limits (the load, the probe batches, the respawns and
        the timed rounds each restart the per-request clock, which alone bounded nothing)."""
        value = self.opts.get("wall_s")
        if value:
            return float(value)
        return float(self.opts.get("compile_timeout", 900.0)) + 20 * float(self.options.timeout)

    def _ask(self, session: Session, msg: dict[str, Any]) -> dict[str, Any]:
        # each request of a phase gets the whole time limit: a heavy reference spends it per round
        session.restart_clock(float(self.options.timeout))
        try:
            return session.request(msg)
        except WorkerFailure as exc:
            return {"ok": False, "error": {"message": str(exc), "type": exc.kind, "log_tail": exc.log_tail[-800:]}}


    def _load_failure(self, c_load: dict[str, Any]) -> list[Finding]:
        if "crash" in c_load:
            crash = c_load["crash"]
            return [found(self.make, candidate_does_not_run, candidate_does_not_run(
                self.seed, "import", crash["message"], worker=crash["kind"], log_tail=crash.get("log_tail", "")[-800:]))]
        err = c_load.get("error") or {}
        if err.get("needs") in ("cuda", "triton"):
            # the candidate's own exception: a stage that could not check it is error, never the
            # static verdict (a plausible "no CUDA driver" raised on purpose would otherwise pass)
            return self._cannot_run_here(f"the candidate says it needs {'CUDA' if err['needs'] == 'cuda' else 'Triton'}"
                                         ": " + str(err.get("message", ""))[-200:])
        phase = c_load.get("failed", "import")
        what = {"import": "cannot be imported", "init": "cannot be constructed"}.get(phase, "fails")
        failed = [b for b in c_load.get("builds") or [] if isinstance(b, dict) and b.get("failed") is True]
        if err.get("compile_error") or failed:
            what = "does not compile"
            if failed and failed[0].get("error"):
                what += f" (first error: {str(failed[0]['error'])[:300]})"
        findings = [found(self.make, candidate_does_not_run, candidate_does_not_run(
            self.seed, phase, f"{what}: {err.get('message', '?')[-300:]}", exception=err.get("message", "")[-800:],
            exception_line=err.get("line")))]
        # harness tampering at import still counts, whatever happened after
        judge = self._judge()
        from .judge import Judgement

        j = Judgement()
        judge._changes(j, c_load, {}, [], [])
        self.info.update(ran=True, probes=[], reason=f"ModelNew {what}")
        return findings + j.findings


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in findings:
        key = (f.rule, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def run_dynamic_stage(sub: Submission, report: Report, options: DynamicOptions, config: Config,
                      pool: WorkerPool | None = None, on_phase: Callable[[str], None] | None = None,
                      slot: Any = None) -> Report:
    """Run the candidate on hidden inputs in isolated workers; return ``report`` with dynamic findings,
    ``report.dynamic`` filled and the verdict recomputed.  ``on_phase(name)`` is told each phase as
    it starts (setup, build, probes, timing)."""
    registry = load_registry()
    run = DynamicRun(sub, report, options, config, pool or default_pool(options.sandbox), registry,
                     on_phase, slot)
    return run.execute()
