"""Name tables for the C++ side: what ATen calls compute, allocate or only describe; which CUDA
runtime calls create streams, join them, or read device memory back; which types and intrinsics
are reduced precision.

Kept in one place so that a rule's false positive is fixed by editing a table, not a walker.
"""

from __future__ import annotations

import re

# --- ATen / torch C++ ------------------------------------------------------------------------

# namespaces whose free functions are ATen ops (``at::matmul``, ``torch::relu``)
ATEN_NAMESPACES = ("at", "torch", "at::native", "torch::nn::functional", "at::cuda", "c10", "c10::cuda",
                   "at::indexing", "torch::indexing")

# calls that allocate, describe, check or configure: never compute on tensor values
ATEN_ALLOWED = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "tensor", "from_blob", "scalar_tensor",
    "TensorOptions", "dtype", "device", "layout", "requires_grad", "memory_format", "kFloat", "kHalf",
    "TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "AT_ASSERT", "AT_ERROR", "AT_ASSERTM", "TORCH_WARN",
    "getCurrentCUDAStream", "getDefaultCUDAStream", "getStreamFromPool", "getCurrentCUDABlasHandle",
    "getCurrentDeviceProperties", "getDeviceProperties", "current_device", "device_count",
    "CUDAGuard", "OptionalCUDAGuard", "CUDAStreamGuard", "OptionalCUDAStreamGuard", "DeviceGuard",
    "device_of", "getCurrentCUDASparseHandle", "getCurrentCUDASolverDnHandle", "check_size_nonnegative",
    "IntArrayRef", "ArrayRef", "Scalar", "Tensor", "TensorAccessor", "typeMetaToScalarType",
    "toString", "elementSize", "isFloatingType", "isComplexType", "NoGradGuard", "AutoDispatchBelowADInplaceOrView",
    "ceil_div", "divup", "CUDACachingAllocator", "CUDA_KERNEL_ASSERT", "C10_CUDA_KERNEL_LAUNCH_CHECK",
    "C10_CUDA_CHECK", "globalContext", "make_optional", "nullopt", "Slice", "Ellipsis", "None",
    "stream_synchronize", "device_synchronize", "CUDAEvent", "CUDAStream", "getCurrentCUDAStreamRaw",
    # free-function views: no values computed
    "view", "reshape", "transpose", "permute", "flatten", "squeeze", "unsqueeze", "narrow", "select", "slice",
    "expand", "contiguous", "as_strided", "t", "split", "chunk", "unbind", "view_as_real", "view_as_complex",
    "empty_like_strided", "manual_seed", "set_num_threads", "get_num_threads",
    # CPU loop drivers and data movement: no arithmetic of their own
    "parallel_for", "parallel_reduce", "in_parallel_region", "init_num_threads", "get_thread_num",
    "cat", "concat", "concatenate", "stack", "hstack", "vstack", "constant_pad_nd",
})

# tensor methods that only allocate, view, describe or move data around without computing
TENSOR_METHODS_ALLOWED = frozenset({
    "data_ptr", "data", "const_data_ptr", "mutable_data_ptr", "size", "sizes", "stride", "strides", "numel",
    "dim", "ndimension", "dtype", "scalar_type", "options", "device", "is_cuda", "is_contiguous", "contiguous",
    "view", "reshape", "flatten", "unsqueeze", "squeeze", "view_as", "reshape_as", "expand", "expand_as",
    "transpose", "t", "permute", "narrow", "select", "slice", "as_strided", "unflatten", "resize_",
    "accessor", "packed_accessor", "packed_accessor32", "packed_accessor64", "generic_packed_accessor",
    "element_size", "itemsize", "nbytes", "storage_offset", "defined", "is_same", "get_device",
    "new_empty", "new_zeros", "new_ones", "new_full", "empty_like", "type", "layout", "requires_grad",
    "is_floating_point", "is_complex", "suggest_memory_format", "toType", "cuda", "to", "cpu", "clone",
    "copy_", "fill_", "zero_", "item", "index", "index_put_", "template", "value", "has_value",
    "sym_size", "sym_numel", "sym_stride", "unsafeGetTensorImpl", "record_stream", "set_requires_grad",
    "detach", "is_leaf", "name", "str", "toFloat", "toDouble", "toInt", "toLong",
})

# methods that compute on values: flagged when called on a tensor in host code.  The receiver is
# untyped in tree-sitter, so only names no ordinary C++ container or stream offers are listed.
TENSOR_METHODS_COMPUTE = frozenset({
    "mm", "matmul", "bmm", "addmm", "addmm_", "baddbmm", "addbmm", "mv", "dot", "einsum", "linear",
    "conv1d", "conv2d", "conv3d", "conv_transpose2d", "sum", "mean", "prod", "softmax", "log_softmax",
    "relu", "relu_", "gelu", "silu", "sigmoid", "sigmoid_", "tanh", "tanh_", "exp", "exp_", "log", "log_",
    "sqrt", "rsqrt", "pow", "pow_", "abs", "neg", "clamp", "clamp_", "clamp_min", "clamp_max", "max", "min",
    "amax", "amin", "argmax", "argmin", "norm", "var", "std", "cumsum", "cumprod", "topk", "sort",
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "addcmul", "addcdiv", "where",
    "masked_fill", "masked_fill_", "gather", "scatter", "scatter_add", "index_select", "layer_norm",
    "batch_norm", "group_norm", "instance_norm", "max_pool2d", "avg_pool2d", "hardtanh", "leaky_relu",
    "elu", "selu", "softplus", "mish", "hardswish", "logsumexp", "all", "any", "eq", "ne", "gt", "lt",
    "ge", "le", "equal", "allclose", "maximum", "minimum", "triu", "tril", "diag", "round", "floor",
    "ceil", "sign", "reciprocal", "erf", "cos", "sin", "cross", "outer", "kron", "matrix_power",
    "frobenius_norm", "dropout", "embedding", "lerp", "square", "sum_to_size",
})

# ATen ops grouped by what they compute, so ``at::mm`` matches a reference ``torch.matmul``
OP_FAMILIES: tuple[frozenset[str], ...] = (
    frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "dot", "einsum", "linear",
               "tensordot", "gemm", "cublas", "bilinear"}),
    frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "cudnn_convolution",
               "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convtranspose1d",
               "convtranspose2d", "convtranspose3d"}),
    frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "logsumexp"}),
    frozenset({"layer_norm", "layernorm", "native_layer_norm", "group_norm", "groupnorm", "instance_norm",
               "instancenorm1d", "instancenorm2d", "instancenorm3d", "batch_norm", "batchnorm1d", "batchnorm2d",
               "batchnorm3d", "rms_norm", "rmsnorm"}),
    frozenset({"max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
               "maxpool1d", "maxpool2d", "maxpool3d", "avgpool1d", "avgpool2d", "avgpool3d",
               "adaptive_avg_pool2d", "adaptiveavgpool2d"}),
)

# ops heavy enough that calling them from the extension means the extension does the main work
HEAVY_OPS = frozenset().union(*OP_FAMILIES[:2], {"cumsum", "cumprod", "sort", "topk", "lstm", "gru", "rnn",
                                                 "scaled_dot_product_attention", "multi_head_attention_forward"})


def op_base(name: str) -> str:
    """``at::native::matmul`` -> ``matmul``; ``torch.nn.Conv2d`` -> ``conv2d``; ``Tensor.sum`` -> ``sum``."""
    base = _OP_SEPARATOR.split(name)[-1]
    return base.lower().rstrip("_")


_OP_SEPARATOR = re.compile(r"::|\.")  # compiled once: ``op_base`` is asked per call and per op


def same_op(a: str, b: str) -> bool:
    """Does op ``a`` (ATen or torch.*, the candidate's) compute the work of op ``b`` (the reference's)?

    Beyond the ATen groups above, the one table of equivalent ops (``python/equivalents.py``) decides,
    so ``at::addmm`` is the work of an ``nn.Linear`` and ``at::mm`` that of a 1x1 ``nn.Conv2d``."""
    x, y = op_base(a), op_base(b)
    if x == y:
        return True
    if any(x in fam and y in fam for fam in OP_FAMILIES):
        return True
    from ..python.catalog import op_family
    from ..python.equivalents import computes_reference

    return computes_reference(frozenset({op_family(x)}), frozenset({op_family(y)}))


# --- CUDA runtime --------------------------------------------------------------------------------

STREAM_CREATE = frozenset({"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority",
                           "cuStreamCreate", "cuStreamCreateWithPriority"})
STREAM_FROM_POOL = frozenset({"getStreamFromPool", "getStreamFromExternal"})
STREAM_CURRENT = frozenset({"getCurrentCUDAStream", "getDefaultCUDAStream", "current_stream",
                            "getCurrentCUDAStreamRaw"})
# calls that make the host or the current stream wait for other work
STREAM_JOIN = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent",
                         "cudaEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize", "cuStreamWaitEvent",
                         "stream_synchronize", "device_synchronize", "synchronize", "wait", "block",
                         "cudaThreadSynchronize"})

MEMCPY_D2H = re.compile(r"cudaMemcpy(Async)?|cuMemcpyDtoH(Async)?")

THREAD_CALLS = frozenset({"std::thread", "std::async", "pthread_create", "std::jthread", "thread", "async",
                          "jthread"})

DYNAMIC_LOAD = frozenset({"dlopen", "dlsym", "dlmopen", "dlvsym"})
PROCESS_CALLS = frozenset({"system", "popen", "execv", "execve", "execvp", "execl", "execlp", "fork", "vfork",
                           "posix_spawn", "std::system"})
ENV_READS = frozenset({"getenv", "std::getenv", "secure_getenv", "__secure_getenv"})

# symbols a harness relies on for timing, synchronisation or launching: defining one interposes it
_TIMING_API = re.compile(
    r"^(cuda[A-Z]\w*|cu[A-Z]\w*|nvtx\w+|cupti\w+|clock_gettime|gettimeofday|__cudaRegister\w*|"
    r"__cudaPushCallConfiguration|__cudaPopCallConfiguration|dlsym|dlopen)$")


def is_cuda_api_name(name: str) -> bool:
    """Shaped like a CUDA runtime / driver / profiler name (``cudaCheck`` too: use with C linkage only)."""
    return bool(_TIMING_API.match(name))


# functions a harness calls to time, synchronise, launch or allocate: defining one interposes it
HARNESS_API = frozenset({
    "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventRecord", "cudaEventRecordWithFlags",
    "cudaEventSynchronize", "cudaEventElapsedTime", "cudaEventQuery", "cudaEventDestroy",
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaStreamQuery", "cudaStreamWaitEvent",
    "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaStreamBeginCapture",
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
    "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync", "cudaMalloc", "cudaFree",
    "cudaMallocAsync", "cudaFreeAsync", "cudaGetLastError", "cudaPeekAtLastError", "cudaDeviceReset",
    "cudaProfilerStart", "cudaProfilerStop", "cudaGetDevice", "cudaSetDevice", "cudaThreadSynchronize",
    "cuEventElapsedTime", "cuEventRecord", "cuEventSynchronize", "cuCtxSynchronize", "cuStreamSynchronize",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemAlloc", "cuMemFree",
    "__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "__cudaRegisterFunction", "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary", "__cudaLaunch",
    "clock_gettime", "gettimeofday", "clock", "time", "timespec_get", "rdtsc", "__rdtsc",
    "cuptiActivityEnable", "cuptiSubscribe", "nvtxRangePushA", "nvtxRangePop",
})


# --- precision -----------------------------------------------------------------------------------

HALF_TYPES = frozenset({"half", "__half", "half2", "__half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16",
                        "nv_bfloat162", "at::Half", "c10::Half", "at::BFloat16", "c10::BFloat16", "__nv_fp8_e4m3",
                        "__nv_fp8_e5m2"})
# float -> reduced precision conversions: the sign that fp32 values are being narrowed
TO_HALF = frozenset({"__float2half", "__float2half_rn", "__float2half_rz", "__float2half_rd", "__float2half_ru",
                     "__floats2half2_rn", "__float22half2_rn", "__float2half2_rn", "__float2bfloat16",
                     "__float2bfloat16_rn", "__floats2bfloat162_rn", "__float22bfloat162_rn", "__float2bfloat162_rn",
                     "__float_to_tf32", "__float2tf32"})
HALF_MATH = frozenset({"__hadd", "__hsub", "__hmul", "__hdiv", "__hfma", "__hadd2", "__hsub2", "__hmul2", "__h2div",
                       "__hfma2", "hexp", "hexp2", "hlog", "hsqrt", "hrsqrt", "h2exp", "h2log", "h2sqrt", "__hmax",
                       "__hmin", "__hmax2", "__hmin2", "__hneg", "__habs", "__hfma_relu", "hrcp", "htanh",
                       "mma_sync", "load_matrix_sync", "store_matrix_sync"})
HOST_HALF_DTYPES = frozenset({"kHalf", "kFloat16", "kBFloat16", "Half", "BFloat16"})
TF32_CONTROLS = frozenset({"setAllowTF32CuBLAS", "setAllowTF32CuDNN", "setFloat32MatmulPrecision",
                           "setAllowFP16ReductionCuBLAS", "setAllowBF16ReductionCuBLAS"})
FAST_MATH_FLAGS = ("--use_fast_math", "-use_fast_math", "-ffast-math", "--ftz=true", "-ftz=true",
                   "--prec-div=false", "-prec-div=false", "--prec-sqrt=false", "-prec-sqrt=false",
                   "-Ofast")

# names that say a number is a launch/tiling parameter, not a problem size
TILE_NAME = re.compile(
    r"(BLOCK|TILE|THREAD|WARP|LANE|TB|BM|BN|BK|TM|TN|TK|WM|WN|WK|UNROLL|VEC|PACK|ITEM|STAGE|PIPE|CHUNK|SMEM|"
    r"SHARED|PAD|ALIGN|GRID|SPLIT|PER_|_PER|NUM_WARPS|WAVE|MMA|WMMA|FRAG|CTA|SUB|STEP|STRIDE|BATCH_TILE|"
    r"ELEMS|ELEMENTS_PER|LOAD|CACHE|BANK|MAX_THREADS|MIN_BLOCKS|WIDTH_PER|RADIX|BUCKET|SEGMENT|ROWS_PER|COLS_PER)",
    re.I)


# --- classification used by rules and by the graph (kept here: importing the graph pulls networkx) ---

def aten_name(call_name: str) -> str | None:
    """The ``aten:`` node for a call, or None when it is not an ATen / torch call."""
    if call_name.startswith("."):
        method = call_name[1:]
        if method in TENSOR_METHODS_COMPUTE or method in TENSOR_METHODS_ALLOWED:
            return f"aten:Tensor.{method}"
        return None
    ns = call_name.rsplit("::", 1)[0] if "::" in call_name else ""
    if ns.split("::")[0] in ("at", "torch", "c10"):
        return f"aten:{call_name}"
    return None


def is_compute(call_name: str) -> bool:
    """Does an ATen call compute on tensor values (as opposed to allocate, view, check)?"""
    if call_name.startswith("."):
        return call_name[1:] in TENSOR_METHODS_COMPUTE
    parts = call_name.split("::")
    base = parts[-1]
    if parts[0] not in ("at", "torch") or len(parts) < 2:
        return False
    if len(parts) >= 4 and parts[1] == "_ops" and base in ("call", "redispatch"):
        # ``at::_ops::empty_memory_format::call``: the registry entry of ``at::empty``; the op is
        # the entry's name, or a prefix of it before the overload (``sum`` of ``sum_dim_IntList``)
        tokens = parts[2].split("_")
        ops = {"_".join(tokens[:i]) for i in range(1, len(tokens) + 1)}
        return not any(o in ATEN_ALLOWED or o in TENSOR_METHODS_ALLOWED for o in ops)
    if base in ATEN_ALLOWED or base in TENSOR_METHODS_ALLOWED:
        return False
    if any(p in ("cuda", "indexing", "jit", "detail") for p in parts[1:-1]):
        return False
    # types (torch::Tensor, TensorOptions) and enum values (torch::kFloat32) are not ops
    return not (base[:1].isupper() or (base[:1] == "k" and base[1:2].isupper()))
