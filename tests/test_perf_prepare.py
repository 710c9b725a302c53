"""The worker-side pieces of the pipeline integration: the pre-import baseline (``prepare``), how
memory outside the allocator is read when the other worker shares the device, and the hooks the
dynamic stage's workers call (``hackscan.dynamic.worker.perf``).  CUDA is simulated where needed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hackscan.perf.worker import measure as worker_side  # noqa: E402
from hackscan.perf.worker import memory as mem  # noqa: E402
from hackscan.perf.worker.plan import InputPlan  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20


def test_own_nvml_pid_inside_and_outside_a_pid_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mem.os, "getpid", lambda: 42)
    assert mem.own_nvml_pid({7: 1}, {7: 1, 42: 5}) == 42  # NVML knows our own pid
    assert mem.own_nvml_pid({7: 1, 9: 1}, {7: 1, 9: 1, 31337: 5}) == 31337  # the one newcomer: us
    assert mem.own_nvml_pid({7: 1}, {7: 1, 8: 2, 9: 3}) is None  # two newcomers: ambiguous
    assert mem.own_nvml_pid(None, {8: 1}) is None
    assert mem.own_nvml_pid({}, None) is None


class FakeDevice:
    """Just enough of torch.cuda's memory API: this process's allocator, NVML's per-process count,
    and the device's free memory, which the other worker changes too."""

    def __init__(self, nvml: bool):
        self.allocated = 0
        self.reserved = 2 * MIB
        self.free = 80 * GIB
        self.process = 500 * MIB  # context
        self.nvml = nvml

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "empty_cache", lambda: None)
        monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: self.reserved)
        monkeypatch.setattr(cuda, "mem_get_info", lambda device=None: (self.free, 141 * GIB))
        monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda device=None: None)
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: self.allocated + 64 * MIB)
        monkeypatch.setattr(mem, "process_device_bytes", lambda pid=None: self.process if self.nvml else None)

    def raw_malloc(self, n: int) -> None:  # this process, outside the allocator
        self.free -= n
        self.process += n

    def other_worker_allocates(self, n: int) -> None:
        self.free -= n

    def baseline(self) -> mem.MemoryBaseline:
        return mem.MemoryBaseline("cuda:0", self.allocated, self.reserved, self.free, 141 * GIB, 0,
                                  self.process if self.nvml else None, 4242 if self.nvml else None)


def _measure(dev: FakeDevice, base: mem.MemoryBaseline, exclusive: bool) -> dict[str, Any]:
    plan = InputPlan([[torch.ones(4)], [torch.zeros(4)]])
    return mem.measure(lambda inputs: inputs[0] * 2, torch.nn.Identity(), plan, torch.device("cuda", 0), base,
                       start=0, repeats=3, sync=lambda: None, exclusive=exclusive)


@pytest.mark.parametrize("nvml, exclusive, outside_gib, method, known", [
    (True, False, 1, "nvml-process", True),   # the pipeline where NVML lists the worker: exact
    (False, False, 0, "during-call", False),  # the pipeline without NVML: never the other worker's memory
    (False, True, 6, "device-free", True),    # standalone (one worker at a time): the device's free memory
])
def test_memory_outside_the_allocator_when_the_device_is_shared(monkeypatch: pytest.MonkeyPatch, nvml: bool,
                                                                  exclusive: bool, outside_gib: int, method: str,
                                                                  known: bool) -> None:
    dev = FakeDevice(nvml)
    dev.install(monkeypatch)
    base = dev.baseline()
    dev.raw_malloc(1 * GIB)  # at import or on the first call: after the baseline, before the measurement
    dev.other_worker_allocates(5 * GIB)  # the reference worker builds its probes meanwhile
    out = _measure(dev, base, exclusive)
    assert out["outside"] == outside_gib * GIB
    assert out["outside_method"] == method and out["baseline_known"] is known
    assert out["allocator_baseline_known"] is True
    assert out["growth_per_call"] == 0


def test_memory_growth_outside_the_allocator_is_seen_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = FakeDevice(nvml=False)
    dev.install(monkeypatch)
    base = dev.baseline()
    plan = InputPlan([[torch.ones(4)], [torch.zeros(4)]])

    def hoarding_call(inputs: list[Any]) -> Any:
        dev.raw_malloc(256 * MIB)  # a cache grown with cudaMalloc on every call
        return inputs[0]

    out = mem.measure(hoarding_call, torch.nn.Identity(), plan, torch.device("cuda", 0), base, start=0, repeats=3,
                      sync=lambda: None, exclusive=False)
    assert out["outside_during_call"] == 256 * MIB and out["outside"] == 256 * MIB
    assert out["growth_per_call"] == 256 * MIB


def test_options_the_stage_sends_reach_the_measurement() -> None:
    opts = worker_side.resolve_options({"budget_s": 4.0, "compile": "never", "tf32": False,
                                        "exclusive_device": False, "sets": 4}, torch.device("cpu"))
    assert opts.exclusive_device is False and opts.tf32 is False and opts.compile == "never"
    from hackscan.perf.worker import baselines

    assert baselines.names_for(torch.device("cuda"), False, tf32=False) == ["eager_fp32"]
    assert baselines.headline_for(torch.device("cuda"), tf32=False) == "eager_fp32"
    assert baselines.names_for(torch.device("cuda"), True) == ["eager_fp32", "eager_tf32", "compile"]


def test_every_set_handed_in_is_the_harness_s_even_when_the_pool_keeps_fewer() -> None:
    sets = [[torch.ones(1024)] for _ in range(4)]  # 4 KiB each
    st = worker_side._setup(torch.nn.Identity(), sets, {"sign_flip": [[torch.ones(1024)]]},
                            {"input_pool_bytes": 16 * 1024}, worker_side.prepare("cpu"))
    assert st.plan.size == 2 and st.given_sets == 4
    assert st.given_bytes == 5 * 4096


class FakeWorker:
    """What the perf requests need of a dynamic-stage worker, with a real CPU model."""

    def __init__(self, prepared: bool = True):
        from hackscan.dynamic.worker import perf as perf_hook
        from hackscan.dynamic.worker.guard import capture_timers

        self.device = "cpu"
        self.spec = {"perf": prepared}
        self.timers = capture_timers()
        self.perf_inputs: dict[str, Any] = {}
        self.perf_spin_inputs = None
        perf_hook.prepare(self)
        self.model = torch.nn.ReLU()
        self.inputs = {pid: [torch.rand(64, 256)] for pid in ("original", "original_b", "perf_0", "randn", "shape_x")}
        self.released = 0

    def perf_model(self) -> Any:
        return self.model

    def perf_release(self) -> None:
        self.released += 1

    def note_changes(self, phase: str) -> list[Any]:
        return []


def test_hook_measures_with_the_pre_import_baseline_and_releases_the_probes() -> None:
    from hackscan.dynamic.worker import perf as perf_hook

    w = FakeWorker()
    assert w.perf_prepared is not None and w.perf_prepare_error is None
    kept = w.inputs["original"][0]
    reply = perf_hook.run_perf(w, {"sets": {"original": ["original", "original_b", "perf_0"], "randn": ["randn"]},
                                   "options": {"budget_s": 0.3, "exclusive_device": False}}, "reference")
    raw = reply["perf"]
    assert "error" not in raw, raw
    assert raw["method"]["clock_captured_before_import"] and raw["method"]["memory_baseline_before_import"]
    assert raw["method"]["input_sets"] == 3 and raw["method"]["exclusive_device"] is False
    assert w.released == 1 and w.inputs == {}
    assert w.perf_inputs["original"][0][0] is kept  # taken over, not copied
    spin = perf_hook.run_spin(w, {"calls": 5})["spin"]
    assert spin["calls"] == 5 and spin["child_s"] > 0


def test_hook_without_prepare_falls_back_to_the_captured_timers() -> None:
    from hackscan.dynamic.worker import perf as perf_hook

    w = FakeWorker(prepared=False)
    assert w.perf_prepared is None
    raw = perf_hook.run_perf(w, {"sets": {"original": ["original", "original_b"]}, "options": {"budget_s": 0.2}},
                             "candidate")["perf"]
    assert raw["method"]["clock_captured_before_import"] and not raw["method"]["memory_baseline_before_import"]
    assert w.perf_inputs == {}  # only the reference keeps its sets (for the torch.compile baseline)


def test_compile_request_without_sets_says_why() -> None:
    from hackscan.dynamic.worker import perf as perf_hook

    w = FakeWorker()
    reply = perf_hook.run_compile(w, {"options": {}})
    assert reply["compile"] is None and "perf request" in reply["reason"]


def test_prepare_failure_is_kept_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from hackscan.dynamic.worker import perf as perf_hook

    def broken(device: str) -> Any:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(perf_hook, "_PREPARE", broken)
    w = SimpleNamespace(spec={"perf": True}, device="cuda")
    perf_hook.prepare(w)
    assert w.perf_prepared is None and "CUDA driver" in w.perf_prepare_error
