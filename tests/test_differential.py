"""The differential checks' worker side, in this process: the shared-state snapshot (HS509) tells a
replacement from legitimate imports, custom ops of one's own namespace and torch's own lazy
wrapping; every process condition (HS414) is undone after its call."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from hackscan.dynamic.environments import conditions_for, describe  # noqa: E402
from hackscan.dynamic.worker.conditions import call_under  # noqa: E402
from hackscan.dynamic.worker.world import World  # noqa: E402


def _names(changes):
    return {c["name"] for c in changes}


def test_legitimate_imports_and_an_own_namespace_op_change_nothing() -> None:
    world = World()
    import torch.utils.cpp_extension  # noqa: F401
    warnings.filterwarnings("ignore", message="hackscan-test")

    @torch.library.custom_op("hackscan_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert double(torch.ones(2)).tolist() == [2.0, 2.0]
    assert world.changes() == []


def test_replaced_functions_shadowed_methods_and_hooks_are_changes() -> None:
    world = World()
    saved_relu, saved_signal = torch.nn.functional.relu, None
    import signal

    saved_signal = signal.getsignal(signal.SIGUSR2)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        torch.nn.functional.relu = lambda x, inplace=False: x
        torch.Tensor.square = lambda self: self * self
        signal.signal(signal.SIGUSR2, lambda *a: None)
        names = _names(world.changes())
    finally:
        torch.nn.functional.relu = saved_relu
        del torch.Tensor.square
        signal.signal(signal.SIGUSR2, saved_signal)
        handle.remove()
    assert {"torch.nn.functional.relu", "torch.Tensor.square", "signal handler SIGUSR2",
            "torch.nn.modules.module._global_forward_hooks"} <= names
    assert world.changes() == []  # all put back: nothing left


def test_a_python_kernel_over_an_aten_operator_is_a_change() -> None:
    world = World()
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("sinh", lambda x: x, "CPU")
        assert any(n.startswith("torch.library kernel aten/sinh") for n in _names(world.changes()))
    finally:
        lib._destroy()


@pytest.mark.parametrize("cond", conditions_for(7, device="cuda", modes=True), ids=lambda c: c["name"])
def test_every_condition_is_undone_and_keeps_the_result(cond) -> None:
    # the GPU-only conditions (``stream``, ``graph``) are the plain call on CPU tensors
    before = (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.get_num_threads(),
              torch.are_deterministic_algorithms_enabled())
    x = torch.randn(4, 5)
    rng = torch.get_rng_state()
    out = call_under(cond, lambda m, a: m(*a), torch.nn.ReLU(), [x], "cpu")
    assert torch.equal(out, torch.relu(x))
    assert (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.get_num_threads(),
            torch.are_deterministic_algorithms_enabled()) == before
    assert torch.equal(torch.get_rng_state(), rng)
    assert describe(cond) and "{" not in describe(cond)


def test_the_stream_and_graph_conditions_are_drawn_for_a_gpu_only() -> None:
    cpu, gpu = conditions_for(7), conditions_for(7, device="cuda")
    assert {c["name"] for c in gpu} - {c["name"] for c in cpu} == {"stream", "graph"}
    assert not {"stream", "graph"} & {c["name"] for c in cpu}
    assert gpu[-1]["name"] == "inference"  # still last
    # the run's seed replays them
    assert gpu == conditions_for(7, device="cuda")


def test_eval_mode_is_a_condition_only_where_the_reference_ignores_the_mode() -> None:
    from hackscan.dynamic.environments import mode_free

    assert mode_free("class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n")
    for dependent in ("self.drop = nn.Dropout(0.1)", "nn.BatchNorm2d(c)", "if self.training:", "F.dropout(x, p)",
                      "nn.LSTM(8, 8)", "m.eval()"):
        assert not mode_free(dependent), dependent
    assert not mode_free("")
    names = [c["name"] for c in conditions_for(7, modes=True)]
    assert "eval" in names and "eval" not in [c["name"] for c in conditions_for(7)]
    model = torch.nn.ReLU()
    call_under({"name": "eval"}, lambda m, a: m(*a), model, [torch.randn(3)], "cpu")
    assert model.training  # put back as it was


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_kernel_on_an_unordered_stream_reads_the_inputs_unwritten() -> None:
    x = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()

    def unordered(m, a):
        with torch.cuda.stream(side):
            return torch.relu(a[0])

    cond = next(c for c in conditions_for(7, device="cuda") if c["name"] == "stream")
    honest = call_under(cond, lambda m, a: torch.relu(a[0]), None, [x], "cuda")
    raced = call_under(cond, unordered, None, [x], "cuda")
    torch.cuda.synchronize()
    assert torch.equal(honest, torch.relu(x))
    assert torch.isnan(raced).any()


def test_torch_compiles_own_lazy_patching_is_not_a_change() -> None:
    # torch._dynamo wraps torch.manual_seed, nn.Module.__init__ and optimizers' methods when it
    # loads, and inductor defines new prims with Python kernels: torch's own, reaching the originals
    world = World()
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager")
    with torch.no_grad():
        model(torch.randn(2, 4))
    assert world.changes() == []
