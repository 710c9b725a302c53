"""Parent side: the performance stage's turn in a dynamic run (PROTOCOL.md, "perf").

After the candidate passed correctness the parent asks, one worker at a time:

1. the reference worker for ``perf`` (eager baselines, fingerprints, work, memory, ceilings);
2. the candidate worker for ``perf``;
3. the candidate worker for ``spin`` (back-to-back calls timed by the parent's own clock, minus a
   ``ping`` round trip: HS609);
4. the reference worker for ``perf_compile`` (the ``torch.compile`` baseline) under a time
   allowance of its own, unless an earlier candidate of the same reference in this process already
   measured it, in which case that entry is reused and says so.

Then ``hackscan.perf.parent_side.evaluate`` turns the raw dicts into ``Report.performance`` and
HS6xx findings.  No torch here.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hackscan.perf.options import normalise_baseline

from .session import Session, WorkerFailure

# distinct fresh input sets the timing rotates through (the two fresh draws of the correctness
# probes count): with fewer than 3, a result cache keyed by the input's address can go unseen on
# scale-invariant operations (normalisations), whose mixed inputs are scaled copies of each other
TIMING_SETS = {"cuda": 4, "cpu": 3}
MIN_TRUSTED_SETS = 3
ALWAYS_DRAWN = 2  # "original" and "original_b"
PERF_BUDGET_S = {"cuda": 4.0, "cpu": 1.0}
SPIN_BUDGET_S = {"cuda": 1.0, "cpu": 0.2}
COMPILE_TIMEOUT_S = 300.0


# ----------------------------------------------------------------------------- which baselines
def wanted_baselines(requested: Sequence[str] | None, device: str) -> tuple[dict[str, bool], dict[str, str]]:
    """Which optional baselines run (``tf32``, ``compile``), and why the others do not.

    Default: every baseline on a GPU; on the CPU strict fp32 only (TF32 does not exist there, and
    torch.compile costs tens of seconds per reference on a small machine: ask with
    ``--baselines eager,compile``).  Strict fp32 eager always runs: the timed outputs of the
    candidate are checked against its outputs.
    """
    why: dict[str, str] = {}
    if requested is None:
        run = {"tf32": device == "cuda", "compile": device == "cuda"}
        if device != "cuda":
            why["compile"] = ("off on the CPU by default (torch.compile takes tens of seconds per reference "
                              "there); ask for it with --baselines eager,compile")
    else:
        asked = {normalise_baseline(b) for b in requested}
        run = {"tf32": "tf32" in asked and device == "cuda", "compile": "compile" in asked}
        if "compile" not in asked:
            why["compile"] = "not requested (--baselines " + ",".join(sorted(asked | {"eager"})) + ")"
    if device != "cuda":
        why["tf32"] = "TF32 exists only on a GPU"
    elif not run["tf32"]:
        why["tf32"] = "not requested (--baselines)"
    return run, why


# ----------------------------------------------------------------------------- timing sets
@dataclass(frozen=True)
class TimingSets:
    target: int
    extra: int  # fresh draws beyond the two of the correctness probes
    note: str | None = None

    @classmethod
    def plan(cls, device: str, per_probe_bytes: int, memory_budget_gb: float, requested: int | None = None) -> TimingSets:
        """As many sets as the device's default asks for, fewer where the parent could not hold the
        extra probes' outputs (each fresh draw is also a correctness probe the parent compares)."""
        target = int(requested) if requested else TIMING_SETS.get(device, 3)
        target = max(1, target)
        want = max(0, target - ALWAYS_DRAWN)
        fit = max(0, int(memory_budget_gb * 2**30 // max(per_probe_bytes, 1)) - 3)
        extra = min(want, fit)
        note = None
        if extra < want:
            note = (f"{ALWAYS_DRAWN + extra} of {target} timing sets drawn: each is a task-shaped probe of about "
                    f"{per_probe_bytes / 2**30:.2f} GiB for the parent, over memory_budget_gb = {memory_budget_gb:g}")
        return cls(target, extra, note)


def timing_sets_report(ts: TimingSets, passed: int, performance: Mapping[str, Any]) -> dict[str, Any]:
    """What ``report.performance["input_sets"]`` says: how many distinct fresh sets were wanted,
    drawn, passed correctness, and actually rotated in the timed calls, and why fewer."""
    method = performance.get("method") if isinstance(performance.get("method"), Mapping) else {}
    timed = method.get("input_sets") if isinstance(method.get("input_sets"), int) else None
    out: dict[str, Any] = {"target": ts.target, "drawn": ALWAYS_DRAWN + ts.extra, "passed": passed, "timed": timed}
    notes = [ts.note] if ts.note else []
    given = method.get("input_sets_given") if isinstance(method.get("input_sets_given"), int) else None
    if given is not None and given < passed:
        # the worker that timed holds the inputs of its own probes only: it replaced one that died
        notes.append(f"{given} of the {passed} passed sets were held by the worker that timed (a replacement "
                     "for one that crashed or timed out)")
    elif timed is not None and timed < passed:
        per = method.get("input_set_bytes")
        cap = method.get("input_pool_cap_bytes")
        if isinstance(per, (int, float)) and isinstance(cap, (int, float)):
            notes.append(f"the timing pool holds {timed} of {passed} sets ({per / 2**20:.0f} MiB each, two copies "
                         f"per set, pool cap {cap / 2**20:.0f} MiB)")
        else:
            notes.append(f"the timing pool holds {timed} of {passed} sets")
    if passed < ALWAYS_DRAWN + ts.extra:
        notes.append(f"{ALWAYS_DRAWN + ts.extra - passed} drawn set(s) did not pass correctness")
    used = timed if timed is not None else passed
    if used < MIN_TRUSTED_SETS:
        notes.append(f"only {used} distinct set(s) rotate through the timed calls: a result cache keyed by the "
                     "input's address may go unseen on scale-invariant operations")
    if notes:
        out["note"] = "; ".join(notes)
    return out


# ----------------------------------------------------------------------------- compile baseline cache
class CompileCache:
    """torch.compile baseline entries by reference, so that every candidate of one reference in
    this process (a folder, a dataset, a training loop) pays the compilation once."""

    def __init__(self, size: int = 64):
        self.size = size
        self._data: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(reference_code: str, device_info: Mapping[str, Any], load: Mapping[str, Any], options: Mapping[str, Any]) -> str:
        h = hashlib.sha256()
        h.update(reference_code.encode("utf-8", "surrogatepass"))
        shape = {k: load.get(k) for k in ("input_shapes", "input_dtypes", "dims")}
        dev = {k: device_info.get(k) for k in ("type", "name", "index", "torch", "cuda")}
        h.update(json.dumps([shape, dev, {k: options.get(k) for k in ("compile_mode", "tf32")}],
                            sort_keys=True, default=str).encode())
        return h.hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._data.move_to_end(key)
            return json.loads(json.dumps(entry)) if entry is not None else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self._data[key] = json.loads(json.dumps(entry, default=str))
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


COMPILE_CACHE = CompileCache()


def measure_compile(ref: Session, sets: Mapping[str, list[str]], options: Mapping[str, Any], timeout: float,
                    tf32: bool, warm_only: bool = False) -> dict[str, Any]:
    """Ask the reference worker for the torch.compile baseline; a ``skipped`` entry says why not.
    ``warm_only``: compile only (the worker keeps the compiled model for the next request, which
    then only times it); the entry has ``warm`` and ``compile_s``, no series."""
    ref.restart_clock(timeout)
    t0 = time.perf_counter()
    try:
        reply = ref.request({"cmd": "perf_compile", "sets": dict(sets), "options": dict(options),
                             **({"warm_only": True} if warm_only else {})})
    except WorkerFailure as exc:
        if exc.kind == "timeout":
            return {"tf32": tf32, "skipped": f"torch.compile did not finish within {timeout:.0f} s "
                                             "(compilation and timing; raise perf_compile_timeout)"}
        return {"tf32": tf32, "skipped": f"the reference worker {exc.kind} while compiling: {str(exc)[:200]}"}
    if not reply.get("ok"):
        err = reply.get("error") or {}
        return {"tf32": tf32, "skipped": f"torch.compile failed: {str(err.get('message', '?'))[-300:]}"}
    result = reply.get("compile")
    if not isinstance(result, dict):
        return {"tf32": tf32, "skipped": str(reply.get("reason") or "no result")[:300]}
    if result.get("error"):
        return {"tf32": tf32, "skipped": f"torch.compile failed: {str(result['error'])[:300]}"}
    changed = (result.get("timers") or {}).get("changed") if isinstance(result.get("timers"), dict) else None
    if changed:
        return {"tf32": tf32, "skipped": "a timer was replaced while the compiled reference ran: not trusted"}
    entry = result.get("baseline")
    if not isinstance(entry, dict):
        return {"tf32": tf32, "skipped": "malformed torch.compile measurement"}
    entry = dict(entry)
    entry["request_s"] = round(time.perf_counter() - t0, 3)
    return entry


# ----------------------------------------------------------------------------- parent clock (HS609)
def outside_clock(cand: Session, candidate_raw: Any, budget_s: float, timeout: float) -> dict[str, Any] | None:
    """Time ``spin`` (back-to-back calls) with this process's clock, minus a ping's round trip."""
    from hackscan.perf.outside import spin_calls

    calls = spin_calls(candidate_raw, budget_s)
    if calls is None:
        return None
    cand.restart_clock(timeout)
    try:
        rtts = []
        for _ in range(3):
            t0 = time.perf_counter()
            cand.request({"cmd": "ping"})
            rtts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        reply = cand.request({"cmd": "spin", "calls": calls})
        parent_s = time.perf_counter() - t0
    except WorkerFailure as exc:
        return {"error": f"the candidate worker {exc.kind} during the parent-clock check: {str(exc)[:200]}"}
    spin = reply.get("spin") if reply.get("ok") else None
    if not isinstance(spin, dict):
        err = reply.get("error") or {}
        return {"error": str(err.get("message") or reply.get("reason") or "no answer")[:300]}
    return {"calls": calls, "parent_s": parent_s, "rtt_s": min(rtts), "child_s": spin.get("child_s")}


# ----------------------------------------------------------------------------- paired blocks
# a block lasts about this long (short, so both sides of a pair see the same load; long enough that
# a request's round trip is small against it and a CPU block's minimum is a clean call)
PAIR_BLOCK_S = {"cuda": 0.02, "cpu": 0.03}
PAIR_MIN_CALLS = {"cuda": 10, "cpu": 5}
# rounds (pairs) before the interval may be declared narrow, and the most seconds they may take
PAIR_MIN_ROUNDS = 16  # the drift term needs four groups of four (stats.PAIR_GROUPS, MIN_GROUP)
PAIR_MAX_ROUNDS = 400
PAIR_CAP_S = {"cuda": 10.0, "cpu": 20.0}


def _per_call_ms(series: Any) -> float | None:
    """What one timed call of a main series cost, its cache flush included when the series says how
    long it ran (a targeted one does), else the median call."""
    if not isinstance(series, dict):
        return None
    walls = sorted(v for v in series.get("wall_ms", []) if isinstance(v, (int, float)) and v > 0)
    conv = series.get("convergence") if isinstance(series.get("convergence"), dict) else {}
    calls, elapsed = conv.get("calls"), conv.get("elapsed_s")
    if isinstance(calls, int) and calls > 0 and isinstance(elapsed, (int, float)) and elapsed > 0:
        return max(elapsed * 1e3 / calls, walls[len(walls) // 2] if walls else 0.0)
    return walls[len(walls) // 2] if walls else None


def pair_names(reference_raw: Any) -> list[str]:
    """The eager baselines the reference worker timed without error: the ones paired blocks can time
    (torch.compile is measured in a request of its own, so it keeps its unpaired figure)."""
    base = reference_raw.get("baselines") if isinstance(reference_raw, dict) else None
    if not isinstance(base, dict):
        return []
    out = []
    for name in ("eager_fp32", "eager_tf32"):
        entry = base.get(name)
        main = ((entry or {}).get("series") or {}).get("main") if isinstance(entry, dict) else None
        if isinstance(main, dict) and not main.get("error") and main.get("wall_ms"):
            out.append(name)
    return out


def paired_rounds(ref: Session, cand: Session, candidate_raw: Any, reference_raw: Any, device: str,
                  target_rel: float, cap_s: float | None = None, timeout: float = 60.0,
                  relayout: bool = True, pin: bool = True) -> dict[str, Any] | None:
    """Time candidate and baselines in short alternating blocks until the paired speedup's interval
    (stats.paired_speedup) of the headline baseline is within ``target_rel`` or ``cap_s`` is spent.

    Round r times [candidate, baseline 1, baseline 2, ...] when r is even and the mirror order when
    it is odd, so a load that rises or falls steadily through a round favours each side equally
    often and cancels in the median over pairs.  Each block is one request to one worker; the
    parent never times anything itself (the workers' clocks were bound before the untrusted
    import).  Returns the raw rounds for ``parent_side.evaluate`` (which recomputes every statistic
    from the calls), or None when nothing was timed."""
    from hackscan.perf.stats import block_statistic, paired_speedup

    names = pair_names(reference_raw)
    c_main = ((candidate_raw or {}).get("series") or {}).get("main") if isinstance(candidate_raw, dict) else None
    if not names or not isinstance(c_main, dict) or c_main.get("error"):
        return None
    headline = reference_raw.get("headline") if reference_raw.get("headline") in names else names[0]
    per_call = [_per_call_ms(c_main)] + [_per_call_ms(reference_raw["baselines"][n]["series"]["main"]) for n in names]
    slowest = max((v for v in per_call if v), default=1.0)
    calls = max(PAIR_MIN_CALLS.get(device, 5), int(PAIR_BLOCK_S.get(device, 0.03) * 1e3 / slowest))
    calls = min(calls, 1000)
    cap = PAIR_CAP_S.get(device, 20.0) if cap_s is None else cap_s
    stat = "median" if device == "cuda" else "min"
    rounds: list[dict[str, Any]] = []
    stopped, error = "cap", None
    check_at = PAIR_MIN_ROUNDS
    t0 = time.perf_counter()
    for sess in (ref, cand):
        sess.restart_clock(max(timeout, cap + 60.0))
    for r in range(PAIR_MAX_ROUNDS):
        order = ["candidate", *names] if r % 2 == 0 else [*reversed(names), "candidate"]
        blocks: dict[str, Any] = {}
        for side in order:
            sess = cand if side == "candidate" else ref
            msg: dict[str, Any] = {"cmd": "perf_block", "calls": calls, "round": r, "relayout": relayout}
            if device == "cpu" and pin:
                # both blocks of a round on one core, the rounds rotating over the cores (time_block)
                msg["cpu"] = r
            if side != "candidate":
                msg["baseline"] = side
            t_req = time.perf_counter()
            try:
                reply = sess.request(msg)
            except WorkerFailure as exc:
                error = f"the {'candidate' if side == 'candidate' else 'reference'} worker {exc.kind}: {str(exc)[:200]}"
                break
            block = reply.get("block") if reply.get("ok") else None
            if not isinstance(block, dict) or block.get("error"):
                why = (block or {}).get("error") if isinstance(block, dict) else reply.get("reason")
                error = f"{side} block failed: {str(why or (reply.get('error') or {}).get('message') or '?')[:200]}"
                break
            blocks[side] = dict(block, request_s=round(time.perf_counter() - t_req, 4))
        if error is not None:
            break
        rounds.append({"order": order, "blocks": blocks})
        if r == 0:
            # sized again from what the first round's blocks took: a call's cost here includes the
            # cache flush before it (32 MiB written on a CPU: often more than the call itself)
            took = max(b["request_s"] for b in blocks.values())
            per = took / max(calls, 1)
            calls = min(1000, max(PAIR_MIN_CALLS.get(device, 5), int(PAIR_BLOCK_S.get(device, 0.03) / max(per, 1e-6))))
        elapsed = time.perf_counter() - t0
        if len(rounds) >= check_at:
            # looked at every tenth of the rounds so far, not after each: stopping at the first
            # round where the interval happens to look narrow would favour lucky stretches
            check_at = len(rounds) + max(1, len(rounds) // 10)
            key = "event_ms" if device == "cuda" else "wall_ms"
            pairs = [(block_statistic(rd["blocks"][headline].get(key) or [], stat),
                      block_statistic(rd["blocks"]["candidate"].get(key) or [], stat)) for rd in rounds]
            sp = paired_speedup([(b, c) for b, c in pairs if b is not None and c is not None])
            if sp.get("n", 0) >= PAIR_MIN_ROUNDS and sp["spread"] <= target_rel:
                stopped = "narrow"
                break
        if elapsed >= cap:
            break
    else:
        stopped = "max_rounds"
    if not rounds:
        return {"error": error or "no round was timed"}
    out: dict[str, Any] = {"rounds": rounds, "calls_per_block": calls, "relayout": relayout,
                           "pinned": device == "cpu" and pin, "statistic": stat, "headline": headline,
                           "target": target_rel, "cap_s": cap, "stopped": "error" if error else stopped,
                           "elapsed_s": round(time.perf_counter() - t0, 3)}
    if error:
        out["error"] = error
    return out


# ----------------------------------------------------------------------------- several pairs of processes
# Each pair of worker processes carries a bias of its own for its whole life (stats.between_processes
# says why), so the paired rounds are spread over several fresh pairs: at least PROCESS_MIN, more
# while the combined interval is wider than the target, at most PROCESS_MAX or PROCESS_CAP_S in all.
# A pair times for PROCESS_ROUNDS_S at most (or until its own rounds are narrow).  A fresh pair costs
# its two loads (a cached extension is imported, never rebuilt) and two spare interpreters starting
# behind it, waited for before its rounds; on the 2-core host about 4 s a pair.  The interval is
# looked at only from PROCESS_MIN pairs on: with fewer, a sample variance that happens to come out
# low would stop the loop on a stated interval narrower than the pairs really scatter.
PROCESS_MIN = 4
PROCESS_MAX = {"cuda": 5, "cpu": 5}
PROCESS_ROUNDS_S = {"cuda": 1.5, "cpu": 2.0}
PROCESS_CAP_S = {"cuda": 40.0, "cpu": 40.0}


def headline_row(raw: Any, device: str) -> dict[str, Any]:
    """The headline baseline's paired speedup over one pair's rounds, for the stopping rule only
    (parent_side recomputes every reported figure from the calls, with the escaped-work correction
    that a GPU candidate whose work escaped the events needs)."""
    from hackscan.perf.stats import block_statistic, paired_speedup

    if not isinstance(raw, dict) or not isinstance(raw.get("rounds"), list):
        return {"n": 0}
    key, stat, head = ("event_ms" if device == "cuda" else "wall_ms"), ("median" if device == "cuda" else "min"), raw.get("headline")
    pairs = []
    for rd in raw["rounds"]:
        blocks = rd.get("blocks") or {}
        if head not in blocks or "candidate" not in blocks:
            continue
        b = block_statistic(blocks[head].get(key) or [], stat)
        c = block_statistic(blocks["candidate"].get(key) or [], stat)
        if b is not None and c is not None:
            pairs.append((b, c))
    return paired_speedup(pairs)


def process_pairs(first: tuple[Session, Session], spawn: Any, candidate_raw: Any, reference_raw: Any, device: str,
                  target_rel: float, *, min_processes: int = PROCESS_MIN, max_processes: int | None = None,
                  rounds_s: float | None = None, cap_s: float | None = None, timeout: float = 60.0,
                  relayout: bool = True, pin: bool = True,
                  unlocked: Any = None) -> dict[str, Any] | None:
    """Paired rounds (``paired_rounds``) in the pair of workers that ran the scan, then in fresh
    pairs from ``spawn(i)`` (returns ``(reference, candidate, close)`` ready for ``perf_block``, or
    a string saying why not), until at least ``min_processes`` pairs timed and the headline's
    combined interval (stats.between_processes) is within ``target_rel``, or ``max_processes``
    pairs or ``cap_s`` seconds are spent.  Returns ``{"processes": [paired_rounds result, ...],
    ...}`` for ``parent_side.evaluate``, or None when the first pair timed nothing.  ``unlocked()``
    (a context manager, when given) is held while a fresh pair is readied and the last one closed:
    the scheduler's exclusive hold on the device is for the rounds only."""
    from contextlib import nullcontext

    from hackscan.perf.stats import between_processes

    most = max(1, int(max_processes if max_processes is not None else PROCESS_MAX.get(device, 6)))
    least = max(1, min(int(min_processes), most))
    per = PROCESS_ROUNDS_S.get(device, 2.5) if rounds_s is None else float(rounds_s)
    cap = PROCESS_CAP_S.get(device, 45.0) if cap_s is None else float(cap_s)
    t0 = time.perf_counter()
    procs: list[dict[str, Any]] = []
    spawn_errors: list[str] = []
    spawn_s: list[float] = []  # what readying each fresh pair took (loads, inputs, spares started behind it)
    stopped = "max_processes"
    ref, cand = first
    close = None
    round_s = 0.0
    while True:
        t_round = time.perf_counter()
        raw = paired_rounds(ref, cand, candidate_raw, reference_raw, device, target_rel, per, timeout,
                            relayout=relayout, pin=pin)
        round_s = time.perf_counter() - t_round
        if close is not None:
            close()
        if raw is None:
            if not procs:
                return None
        else:
            procs.append(raw)
        usable = [r for r in procs if "rounds" in r]
        if not usable:
            stopped = "error"
            break
        if len(procs) >= least:
            comb = between_processes([headline_row(r, device) for r in usable])
            if comb.get("between_processes") and comb["spread"] <= target_rel:
                stopped = "narrow"
                break
        if len(procs) >= most:
            break
        # the cap is a budget: a fresh pair that would end past it (its start, as the last one's,
        # and its rounds, as the last rounds) is not begun.  On a loaded host a start alone takes
        # tens of seconds, and a check only before each start overran the cap several times over
        spent = time.perf_counter() - t0
        if spent >= cap or spent + (spawn_s[-1] if spawn_s else 0.0) + round_s > cap:
            stopped = "cap"
            break
        t_spawn = time.perf_counter()
        with unlocked() if unlocked is not None else nullcontext():
            got = spawn(len(procs))
        spawn_s.append(round(time.perf_counter() - t_spawn, 3))
        if isinstance(got, str):
            # a pair that could not be started: the spread is stated over the pairs that timed
            spawn_errors.append(got[:300])
            stopped = "spawn_failed"
            break
        ref, cand, close = got
    return {"processes": procs, "target": target_rel, "stopped": stopped, "min_processes": least,
            "max_processes": most, "rounds_s": per, "cap_s": cap, "spawn_errors": spawn_errors, "spawn_s": spawn_s,
            "headline": procs[0].get("headline") if procs else None,
            "elapsed_s": round(time.perf_counter() - t0, 3)}


# ----------------------------------------------------------------------------- device ceilings
CEILINGS_FILE = "ceilings-parent.json"
_BW_RANGE = (1e8, 1e14)
_FLOP_RANGE = (1e8, 1e17)


class HostCeilings:
    """The device ceilings (bandwidth, peak FLOP/s) a reference worker measured, kept by the parent
    in the cache folder and handed to later reference workers.  A sandboxed worker's cache folder
    is private and starts empty, so without this every candidate's reference measured the device
    again (15-30 s, most of the performance stage).  Only a measurement taken with untouched timers
    of a reference that is not the candidate's own file is kept, within the plausible ranges."""

    def __init__(self, folder: str | None):
        from pathlib import Path

        from .shared.extcache import default_cache_dir

        self.path = Path(folder or default_cache_dir()) / CEILINGS_FILE
        self._lock = threading.Lock()

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if self._valid(v)} if isinstance(data, dict) else {}

    @staticmethod
    def _valid(entry: Any) -> bool:
        try:
            bw, peak = float(entry["bandwidth_Bps"]), float(entry["peak_flops"])
        except (KeyError, TypeError, ValueError):
            return False
        return _BW_RANGE[0] <= bw <= _BW_RANGE[1] and _FLOP_RANGE[0] <= peak <= _FLOP_RANGE[1]

    def remember(self, reference_raw: Any, trusted: bool) -> None:
        if not trusted or not isinstance(reference_raw, dict):
            return
        ceil = reference_raw.get("ceilings")
        timers = reference_raw.get("timers") if isinstance(reference_raw.get("timers"), dict) else {}
        if not isinstance(ceil, dict) or timers.get("changed") or not str(ceil.get("source", "")).startswith("measured"):
            return
        key = ceil.get("key")
        entry = {k: v for k, v in ceil.items() if k not in ("source", "key")}
        if not isinstance(key, str) or not self._valid(entry):
            return
        import os
        import tempfile

        with self._lock:
            data = self.load()
            data[key] = entry
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".ceilings.", suffix=".json")
                with os.fdopen(fd, "w") as fh:
                    json.dump(data, fh, indent=1, sort_keys=True, default=str)
                os.replace(tmp, self.path)
            except OSError:
                pass  # a read-only cache folder: the next reference measures again
