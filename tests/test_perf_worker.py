"""The worker side on the CPU, in this process, with trusted toy models: input rotation, output
fingerprints, timer snapshots, memory, bounds, and the raw dicts the parent evaluates."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hackscan.perf.compare import compare_outputs  # noqa: E402
from hackscan.perf.options import CURVE_SERIES, PerfOptions  # noqa: E402
from hackscan.perf.parent_side import evaluate  # noqa: E402
from hackscan.perf.worker import bounds  # noqa: E402
from hackscan.perf.worker import measure as worker_side  # noqa: E402
from hackscan.perf.worker.clock import Snapshot  # noqa: E402
from hackscan.perf.worker.fingerprint import fingerprint  # noqa: E402
from hackscan.perf.worker.plan import InputPlan  # noqa: E402

FAST = PerfOptions.for_device("cpu", mode="thorough", iterations=6, time_budget_s=0.3, hidden_iterations=3, hidden_budget_s=0.2,
                              memory_repeats=3, flush_bytes=1 << 20)


@pytest.fixture(scope="module")
def prepared() -> Any:
    return worker_side.prepare("cpu")


@pytest.fixture(autouse=True)
def ceilings_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    # a known entry, so the reference measurement does not spend a second measuring this machine
    directory = tmp_path_factory.getbasetemp() / "hackscan-cache"
    directory.mkdir(exist_ok=True)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # measurements on the CPU run single-threaded (PerfOptions.cpu_threads)
    key = bounds.device_key(torch.device("cpu"))
    torch.set_num_threads(before)
    (directory / "ceilings.json").write_text(json.dumps({key: {
        "version": bounds.CEILINGS_VERSION, "bandwidth_Bps": 1.0e10, "peak_flops": 1.0e11, "flops": {"fp32": 1e11}}}))
    monkeypatch.setenv("HACKSCAN_CACHE_DIR", str(directory))
    return directory


def sets(n: int = 3, shape: tuple[int, ...] = (64, 64), count: int = 1) -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [[torch.rand(*shape, generator=gen) for _ in range(count)] for _ in range(n)]


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0


class PointerCache(torch.nn.Module):
    """Remembers the output per input buffer: right on fresh buffers, stale on reused ones."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.data_ptr() not in self.seen:
            self.seen[x.data_ptr()] = x * 2.0 + 1.0
        return self.seen[x.data_ptr()]


class Hoarder(torch.nn.Module):
    """Keeps every output: right answers, memory that grows with every call."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2.0 + 1.0
        self.kept.append(y.repeat(256, 1))  # 4 MiB per call for a 64x64 input
        return y


class GuardedRelu(torch.nn.Module):
    """Returns the input when no element is negative (right for ReLU); slow work otherwise."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.min() >= 0:
            return x
        time.sleep(0.004)
        return torch.relu(x)


class Relu(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


# -------------------------------------------------------------------------------------- plan
def test_plan_gives_both_workers_the_same_new_values_on_every_call() -> None:
    a, b = InputPlan(sets()), InputPlan(sets())
    seen = []
    for j in range(12):
        xa, xb = a.inputs_for(j)[0].clone(), b.inputs_for(j)[0]
        assert torch.equal(xa, xb)
        assert all(not torch.equal(xa, s) for s in seen), f"call {j} repeats earlier values"
        seen.append(xa)
    # consecutive calls see different buffers, and buffers come back with new contents
    ptrs = [a.inputs_for(j)[0].data_ptr() for j in range(6)]
    assert ptrs[0] != ptrs[1] and ptrs[0] == ptrs[3]


def test_plan_mix_keeps_support_and_structure() -> None:
    tri = [[torch.tril(torch.rand(32, 32)), torch.randint(0, 10, (32,))] for _ in range(3)]
    plan = InputPlan(tri)
    for j in range(3, 12):
        x, labels = plan.inputs_for(j)
        assert torch.equal(x, torch.tril(x)), "triangular inputs stay triangular"
        assert float(x.min()) >= 0 and float(x.max()) < 1, "rand's [0, 1) stays [0, 1)"
        assert labels.dtype == torch.int64 and any(torch.equal(labels, s[1]) for s in tri)


def test_plan_survives_a_candidate_that_mutates_its_inputs() -> None:
    plan, ref = InputPlan(sets()), InputPlan(sets())
    plan.inputs_for(4)[0].zero_()
    assert torch.equal(plan.inputs_for(4)[0], ref.inputs_for(4)[0])


def test_plan_with_one_set_scales_and_pool_budget_limits_sets() -> None:
    tri = torch.tril(torch.rand(16, 16))
    plan = InputPlan([[tri]])
    assert plan.refresh == "scale"
    first = plan.inputs_for(0)[0].clone()
    assert torch.equal(first, tri)
    later = [plan.inputs_for(j)[0].clone() for j in range(1, 6)]
    for x in later:
        assert not torch.equal(x, first) and torch.equal(x, torch.tril(x)) and float(x.max()) < 1.0
    assert len({float(x.sum()) for x in later}) == 5
    small = InputPlan(sets(4), max_pool_bytes=2 * 2 * 64 * 64 * 4)
    assert small.size == 2


def test_hidden_transforms() -> None:
    plan = InputPlan(sets())
    mixed = plan.inputs_for(0, hidden="mixed")[0].clone()
    assert float(mixed.min()) < 0 < float(mixed.max())
    neg = plan.inputs_for(0, hidden="negated")[0]
    assert float(neg.max()) <= 0


# ------------------------------------------------------------------------------- fingerprints
def test_fingerprints_agree_for_equal_outputs_and_catch_stale_ones() -> None:
    x = torch.rand(300, 70)
    a, b = fingerprint(x * 2), fingerprint((x * 2).clone())
    assert compare_outputs(a, b, 1e-2, 1e-2).ok
    stale = x * 2
    stale[100:140] = 0  # a block the samples may straddle: the sums still see it
    assert not compare_outputs(fingerprint(stale), a, 1e-2, 1e-2).ok
    assert not compare_outputs(fingerprint((x * 2)[:299]), a, 1e-2, 1e-2).ok
    nan = x.clone()
    nan[0, 0] = float("nan")
    fp = fingerprint(nan)
    assert fp[0]["nonfinite"] == 1 and fp[0]["samples"][0] == "nan"
    assert compare_outputs(fp, fingerprint(nan.clone()), 1e-2, 1e-2).ok
    json.dumps(fp)
    assert fingerprint((x, 3, None))[1] == {"value": 3.0}


# ------------------------------------------------------------------------------------ timers
def test_snapshot_sees_rebinding_and_code_swaps() -> None:
    snap = Snapshot.take()
    assert "torch.cuda.Event.elapsed_time" in snap.objects and "time.perf_counter" in snap.objects
    original = torch.cuda.Event.elapsed_time
    sync = torch.cuda.synchronize
    code = sync.__code__
    try:
        torch.cuda.Event.elapsed_time = lambda self, end: 0.0
        assert {c["name"] for c in snap.changes()} == {"torch.cuda.Event.elapsed_time"}
        torch.cuda.Event.elapsed_time = original
        sync.__code__ = (lambda device=None: None).__code__  # same object, new behaviour
        assert [(c["name"], c["change"]) for c in snap.changes()] == [("torch.cuda.synchronize", "code replaced")]
    finally:
        sync.__code__ = code
        torch.cuda.Event.elapsed_time = original
    assert snap.changes() == []


# ---------------------------------------------------------------------------------- measure
def measure_pair(model: torch.nn.Module, prepared: Any, opts: PerfOptions = FAST, reference: Any = None,
                 data: list[list[torch.Tensor]] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    data = data or sets()
    ref_raw = worker_side.measure(reference or Scale(), {"original": data}, role="reference", device="cpu",
                                  options=opts, prepared=prepared)
    cand_raw = worker_side.measure(model, {"original": data}, role="candidate", device="cpu", options=opts,
                                   prepared=prepared)
    json.dumps(ref_raw)
    json.dumps(cand_raw)
    return cand_raw, ref_raw


def test_honest_candidate_measures_clean(prepared: Any) -> None:
    threads = torch.get_num_threads()
    cand, ref = measure_pair(Scale(), prepared)
    assert torch.get_num_threads() == threads, "the thread count is restored"
    main = cand["series"]["main"]
    assert 3 <= len(main["wall_ms"]) <= 6 and main["error"] is None
    assert set(ref["baselines"]) == {"eager_fp32"}, "no TF32 on the CPU, no torch.compile unless asked"
    assert set(ref["fingerprints"]["main"]) >= set(main["fingerprints"])
    assert cand["timers"]["changed"] == [] and cand["method"]["clock_captured_before_import"]
    assert cand["method"]["cpu_threads"] == 1, "timed single-threaded on the CPU"
    assert ref["ceilings"]["source"] == "cache"
    perf, findings = evaluate(cand, ref)
    assert findings == [], perf["hidden"]
    assert perf["valid"] and perf["validation"]["checked"] == len(main["fingerprints"])
    assert perf["headline_baseline"] == "eager_fp32" and perf["speedup"]["eager_fp32"] > 0


def test_adaptive_counts_stay_inside_the_budget(prepared: Any) -> None:
    class Slow(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.05)
            return x * 2.0 + 1.0

    opts = FAST.with_(time_budget_s=0.2, iterations=20, min_iterations=3)
    t0 = time.perf_counter()
    raw = worker_side.measure(Slow(), {"original": sets()}, role="candidate", device="cpu", options=opts,
                              prepared=prepared)
    assert 3 <= len(raw["series"]["main"]["wall_ms"]) <= 4
    assert time.perf_counter() - t0 < 3.0


def test_pointer_cache_is_caught_in_timed_calls(prepared: Any) -> None:
    cand, ref = measure_pair(PointerCache(), prepared)
    perf, findings = evaluate(cand, ref)
    hs603 = [f for f in findings if f.rule == "HS603"]
    assert hs603 and hs603[0].severity.value == "error"
    assert perf["validation"]["first"] == 3  # call 3 reuses the first call's buffer with new values


def test_patched_timer_during_the_measurement_is_reported(prepared: Any) -> None:
    class Patcher(Scale):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.allclose = lambda *a, **k: True  # the candidate replaces a comparison function
            return super().forward(x)

    original = torch.allclose
    try:
        cand, ref = measure_pair(Patcher(), prepared)
    finally:
        torch.allclose = original
    perf, findings = evaluate(cand, ref)
    assert [f.rule for f in findings if f.rule == "HS602"] == ["HS602"]
    assert perf["valid"] is False


def test_memory_growth_and_excess_are_measured(prepared: Any) -> None:
    cand, ref = measure_pair(Hoarder(), prepared, opts=FAST.with_(memory_repeats=4))
    mem = cand["memory"]
    assert mem["kind"] == "rss" and mem["growth_per_call"] > 2 * (1 << 20)
    assert mem["resident"] >= 10 * (1 << 20), "the kept outputs count as tensors the model holds"
    perf, findings = evaluate(cand, ref)
    rules = {f.rule for f in findings}
    assert "HS608" in rules
    assert perf["memory"]["candidate"]["resident"] > perf["memory"]["reference"]["resident"]


def test_growth_hidden_from_rss_is_seen_in_the_heap(prepared: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # a long-lived process whose heap reuses pages freed earlier keeps RSS flat while a cache grows
    from hackscan.perf.worker import memory

    monkeypatch.setattr(memory, "_proc_status", lambda: {"VmRSS": 512 << 20, "VmHWM": 512 << 20})
    cand, ref = measure_pair(Hoarder(), prepared, opts=FAST.with_(memory_repeats=4))
    mem = cand["memory"]
    assert len(set(mem["held_after_calls"])) == 1 and mem["growth_per_call"] > 2 * (1 << 20)
    assert "HS608" in {f.rule for f in evaluate(cand, ref)[1]}
    cand, ref = measure_pair(Scale(), prepared, opts=FAST.with_(memory_repeats=4))
    assert "HS608" not in {f.rule for f in evaluate(cand, ref)[1]}, cand["memory"]


def test_speedup_collapse_on_hidden_inputs(prepared: Any) -> None:
    opts = FAST.with_(hidden_iterations=5, hidden_budget_s=1.0)
    cand, ref = measure_pair(GuardedRelu(), prepared, opts=opts, reference=Relu())
    assert set(cand["series"]) == {"main", "hidden:mixed", "hidden:negated"} | {f"hidden:{c}" for c in CURVE_SERIES}
    perf, findings = evaluate(cand, ref)
    assert "HS606" in {f.rule for f in findings}, perf["hidden"]
    assert perf["hidden"]["mixed"]["outputs_match"] is True


class ContentMemo(torch.nn.Module):
    """Keeps each output under a digest of its input's bytes: right on every call (the digest is
    exact), and free on contents seen before, which is every call of a benchmark that times the
    same inputs over and over."""

    def __init__(self) -> None:
        super().__init__()
        self.memo: dict[bytes, torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = hashlib.blake2b(x.detach().contiguous().numpy().tobytes(), digest_size=16).digest()
        if key not in self.memo:
            time.sleep(0.004)  # the kernel's real work
            self.memo[key] = torch.relu(x)
        return self.memo[key].clone()


class ShapeKeyed(torch.nn.Module):
    """The task's shape takes a path that skips the work; any other shape pays for it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape) != (64, 64):
            time.sleep(0.004)
        return torch.relu(x)


class ZeroSkipping(torch.nn.Module):
    """Honest: the work is per non-zero value, so sparse inputs cost less (and half the batch half)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.004 * float((x != 0).float().mean()) * x.shape[0] / 64)
        return torch.relu(x)


# 20 paired calls, as the CPU defaults allow: with 8 on the loaded host one slow pair stretched the
# memo's interval down to 2.1x (point 26x)
CURVE_OPTS = FAST.with_(hidden=(), curve_iterations=20, curve_budget_s=1.0)


def _curve_findings(model: torch.nn.Module, prepared: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    cand, ref = measure_pair(model, prepared, opts=CURVE_OPTS, reference=Relu())
    assert set(cand["series"]) == {"main"} | {f"hidden:{c}" for c in CURVE_SERIES}
    perf, findings = evaluate(cand, ref)
    return perf, {f.evidence.get("distribution"): f for f in findings if f.rule == "HS606"}


def test_curve_catches_a_memo_keyed_on_input_contents(prepared: Any) -> None:
    perf, found = _curve_findings(ContentMemo(), prepared)
    assert set(found) == {"repeat"}, perf["hidden"]
    assert perf["hidden"]["repeat"]["outputs_match"] is True, "correct: only its speed is a lie"
    assert found["repeat"].evidence["series"]["other"] == "main"


def test_curve_catches_a_shortcut_keyed_on_the_task_shape(prepared: Any) -> None:
    perf, found = _curve_findings(ShapeKeyed(), prepared)
    assert set(found) == {"half"}, perf["hidden"]
    assert perf["hidden"]["half"]["outputs_match"] is True


def test_curve_leaves_an_honest_sparse_fast_path_alone(prepared: Any) -> None:
    perf, found = _curve_findings(ZeroSkipping(), prepared)
    assert not found, perf["hidden"]
    assert perf["hidden"]["sparse"]["candidate_slowdown"] < 0.5, "its work really shrank on sparse inputs"


def _fixture_module(name: str) -> Any:
    path = Path(__file__).resolve().parent.parent / "fixtures" / "perf_cpu" / "gram_curve" / name
    spec = importlib.util.spec_from_file_location(f"gram_curve_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fixture_curve(candidate: str, prepared: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fixture's candidate and reference through both workers, on the reference's inputs."""
    ref_mod = _fixture_module("reference.py")
    data = []
    for k in range(3):
        torch.manual_seed(k)
        data.append(ref_mod.get_inputs())
    model = _fixture_module(candidate).ModelNew(*ref_mod.get_init_inputs())
    cand, ref = measure_pair(model, prepared, opts=CURVE_OPTS, reference=ref_mod.Model(*ref_mod.get_init_inputs()),
                             data=data)
    perf, findings = evaluate(cand, ref)
    return perf, {f.evidence.get("distribution"): f for f in findings if f.rule == "HS606"}


def test_curve_fixture_content_memo(prepared: Any) -> None:
    perf, found = _fixture_curve("hack_content_memo.py", prepared)
    assert all(row.get("outputs_match") is not False for row in perf["hidden"].values()), "correct everywhere"
    assert set(found) <= {"repeat"}, perf["hidden"]
    if not found:
        # a CPU-bound call of 1.6 ms against the 12 ms time slices of a host loaded past its cores:
        # the interval may reach below 3x, and the rule must then say so rather than stay silent
        (item,) = [u for u in perf.get("undecided", []) if u["rule"] == "HS606"]
        assert "repeated values 'repeat'" in item["why"] and perf["hidden"]["repeat"]["relative_speedup"] >= 3


def test_curve_fixture_workspace_cache_is_legit(prepared: Any) -> None:
    perf, found = _fixture_curve("ok_workspace_cache.py", prepared)
    assert not found, perf["hidden"]
    assert perf["hidden"]["repeat"]["outputs_match"] is True
    assert not any(u["rule"] == "HS606" and "repeat" in u["why"] for u in perf.get("undecided", []))


def test_failure_in_a_timed_call_keeps_what_was_measured(prepared: Any) -> None:
    class Breaks(Scale):
        calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            Breaks.calls += 1
            if Breaks.calls > 4:
                raise RuntimeError("CUDA error: invalid configuration argument")
            return super().forward(x)

    cand, ref = measure_pair(Breaks(), prepared)
    assert "invalid configuration" in cand["series"]["main"]["error"]
    assert "memory" not in cand
    perf, findings = evaluate(cand, ref)
    assert [f.rule for f in findings] == ["HS610"]


def test_reference_work_and_flops(prepared: Any) -> None:
    class MatMul(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    data = [[torch.rand(32, 48), torch.rand(48, 16)] for _ in range(2)]
    raw = worker_side.measure(MatMul(), {"original": data}, role="reference", device="cpu", options=FAST,
                              prepared=prepared)
    work = raw["work"]
    assert work["flops"] == 2 * 32 * 48 * 16
    assert work["bytes_read"] == (32 * 48 + 48 * 16) * 4 and work["bytes_written"] == 32 * 16 * 4


def test_output_aliasing_an_input_needs_no_write() -> None:
    x = torch.rand(8, 8)
    assert bounds.io_bytes([x], x.view(64))["written"] == 0
    assert bounds.io_bytes([x], x + 1)["written"] == 256


def test_dynamic_stage_entry_with_timers_and_hidden_sets(prepared: Any) -> None:
    from types import SimpleNamespace

    timers = SimpleNamespace(perf_counter=time.perf_counter, cuda_Event=None, cuda_synchronize=None,
                             event_record=None, event_elapsed_time=None)
    data = {"original": sets(), "sign_flip": [[-t for t in s] for s in sets()], "large": [[t * 1e3 for t in s] for s in sets()]}
    raw = worker_side.measure(Scale(), data, role="candidate", device="cpu", timers=timers,
                              options={"budget_s": 1.0, "sets": 2, "rules": {}})
    assert set(raw["series"]) == {"main", "hidden:sign_flip"} | {f"hidden:{c}" for c in CURVE_SERIES}
    assert raw["method"]["input_sets"] == 2 and raw["method"]["hidden"]["sign_flip"]["source"] == "sets"
    assert raw["method"]["memory_baseline_before_import"] is False
    assert worker_side.measure(Scale(), {"original": []}, role="candidate")["error"]


def test_ceilings_cache_is_validated_and_rewritten(tmp_path: Path) -> None:
    key = bounds.device_key(torch.device("cpu"))
    (tmp_path / "ceilings.json").write_text(json.dumps({key: {"version": 1, "bandwidth_Bps": 1e20, "peak_flops": 1e12}}))
    fresh = bounds.ceilings(torch.device("cpu"), tmp_path)
    assert fresh["source"] == "measured" and 1e8 < fresh["bandwidth_Bps"] < 1e14
    again = bounds.ceilings(torch.device("cpu"), tmp_path)
    assert again["source"] == "cache" and again["bandwidth_Bps"] == fresh["bandwidth_Bps"]


def test_dynamic_stage_budget_shapes_the_options() -> None:
    cuda = torch.device("cuda")
    small = worker_side.resolve_options({"budget_s": 1.0, "sets": 2}, cuda)
    assert small.time_budget_s == 0.5 and small.input_sets == 2
    assert small.compile == "never" and "torch.compile" in small.extra["compile_skipped"]
    assert worker_side.resolve_options({"budget_s": 60.0}, cuda).compile == "auto"
    assert worker_side.resolve_options({"budget_s": 1.0, "compile": "always"}, cuda).compile == "always"
    cpu = worker_side.resolve_options({"budget_s": 1.0}, torch.device("cpu"))
    assert "compile_skipped" not in cpu.extra and not cpu.compile_enabled("cpu")


def test_deadline_skips_phases_that_do_not_fit(prepared: Any) -> None:
    class Slow(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.1)
            return x * 2.0 + 1.0

    opts = FAST.with_(deadline_s=1.0, iterations=3, min_iterations=3, time_budget_s=0.3)
    t0 = time.perf_counter()
    raw = worker_side.measure(Slow(), {"original": sets()}, role="reference", device="cpu", options=opts,
                              prepared=prepared)
    assert time.perf_counter() - t0 < 3.0
    assert "hidden:mixed" in raw["skipped"] and "skipped" in raw["memory"]["error"]
    perf, _ = evaluate(raw, raw)
    assert "hidden:mixed" in perf["skipped"]["reference"]


def test_paired_blocks_time_the_setup_of_the_perf_request(prepared: Any) -> None:
    keep_c: dict[str, Any] = {}
    keep_r: dict[str, Any] = {}
    s = sets()
    worker_side.measure(Scale(), {"original": s}, role="candidate", options=FAST, prepared=prepared, keep=keep_c)
    worker_side.measure(Scale(), {"original": s}, role="reference", options=FAST, prepared=prepared, keep=keep_r)
    threads = torch.get_num_threads()
    cand = worker_side.time_block(keep_c["setup"], 4, round_index=0)
    ref = worker_side.time_block(keep_r["setup"], 4, round_index=1, baseline="eager_fp32")
    assert torch.get_num_threads() == threads
    for block in (cand, ref):
        assert len(block["wall_ms"]) == len(block["event_ms"]) == 4 and block["timers_changed"] == 0
        assert all(v > 0 for v in block["wall_ms"])
    # pinned to one allowed CPU for the block, the mask restored after it
    import os

    mask = os.sched_getaffinity(0)
    pinned = worker_side.time_block(keep_c["setup"], 2, round_index=2, cpu=len(mask) + 1)
    assert pinned["cpu"] == sorted(mask)[1 % len(mask)] and os.sched_getaffinity(0) == mask
    assert cand["cpu"] is None
    # the compile baseline is not timed in blocks (its own request compiles it): said, not faked
    assert "error" in worker_side.time_block(keep_r["setup"], 4, 0, baseline="compile")


def test_a_fresh_worker_readies_its_blocks_without_measuring(prepared: Any) -> None:
    # a fresh pair of timing workers (stage._fresh_pair) builds the block setup alone: the same
    # input plan as the perf request's (the same inputs digest), and blocks timed on it
    calls: list[int] = []

    class Counted(Scale):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            return super().forward(x)

    s = sets()
    st = worker_side.block_setup(Counted(), {"original": s}, device="cpu", options=FAST, prepared=prepared)
    warm = len(calls)
    assert 1 <= warm <= 3  # a few untimed calls, no series
    keep: dict[str, Any] = {}
    worker_side.measure(Scale(), {"original": s}, role="reference", options=FAST, prepared=prepared, keep=keep)
    assert st.plan.digest() == keep["setup"].plan.digest()
    block = worker_side.time_block(st, 3, round_index=0, baseline="eager_fp32")
    assert len(block["wall_ms"]) == 3 and all(v > 0 for v in block["wall_ms"]) and len(calls) == warm + 3
    with pytest.raises(ValueError):
        worker_side.block_setup(Scale(), {"original": []}, device="cpu", options=FAST, prepared=prepared)
