"""A compact text table of ``Report.performance`` for the text report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .parent_side import LABELS
from .words import TOO_NOISY, interval, spread, too_noisy


def _ms(stats: Any, key: str = "median") -> str:
    """``key`` (the statistic the speedups use), the median when that is another, then the spread:
    median on a GPU, min on a CPU."""
    if isinstance(stats, Mapping):
        val, p10, p90 = stats.get(key), stats.get("p10"), stats.get("p90")
        if isinstance(val, (int, float)):
            spread = f" [p10-p90 {p10:.4g}-{p90:.4g}]" if isinstance(p10, (int, float)) and isinstance(p90, (int, float)) else ""
            med = stats.get("median")
            median = f", median {med:.4g}" if key != "median" and isinstance(med, (int, float)) else ""
            return f"{val:.4g} ms{median}{spread} n={stats.get('n', '?')}"
    if isinstance(stats, (int, float)):
        return f"{stats:.4g} ms"
    return "-"


def _mib(v: Any) -> str:
    return f"{v / (1 << 20):.1f} MiB" if isinstance(v, (int, float)) else "-"


def table(perf: Mapping[str, Any] | None, stats: bool = True) -> str:
    """What a triager reads, at most three lines (``summary``); with ``stats`` the timings per
    baseline with spread, speedups, memory and the bound, one row each."""
    if not perf:
        return ""
    if not perf.get("measured", False):
        return f"  performance: not measured ({perf.get('reason', 'unknown reason')})"
    if not stats:
        return summary(perf)
    return _detail(perf)


def headline(perf: Mapping[str, Any]) -> str | None:
    """The verdict line's speedup, its interval in words when too wide: recomputed from the figures
    (a stored headline from an older run may carry an interval wider than the figure)."""
    head = perf.get("headline_baseline")
    sp = (perf.get("speedup", {}) or {}).get(head) if head else None
    if not isinstance(sp, (int, float)):
        stored = perf.get("headline")
        return stored if isinstance(stored, str) else None
    ci = (perf.get("speedup_ci", {}) or {}).get(head)
    text = f"{sp:.2f}x vs {LABELS.get(head, head)}{interval(sp, ci, perf.get('speedup_confidence', 0.9))}"
    if not perf.get("valid", True):
        text += "; NOT CREDITED: " + "; ".join(perf.get("invalid_reasons", []))
    return text


def summary(perf: Mapping[str, Any]) -> str:
    """Three lines: the headline speedup (its interval in words when too wide to be a figure), the
    candidate's time and memory, and how far to trust the timing, with the flag for the rest."""
    cand = perf.get("candidate", {}) or {}
    cuda = (perf.get("device", {}) or {}).get("type") == "cuda"
    head = perf.get("headline_baseline")
    speedups = perf.get("speedup", {}) or {}
    sp = speedups.get(head) if head else None
    if isinstance(sp, (int, float)):
        rerun = (perf.get("speedup_rerun_ci", {}) or {}).get(head)
        ci = rerun if rerun is not None else (perf.get("speedup_ci", {}) or {}).get(head)
        conf = perf.get("speedup_rerun_confidence") if rerun is not None else perf.get("speedup_confidence")
        first = f"  performance: {sp:.2f}x vs {LABELS.get(head, head)}{interval(sp, ci, conf)}"
        others = [f"{v:.2f}x vs {LABELS.get(n, n)}" for n, v in speedups.items()
                  if n != head and isinstance(v, (int, float))]
        if others:
            first += " (" + ", ".join(others) + ")"
    else:
        first = "  performance: no speedup measured"
    if not perf.get("valid", True):
        first += "  [NOT CREDITED: " + "; ".join(perf.get("invalid_reasons", [])) + "]"
    main_stats = cand.get("event_ms") if cuda else cand.get("wall_ms")
    key = "median" if cuda else "min"
    t = main_stats.get(key) if isinstance(main_stats, Mapping) else main_stats
    second = []
    if isinstance(t, (int, float)):
        second.append(f"candidate {t:.4g} ms ({'median of CUDA events' if cuda else 'minimum of the wall clock'})")
    mem = perf.get("memory", {}) or {}
    if isinstance(mem.get("ratio"), (int, float)):
        second.append(f"memory {mem['ratio']:.2f}x the reference's")
    if (perf.get("outside_clock", {}) or {}).get("contradicts"):
        second.append("the parent's clock CONTRADICTS the reported time")
    lines = [first]
    if second:
        lines.append("    " + "; ".join(second))
    notes = [str(c.get("note")) for c in (perf.get("convergence", {}) or {}).values()
             if isinstance(c, Mapping) and not c.get("converged") and c.get("note")]
    undecided = [str(u.get("rule")) for u in perf.get("undecided", []) or [] if isinstance(u, Mapping)]
    trust = notes[0] if notes else "every timed series reached its interval target"
    if undecided:
        trust += f"; too noisy to decide {', '.join(undecided)} (no finding raised)"
    lines.append(f"    timing: {trust} (--perf-stats: the statistics)")
    return "\n".join(lines)


def _detail(perf: Mapping[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []
    cand = perf.get("candidate", {}) or {}
    cuda = (perf.get("device", {}) or {}).get("type") == "cuda"
    key = "median" if cuda else "min"
    main_stats = cand.get("event_ms") if cuda else cand.get("wall_ms")
    note = ""
    if cand.get("time_ms") != cand.get("claimed_ms") and isinstance(cand.get("time_ms"), (int, float)):
        note = f"honest {cand['time_ms']:.4g} ms (wall)"
    rows.append(("candidate", _ms(main_stats, key), note))
    speedups = perf.get("speedup", {}) or {}
    for name, entry in (perf.get("baselines", {}) or {}).items():
        label = LABELS.get(name, name)
        if not isinstance(entry, Mapping):
            continue
        if entry.get("skipped"):
            rows.append((label, "skipped", str(entry["skipped"])[:160]))
            continue
        sp = speedups.get(name)
        extra = f"speedup {sp:.2f}x" if isinstance(sp, (int, float)) else ""
        ci = (perf.get("speedup_ci", {}) or {}).get(name)
        if extra and ci is not None:
            extra += interval(sp, ci, perf.get("speedup_confidence", 0.9), word=" interval")
        if isinstance(entry.get("compile_s"), (int, float)):
            extra += f" (compile {entry['compile_s']:.1f} s)"
        if entry.get("reused"):
            extra += " (compiled once for this reference: measured with an earlier candidate)"
        rows.append((label, _ms(entry.get("time_ms"), key), extra.strip()))
    width = max(len(r[0]) for r in rows)
    head = "  performance (" + ("median of CUDA events" if cuda else "minimum of the wall clock") + ")"
    width_t = max([48] + [len(r[1]) for r in rows])
    lines = [head + ("" if perf.get("valid", True) else "  [NOT CREDITED: " + "; ".join(perf.get("invalid_reasons", [])) + "]")]
    for label, t, extra in rows:
        lines.append(f"    {label:<{width}}  {t:<{width_t}} {extra}".rstrip())
    lines.extend(_convergence(perf.get("convergence")))
    pair = perf.get("paired")
    if isinstance(pair, Mapping) and pair.get("rounds"):
        procs = pair.get("processes") if isinstance(pair.get("processes"), int) else 1
        lines.append(f"    speedups paired: {pair.get('rounds')} rounds of alternating blocks "
                     f"({pair.get('calls_per_block')} calls each) in {procs} pair(s) of worker processes, median of "
                     "per-round ratios per pair, geometric mean over the pairs; the times above depend on the "
                     "host's load and are not comparable across runs")
        head_row = (pair.get("baselines") or {}).get(perf.get("headline_baseline"))
        if isinstance(head_row, Mapping) and isinstance(head_row.get("process_speedups"), list) and procs > 1:
            each = ", ".join(f"{v:.2f}x" for v in head_row["process_speedups"] if isinstance(v, (int, float)))
            lines.append(f"    per pair of processes: {each} (the interval is taken over these)")
        rerun = (perf.get("speedup_rerun_ci", {}) or {}).get(perf.get("headline_baseline"))
        head_sp = (perf.get("speedup", {}) or {}).get(perf.get("headline_baseline"))
        if rerun is not None and too_noisy(head_sp, rerun):
            lines.append(f"    a re-run's headline speedup: {TOO_NOISY} (its interval is wider than the figure)")
        elif rerun is not None:
            conf = perf.get("speedup_rerun_confidence")
            conf_s = f"{conf:.0%}" if isinstance(conf, (int, float)) else "95%"
            lines.append(f"    a re-run's headline speedup should land within {rerun[0]:.2f}-{rerun[1]:.2f}x ({conf_s})")
    tf32 = perf.get("reference_tf32_speedup")
    if isinstance(tf32, (int, float)):
        lines.append(f"    reference: TF32 is {tf32:.2f}x faster than strict fp32")
    for name, row in (perf.get("hidden", {}) or {}).items():
        if isinstance(row, Mapping) and isinstance(row.get("speedup"), (int, float)):
            lines.append(f"    hidden {name}: candidate {_ms(row.get('candidate_main_ms'))} -> {_ms(row.get('candidate_ms'))}, "
                         f"reference {_ms(row.get('reference_main_ms'))} -> {_ms(row.get('reference_ms'))}, speedup {row['speedup']:.2f}x")
    for item in perf.get("undecided", []) or []:
        if isinstance(item, Mapping):
            lines.append(f"    too noisy to decide {item.get('rule', '?')}: {item.get('why', '')} "
                         "(no finding raised)")
    mem = perf.get("memory", {}) or {}
    if "candidate_bytes" in mem:
        r = mem.get("ratio")
        lines.append(f"    memory: candidate {_mib(mem.get('candidate_bytes'))}, reference {_mib(mem.get('reference_bytes'))}"
                     + (f" ({r:.2f}x)" if isinstance(r, (int, float)) else "")
                     + _memory_caveat(mem))
    bound = perf.get("bound", {}) or {}
    if isinstance(bound.get("bound_ms"), (int, float)):
        rel = bound.get("candidate_over_bound")
        lines.append(f"    bound: {bound['bound_ms']:.4g} ms ({bound.get('limited_by')}-bound"
                     + (f", candidate at {rel:.2f}x of it" if isinstance(rel, (int, float)) else "")
                     + ("" if bound.get("reliable") else f"; not trusted: {bound.get('why', '')}") + ")")
    outside = perf.get("outside_clock", {}) or {}
    if outside.get("checked"):
        lines.append(f"    parent clock: {outside.get('calls')} back-to-back calls at {outside.get('parent_ms_per_call', 0):.4g} ms "
                     f"each, reported {outside.get('claimed_wall_ms', 0):.4g} ms"
                     + (" (information only on the CPU)" if outside.get("informational") else "")
                     + (": CONTRADICTED" if outside.get("contradicts") else ""))
    sets = perf.get("input_sets", {}) or {}
    if isinstance(sets, Mapping) and sets.get("note"):
        lines.append(f"    input sets: {sets.get('timed')} timed of {sets.get('target')} wanted ({sets['note']})")
    return "\n".join(lines)


def _memory_caveat(mem: Mapping[str, Any]) -> str:
    """Say when device memory held outside the caching allocator since the import could not be
    read (no per-process NVML count and a device shared with the other worker): a raw cudaMalloc
    made before the measured call is then not in the figures."""
    basis = str(mem.get("basis") or "")
    cand = mem.get("candidate") if isinstance(mem.get("candidate"), Mapping) else {}
    if basis.startswith("per call") and cand.get("kind") == "cuda":
        return "; memory outside the allocator counted for one call only (not readable since import here)"
    return ""


def _convergence(conv: Any) -> list[str]:
    """One line for the series that reached their interval target, one per series that did not."""
    if not isinstance(conv, Mapping) or not conv:
        return []
    done, lines = [], []
    target = None
    for name, c in conv.items():
        if not isinstance(c, Mapping):
            continue
        label = LABELS.get(name, name)
        target = c.get("target") if isinstance(c.get("target"), (int, float)) else target
        if c.get("converged") and isinstance(c.get("spread"), (int, float)):
            done.append(f"{label} {spread(c['spread'])} ({c.get('calls')} {c.get('unit') or 'calls'}, "
                        f"{c.get('elapsed_s') or 0:.1f} s)")
        else:
            lines.append(f"    {label}: {c.get('note', 'did not converge')}")
    if done:
        goal = f" within the target +-{target:.0%}" if isinstance(target, (int, float)) else ""
        lines.insert(0, "    repeated until narrow" + goal + ": " + ", ".join(done))
    return lines
