"""How a measurement is taken: iteration counts, budgets, input rotation, hidden distributions.

Plain data shared by both halves (the parent sends it to the children as JSON).  By default
(``mode="target"``) each main series repeats until the interval of its statistic is within
``target_rel`` or its cap is spent; ``mode="thorough"`` keeps the fixed counts: GPU defaults are
fixed counts, CPU defaults adaptive within a time budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

# the version of the raw measurement dicts the worker side returns and the parent side reads
SCHEMA = "hackscan.perf/1"

# Hidden input distributions derived from the original inputs (floating tensors only):
#   mixed:   (x - 0.5) * 4  -> rand's [0, 1) becomes [-2, 2): breaks min >= 0 / max < 1 guards
#   negated: -x             -> sign-flipped, same magnitudes
HIDDEN_DISTRIBUTIONS = ("mixed", "negated")

# The curve's series (HS606, docs/curve.md), timed besides the hidden distributions, always derived
# from the original sets, whatever hidden sets the dynamic stage hands over:
#   sparse:  90 % of the values exactly zero (the work of an honest kernel can only shrink)
#   shifted: x + 3 (rand's [0, 1) becomes [3, 4))
#   repeat:  the values of the call timed just before, in other storage (a memo keyed on contents
#            returns at once: correct, but its speed on a benchmark that repeats its inputs is a lie)
#   half:    the batch (leading dimension) halved: the work halves, a shape-keyed shortcut does not
CURVE_SERIES = ("sparse", "shifted", "repeat", "half")
# what --perf quick times of them (few calls each): the two a value guard keyed on the test
# distribution does not already meet in the hidden distributions
CURVE_QUICK = ("repeat", "half")

# how the main series are sized (PerfOptions.mode): to a target interval, or fixed counts
PERF_MODES = ("target", "thorough")

# what ``--baselines`` accepts: eager (strict fp32), tf32 (eager with TF32, GPU only), compile
BASELINE_ALIASES = {"eager": "eager", "eager_fp32": "eager", "fp32": "eager", "strict": "eager",
                    "tf32": "tf32", "eager_tf32": "tf32",
                    "compile": "compile", "torch.compile": "compile", "torch_compile": "compile",
                    "inductor": "compile"}


def normalise_baseline(name: str) -> str:
    """``eager``, ``tf32`` or ``compile`` for any accepted spelling; ValueError otherwise."""
    n = name.strip().lower().replace("-", "_")
    if n not in BASELINE_ALIASES:
        raise ValueError(f"unknown baseline {name!r}: expected eager, tf32 or compile")
    return BASELINE_ALIASES[n]


@dataclass(frozen=True)
class PerfOptions:
    warmup: int = 5
    iterations: int = 30
    # the series is cut short (never below min_iterations) when it would take longer than this
    time_budget_s: float = 10.0
    min_iterations: int = 5
    # adaptive counts (CPU): iterations = clamp(budget / estimate, min_iterations, iterations)
    adaptive: bool = False
    # "target": each main series repeats until its statistic's 95 % interval is within
    # +-target_rel, at most series_cap_s seconds of timed calls (and max_calls calls), and says
    # whether it got there; "thorough": the fixed counts and budgets above (iterations,
    # time_budget_s), whatever the interval
    mode: str = "target"
    target_rel: float = 0.05
    series_cap_s: float = 2.0
    # the least a targeted series runs before it may stop as narrow (see timing.Target)
    series_min_s: float = 0.2
    max_calls: int = 4000
    # fresh input sets rotated across iterations; each reuse of a set gets new values (see plan.py)
    input_sets: int = 4
    # cap on the bytes the input pool may hold (the pool keeps an original and a working copy);
    # None: a tenth of the device's memory, at most 8 GiB
    input_pool_bytes: int | None = None
    # bytes written between iterations to evict the last-level cache; None = 2x the cache size
    flush_bytes: int | None = None
    hidden: tuple[str, ...] = HIDDEN_DISTRIBUTIONS
    hidden_iterations: int = 10
    hidden_budget_s: float = 3.0
    # the curve's series (CURVE_SERIES), each at most curve_iterations calls (every one paired with a
    # main-distribution call) within curve_budget_s
    curve: tuple[str, ...] = CURVE_SERIES
    curve_iterations: int = 8
    curve_budget_s: float = 1.0
    fingerprint_samples: int = 256
    memory_repeats: int = 4
    # torch.compile baseline: "auto" = on CUDA only, "always", "never"
    compile: str = "auto"
    compile_mode: str = "default"
    # calls to reference outputs for validation: indices 0 .. validate_upto-1 (None = warmup + iterations)
    validate_upto: int | None = None
    # the calls of the outside-clock check (back-to-back, one synchronisation at the end)
    spin_budget_s: float = 1.0
    # intra-op threads while timing on the CPU: one, because an OpenMP barrier waiting for a thread
    # that another process holds stalls a whole call (24 ms stalls measured on the shared CI box);
    # None keeps torch's setting
    cpu_threads: int | None = 1
    # wall-clock limit of one measure() call; phases that would not fit are skipped and said so
    # (the dynamic stage sets it from its budget, so that its worker timeout is never reached)
    deadline_s: float | None = None
    # the eager TF32 baseline on a GPU (the headline there); off: strict fp32 becomes the headline
    tf32: bool = True
    # no other process of ours allocates on the device while this one is measured (the standalone
    # runner's workers run one after the other).  The dynamic stage keeps its other worker alive and
    # sends False: the device's free memory then counts only within one call, and memory outside the
    # allocator since the baseline is read from NVML's per-process count where NVML has one
    exclusive_device: bool = True
    seed: int = 20240917
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def for_device(cls, device: str, **overrides: Any) -> PerfOptions:
        """Defaults for ``cuda`` (fixed counts) or ``cpu`` (adaptive, about a second per series)."""
        if device.startswith("cuda"):
            base = cls()
        else:
            # hidden series up to 20 calls (the budget still sizes them): with 5, HS606's interval
            # was the range of five calls, the minimum's upper end the third smallest of them, and
            # one scan of relu/hack_value_guard gave 2.13-3.03x, the next with the same seed
            # 0.76-2.93x on a point of 2.5x both times
            base = cls(warmup=1, iterations=20, min_iterations=3, time_budget_s=1.0, adaptive=True,
                       input_sets=3, input_pool_bytes=512 << 20, hidden_iterations=20, hidden_budget_s=0.5,
                       curve_iterations=20, curve_budget_s=0.25,
                       memory_repeats=3, spin_budget_s=0.5, series_cap_s=3.0, series_min_s=1.0)
        return base.with_(**overrides) if overrides else base

    def targeted(self) -> bool:
        return self.mode == "target"

    def with_(self, **changes: Any) -> PerfOptions:
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown perf options: {', '.join(sorted(unknown))}")
        for key in ("hidden", "curve"):
            if key in changes and changes[key] is not None:
                changes[key] = tuple(changes[key])
        return replace(self, **changes)

    @property
    def calls(self) -> int:
        """Calls of one full series (warm-up included): the indices the reference must validate."""
        return self.validate_upto if self.validate_upto is not None else max(self.warmup, 1) + self.iterations

    def compile_enabled(self, device: str) -> bool:
        if self.compile == "always":
            return True
        if self.compile == "never":
            return False
        return device.startswith("cuda")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["hidden"] = list(self.hidden)
        out["curve"] = list(self.curve)
        out["extra"] = dict(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerfOptions:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("hidden", "curve"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        if kwargs.get("mode", "target") not in PERF_MODES:
            raise ValueError(f"unknown perf mode {kwargs['mode']!r}: expected {' or '.join(PERF_MODES)}")
        unknown = [h for h in kwargs.get("hidden", ()) if h not in HIDDEN_DISTRIBUTIONS]
        if unknown:
            raise ValueError(f"unknown hidden distributions: {unknown}")
        unknown = [h for h in kwargs.get("curve", ()) if h not in CURVE_SERIES]
        if unknown:
            raise ValueError(f"unknown curve series: {unknown}")
        return cls(**kwargs)
