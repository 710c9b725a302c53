"""CUDA/C++ facts: functions, exports, launches, calls, constants, stores, origins, positions."""

from __future__ import annotations

import textwrap
import threading

import pytest

from hackscan.cuda.branches import tainted_names, value_reads
from hackscan.cuda.builder import build_cuda_facts
from hackscan.cuda.flow import CudaFlow
from hackscan.python.module import HostModule
from hackscan.units import MappedText, Unit


def unit(text: str, uid: str = "ext:cuda", ext: str = "ext", functions=None, language: str = "cuda") -> Unit:
    return Unit(id=uid, language=language, mapped=MappedText.verbatim(textwrap.dedent(text), 1, 0),
                role="cuda_sources", extension=ext, attrs={"functions": functions, "flags": {}})


EXT = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define BLOCK 256
#define TOTAL (BLOCK * 4)
constexpr int TILE = TOTAL / 32;

template <typename scalar_t>
__device__ __forceinline__ void put(scalar_t* dst, int i, scalar_t v) { dst[i] = v; }

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) put(y, i, x[i] * s);
}

__global__ void sum_kernel(const float* __restrict__ x, float* out, int n) {
    float* target = out + 1;
    float v = x[threadIdx.x];
    atomicAdd(target, v);
}

static void launch(const float* x, float* y, int n, cudaStream_t stream) {
    scale_kernel<float><<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, 2.f, n);
}

torch::Tensor forward(torch::Tensor x) {
    const int local_k = 12;
    auto y = torch::empty_like(x);
    launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fwd", ([&] {
        scale_kernel<scalar_t><<<1, BLOCK>>>(x.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), 1.f, local_k);
    }));
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "forward");
    m.def("twice", [](torch::Tensor t) { return t; });
}
"""


@pytest.fixture(scope="module")
def facts():
    return build_cuda_facts([unit(EXT)])


def test_functions_kinds_and_params(facts) -> None:
    kinds = {f.name: f.kind for f in facts.functions}
    assert kinds["scale_kernel"] == "kernel"
    assert kinds["put"] == "device"
    assert kinds["forward"] == "host"
    assert kinds["launch"] == "host"
    k = facts.ext("ext").kernel("scale_kernel")
    assert [p.name for p in k.params] == ["x", "y", "s", "n"]
    assert k.params[0].pointer and k.params[0].const
    assert k.params[1].pointer and not k.params[1].const
    assert not k.params[2].pointer
    fwd = facts.ext("ext").lookup("forward", "host")[0]
    assert fwd.params[0].tensor and fwd.template is False and k.template is True


def test_exports_from_pybind_including_lambdas(facts) -> None:
    exports = {e.name: e for e in facts.exports}
    assert exports["forward"].target == "forward" and exports["forward"].via == "pybind"
    assert exports["twice"].target == "<lambda twice>"
    assert facts.ext("ext").lookup("<lambda twice>")[0].lambda_export == "twice"
    assert {e.node_name for e in facts.exports} == {"export:ext.forward", "export:ext.twice"}


def test_exports_from_functions_attr_span_units() -> None:
    cpp = unit("torch::Tensor run(torch::Tensor x);", uid="e:cpp", ext="e", functions=("run",), language="cpp")
    cu = unit("torch::Tensor run(torch::Tensor x) { return x; }", uid="e:cuda", ext="e", functions=("run",))
    f = build_cuda_facts([cpp, cu])
    assert [e.name for e in f.exports] == ["run"]
    (export, fn), = f.exported_functions()
    assert fn.unit.id == "e:cuda"


def test_launches_with_configuration_and_enclosing_function(facts) -> None:
    launches = {(lc.function.name, lc.kernel): lc for lc in facts.launches}
    lc = launches[("launch", "scale_kernel")]
    assert lc.grid.text.decode() == "(n + BLOCK - 1) / BLOCK"
    assert lc.block.text.decode() == "BLOCK"
    assert lc.stream.text.decode() == "stream"
    assert len(lc.args) == 4
    # the launch inside the AT_DISPATCH lambda belongs to forward
    assert ("forward", "scale_kernel") in launches
    assert launches[("forward", "scale_kernel")].stream is None


def test_cuda_launch_kernel_api_is_a_launch() -> None:
    f = build_cuda_facts([unit("""
        __global__ void k(float* y) { y[0] = 1.f; }
        void go(float* y, cudaStream_t s) {
            void* args[] = {&y};
            cudaLaunchKernel((const void*)k, dim3(1), dim3(32), args, 0, s);
        }
    """)])
    (lc,) = f.launches
    assert lc.kernel == "k" and lc.api == "cudaLaunchKernel" and lc.stream.text == b"s"


def test_constants_fold_through_other_constants(facts) -> None:
    x = facts.ext("ext")
    assert x.constants["BLOCK"].value == 256
    assert x.constants["TOTAL"].value == 1024
    assert x.constants["TILE"].value == 32
    assert x.constants["TILE"].kind == "constexpr"
    assert x.local_constants["forward"]["local_k"].value == 12
    assert x.env_for("forward")["local_k"] == 12
    assert "local_k" not in x.env_for("launch")


def test_calls_are_qualified_and_methods_marked(facts) -> None:
    names = {c.name for c in facts.calls}
    assert "torch::empty_like" in names
    assert "at::cuda::getCurrentCUDAStream" in names
    assert ".data_ptr" in names
    data_ptr = next(c for c in facts.calls if c.name == ".data_ptr")
    assert data_ptr.is_method and data_ptr.receiver is not None and data_ptr.base == "data_ptr"


def test_stores_follow_helpers_aliases_and_atomics(facts) -> None:
    flow = CudaFlow(facts)
    scale = facts.ext("ext").kernel("scale_kernel")
    st = flow.stores(scale)
    assert set(st.by_param) == {1}  # y through the put() helper; x is only read
    assert st.by_param[1][0].how == "call:put"
    total = facts.ext("ext").kernel("sum_kernel")
    st = flow.stores(total)
    assert set(st.by_param) == {1}  # out through the alias target, by atomicAdd
    assert st.by_param[1][0].how == "atomic"


def test_value_loads_are_not_aliases() -> None:
    f = build_cuda_facts([unit("""
        __global__ void k(const float* x, float* y, int n) {
            float v = x[threadIdx.x];
            float w = expf(x[threadIdx.x] - v);
            y[threadIdx.x] = w;
        }
    """)])
    k = f.kernels[0]
    assert CudaFlow(f).aliases(k) == {"x": 0, "y": 1}
    assert set(CudaFlow(f).stores(k).by_param) == {1}


def test_origins_trace_allocations_inputs_and_helper_parameters(facts) -> None:
    flow = CudaFlow(facts)
    launch_fn = facts.ext("ext").lookup("launch", "host")[0]
    (lc,) = [lc for lc in launch_fn.launches]
    y_origins = flow.origins(lc.args[1], launch_fn)
    assert [(o.kind, o.detail) for o in y_origins] == [("alloc", "empty_like")]
    x_origins = flow.origins(lc.args[0], launch_fn)
    assert [(o.kind, o.detail, o.index) for o in x_origins] == [("input", "x", 0)]
    stored = flow.stored_origins(lc)
    assert [(i, o.kind) for i, o, _ in stored] == [(1, "alloc")]
    # the dispatch launch writes through x: an input of the export
    fwd = facts.ext("ext").lookup("forward", "host")[0]
    dispatch = [lc for lc in fwd.launches][0]
    assert {o.kind for _, o, _ in flow.stored_origins(dispatch)} == {"input"}


def test_launches_from_follows_host_helpers(facts) -> None:
    fwd = facts.ext("ext").lookup("forward", "host")[0]
    kernels = sorted(lc.function.name for lc in CudaFlow(facts).launches_from(fwd))
    assert kernels == ["forward", "launch"]


def test_value_reads_and_taint() -> None:
    f = build_cuda_facts([unit("""
        torch::Tensor g(torch::Tensor x) {
            float lo = x.min().item<float>();
            bool pos = lo >= 0.f;
            float host_copy;
            cudaMemcpy(&host_copy, x.data_ptr<float>(), sizeof(float), cudaMemcpyDeviceToHost);
            int n = x.numel();
            return x;
        }
    """)])
    fn = f.functions[0]
    reads = value_reads(fn)
    assert len(reads) == 2
    tainted = tainted_names(fn, [r.node for r in reads])
    assert {"lo", "pos", "host_copy"} <= tainted
    assert "n" not in tainted


def test_macro_expanded_call_names() -> None:
    f = build_cuda_facts([unit("""
        #define RT(x) cuda##x
        #define SYNC() cudaSuccess
        void go() {
            cudaStream_t s;
            RT(StreamCreate)(&s);
            SYNC();
        }
    """)])
    names = {(c.name, c.macro) for c in f.calls}
    assert ("cudaStreamCreate", "RT(StreamCreate)") in names
    assert ("cudaSuccess", "SYNC") in names


def test_parse_errors_are_facts_not_crashes() -> None:
    f = build_cuda_facts([unit("""
        __global__ void k(float* y) {
            extern __shared__ __align__(sizeof(float)) unsigned char smem[];
            y[0] = 1.f;
        }
    """)])
    assert len(f.parse_errors) >= 1
    assert f.parse_errors[0].pos.line == 3


def test_positions_map_to_the_host_file() -> None:
    src = textwrap.dedent('''
        from torch.utils.cpp_extension import load_inline
        head = "#include <torch/extension.h>\\n"
        body = """
        __global__ void k(float* y, int n) {
            y[threadIdx.x] = 0.f;
        }
        torch::Tensor run(torch::Tensor x) {
            k<<<1, 32>>>(x.data_ptr<float>(), 1);
            return x;
        }
        """
        ext = load_inline(name="p", cpp_sources="", cuda_sources=head + body, functions=["run"])
    ''')
    host = HostModule.parse(src)
    f = build_cuda_facts([u for u in host.units if u.language in ("cuda", "cpp")])
    (lc,) = f.launches
    line = src.splitlines()[lc.pos.line - 1]
    assert line.strip().startswith("k<<<1, 32>>>")
    assert lc.pos.column == line.index("k<<<") + 1
    assert f.exports[0].name == "run"


def test_facts_build_in_parallel_threads() -> None:
    results: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                results.append(len(build_cuda_facts([unit(EXT)]).launches))
        except BaseException as exc:  # pragma: no cover - the failure is the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [2] * 20


def test_unknown_entry_points_make_every_host_function_reachable() -> None:
    f = build_cuda_facts([unit("""
        __global__ void k(float* y) { y[0] = 0.f; }
        void a(float* y) { k<<<1, 1>>>(y); }
        void b() {}
    """, functions=None)])
    assert {fn.name for fn in f.reachable} == {"a", "b", "k"}
