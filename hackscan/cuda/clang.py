"""An optional deeper pass with libclang: macro expansion, constant folding, token pasting.

tree-sitter sees the text as written; a hack can hide behind the preprocessor (``#define S(x)
cuda##x`` then ``S(StreamCreate)(&s)``) or behind constant expressions the light folder in
``consts.py`` does not follow (templates, ``sizeof`` of structs, ``constexpr`` functions).
libclang expands and evaluates them.  It parses CUDA only with the CUDA and torch headers
available, which a scanning machine does not have: every ``#include`` is blanked out (keeping the
line numbers) and one stub header, passed with ``-include``, declares the little the rules need
(CUDA built-ins and execution-space attributes, launch configuration, a permissive
``torch::Tensor``).  Whatever the stubs miss becomes a diagnostic, and clang's error recovery keeps
the rest of the tree.

Never on the fast path (7-20 ms per unit, against about 1 ms for all the tree-sitter facts), never
a hard failure: ``available()`` says whether the ``libclang`` package loads, and every entry point
returns an empty result when it does not.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from ..units import Pos, Unit

VIRTUAL_DIR = "/__hackscan__"
STUB_PATH = f"{VIRTUAL_DIR}/hackscan_cuda_stub.h"

STUB = r"""
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define TORCH_EXTENSION_NAME hackscan_ext
#define PYBIND11_MODULE(name, m) void hackscan_pybind_module(hackscan_module& m)
#define TORCH_CHECK(...) ((void)0)
#define TORCH_INTERNAL_ASSERT(...) ((void)0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() ((void)0)
#define C10_CUDA_CHECK(x) ((void)(x))
#define AT_DISPATCH_FLOATING_TYPES(TYPE, NAME, ...) [&] { using scalar_t = float; return __VA_ARGS__(); }()
#define AT_DISPATCH_FLOATING_TYPES_AND_HALF(TYPE, NAME, ...) [&] { using scalar_t = float; return __VA_ARGS__(); }()
#define AT_DISPATCH_FLOATING_TYPES_AND2(A, B, TYPE, NAME, ...) [&] { using scalar_t = float; return __VA_ARGS__(); }()
#define AT_DISPATCH_ALL_TYPES(TYPE, NAME, ...) [&] { using scalar_t = float; return __VA_ARGS__(); }()
typedef unsigned long size_t;
typedef long int64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef unsigned long uintptr_t;
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern const uint3 threadIdx;
extern const uint3 blockIdx;
extern const dim3 blockDim;
extern const dim3 gridDim;
extern const int warpSize;
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct int4 { int x, y, z, w; };
struct __half { unsigned short x; };
typedef __half half;
struct __half2 { __half x, y; };
typedef __half2 half2;
struct __nv_bfloat16 { unsigned short x; };
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef int cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
static const cudaError_t cudaSuccess = 0;
extern "C" {
cudaError_t __cudaPushCallConfiguration(dim3, dim3, size_t = 0, cudaStream_t = 0);
cudaError_t cudaStreamCreate(cudaStream_t*);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventCreate(cudaEvent_t*);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t);
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t = 0);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaGetLastError(void);
const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaFuncSetAttribute(const void*, int, int);
void* dlopen(const char*, int);
void* dlsym(void*, const char*);
int system(const char*);
char* getenv(const char*);
void __syncthreads(void);
float __expf(float); float expf(float); float logf(float); float fmaxf(float, float); float fminf(float, float);
float sqrtf(float); float tanhf(float); float fabsf(float); float rsqrtf(float);
}
template <class T> T atomicAdd(T*, T);
template <class T> T __shfl_down_sync(unsigned, T, int, int = 32);
template <class T> T __shfl_xor_sync(unsigned, T, int, int = 32);
template <class T> T __ldg(const T*);
__half __float2half(float); float __half2float(__half);
__half __hadd(__half, __half); __half __hmul(__half, __half); __half __hfma(__half, __half, __half);
namespace std {
template <class T> const T& min(const T& a, const T& b);
template <class T> const T& max(const T& a, const T& b);
template <class T> struct vector { T* data(); size_t size() const; T& operator[](size_t); void push_back(const T&);
  template <class... A> void emplace_back(A&&...); T* begin(); T* end(); };
struct thread { template <class F, class... A> explicit thread(F&&, A&&...); void join(); void detach(); bool joinable(); };
template <class F, class... A> int async(F&&, A&&...);
char* getenv(const char*);
int system(const char*);
}
namespace c10 {
enum class ScalarType { Float, Half, BFloat16, Double, Int, Long };
struct Half {}; struct BFloat16 {};
struct TensorOptions { TensorOptions dtype(ScalarType) const; template <class T> TensorOptions device(T) const; };
namespace cuda { struct CUDAStream { cudaStream_t stream() const; operator cudaStream_t() const; };
  CUDAStream getCurrentCUDAStream(int = -1); CUDAStream getDefaultCUDAStream(int = -1);
  CUDAStream getStreamFromPool(bool = false, int = -1);
  struct CUDAStreamGuard { explicit CUDAStreamGuard(CUDAStream); };
  struct OptionalCUDAGuard { template <class T> explicit OptionalCUDAGuard(T); }; }
}
namespace at {
using c10::ScalarType; using c10::Half; using c10::BFloat16; using c10::TensorOptions;
constexpr ScalarType kFloat = ScalarType::Float; constexpr ScalarType kHalf = ScalarType::Half;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
struct Tensor {
  template <class T = void> T* data_ptr() const;
  long size(long) const; long numel() const; long dim() const; long stride(long) const;
  TensorOptions options() const; ScalarType scalar_type() const; bool is_cuda() const; bool defined() const;
  Tensor contiguous() const; Tensor clone() const; template <class... A> Tensor view(A...) const;
  template <class T> T item() const; template <class... A> Tensor to(A...) const;
  template <class... A> Tensor mm(A...) const; template <class... A> Tensor sum(A...) const;
};
template <class... A> Tensor empty(A...); template <class... A> Tensor empty_like(A...);
template <class... A> Tensor zeros(A...); template <class... A> Tensor zeros_like(A...);
template <class... A> Tensor matmul(A...); template <class... A> Tensor mm(A...);
namespace cuda { using c10::cuda::CUDAStream; using c10::cuda::getCurrentCUDAStream;
  using c10::cuda::getDefaultCUDAStream; using c10::cuda::getStreamFromPool; }
}
namespace torch { using namespace at; using at::Tensor; }
struct hackscan_module { template <class... A> hackscan_module& def(A&&...); };
"""

# calls clang adds on its own: a launch becomes __cudaPushCallConfiguration(dim3(grid), dim3(block))
_IMPLICIT = frozenset({"__cudaPushCallConfiguration", "dim3"})
_INCLUDE = re.compile(rb"^[ \t]*#[ \t]*include\b[^\n]*", re.M)
_local = threading.local()


@functools.lru_cache(maxsize=1)
def _cindex() -> Any | None:
    try:
        import clang.cindex as ci

        ci.Index.create()  # loads the shared library: fails here when it is missing
    except Exception:  # ImportError, LibclangError, OSError: all mean "not available"
        return None
    lib = ci.conf.lib
    try:
        lib.clang_Cursor_Evaluate.argtypes = [ci.Cursor]
        lib.clang_Cursor_Evaluate.restype = ctypes.c_void_p
        lib.clang_EvalResult_getKind.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_getKind.restype = ctypes.c_int
        lib.clang_EvalResult_getAsLongLong.argtypes = [ctypes.c_void_p]
        lib.clang_EvalResult_getAsLongLong.restype = ctypes.c_longlong
        lib.clang_EvalResult_dispose.argtypes = [ctypes.c_void_p]
    except AttributeError:
        pass
    return ci


def available() -> bool:
    """Does libclang load in this process?"""
    return _cindex() is not None


# every Index created, so that they are disposed of at exit while libclang is still loaded
# (their __del__ would otherwise run during interpreter teardown and raise)
_indices: list[Any] = []
_indices_lock = threading.Lock()


def _index() -> Any:
    idx = getattr(_local, "index", None)
    if idx is None:
        idx = _local.index = _cindex().Index.create()  # type: ignore[union-attr]
        with _indices_lock:
            if not _indices:
                atexit.register(_dispose)
            _indices.append(idx)
    return idx


class _Disposed:
    def __del__(self) -> None:  # already released
        pass


def _dispose() -> None:
    with _indices_lock:
        for idx in _indices:
            try:
                idx.__del__()
            except Exception:
                pass
            idx.__class__ = _Disposed
        _indices.clear()


@dataclass
class ClangUnit:
    """One unit parsed by libclang, with what the deep pass extracts from it."""

    unit: Unit
    # (callee name, byte offset in the unit) of every call after preprocessing
    calls: list[tuple[str, int]] = field(default_factory=list)
    # integer constants by name: constexpr / const variables as clang folds them
    constants: dict[str, int] = field(default_factory=dict)
    diagnostics: int = 0

    def pasted_calls(self) -> list[tuple[str, int]]:
        """Calls whose callee name appears nowhere in the source: built by the preprocessor."""
        text = self.unit.text
        seen: set[str] = set()
        out = []
        for name, off in self.calls:
            if name in seen:
                continue
            seen.add(name)
            if not re.fullmatch(r"[A-Za-z_]\w*", name) or name.startswith("operator") or name in _IMPLICIT:
                continue  # operator calls, conversions, the lowering of <<<...>>>
            if not re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text):
                out.append((name, off))
        return out


def parse_unit(unit: Unit) -> ClangUnit | None:
    """Parse one CUDA / C++ unit with the stub header; None when libclang is unavailable."""
    ci = _cindex()
    if ci is None:
        return None
    raw = unit.text.encode("utf-8")
    # blank includes byte for byte so that offsets and lines stay those of the unit
    cleaned = _INCLUDE.sub(lambda m: b" " * len(m.group(0)), raw)
    path = f"{VIRTUAL_DIR}/unit.cu"
    args = ["-x", "cuda", "--cuda-host-only", "-nocudainc", "-nocudalib", "-std=c++17", "-include", STUB_PATH,
            "-Wno-everything", "-ferror-limit=0"]
    try:
        tu = _index().parse(path, args=args, unsaved_files=[(path, cleaned), (STUB_PATH, STUB.encode())])
    except ci.TranslationUnitLoadError:
        return None
    out = ClangUnit(unit, diagnostics=len(tu.diagnostics))
    # only the unit's own top-level declarations: the stub's are hundreds of cursors
    stack = [c for c in tu.cursor.get_children() if c.location.file is not None and c.location.file.name == path]
    call_kind, var_kind = ci.CursorKind.CALL_EXPR, ci.CursorKind.VAR_DECL
    while stack:
        c = stack.pop()
        kind = c.kind
        if kind == call_kind:
            name = c.spelling
            if name:
                out.calls.append((name, c.location.offset))
        elif kind == var_kind:
            value = _evaluate(ci, c)
            if value is not None:
                out.constants[c.spelling] = value
        stack.extend(c.get_children())
    return out


def _evaluate(ci: Any, cursor: Any) -> int | None:
    lib = ci.conf.lib
    try:
        res = lib.clang_Cursor_Evaluate(cursor)
    except Exception:
        return None
    if not res:
        return None
    try:
        if lib.clang_EvalResult_getKind(res) == 1:  # CXEval_Int
            return int(lib.clang_EvalResult_getAsLongLong(res))
        return None
    finally:
        lib.clang_EvalResult_dispose(res)


def pasted_api_calls(unit: Unit) -> list[tuple[str, Pos]]:
    """Calls of CUDA / system API names that only exist after token pasting, with host positions."""
    from . import names

    parsed = parse_unit(unit)
    if parsed is None:
        return []
    out = []
    for name, off in parsed.pasted_calls():
        if names.is_cuda_api_name(name) or name in names.HARNESS_API or name in names.DYNAMIC_LOAD or \
                name in names.PROCESS_CALLS:
            line, col = unit.byte_position(off)
            out.append((name, Pos(line, col + 1, unit.id, unit.attrs.get("file"))))  # type: ignore[arg-type]
    return out


def deep_constants(unit: Unit) -> dict[str, int]:
    """Integer constants of a unit as clang folds them (``constexpr``, ``const``), empty without libclang."""
    parsed = parse_unit(unit)
    return dict(parsed.constants) if parsed is not None else {}


__all__ = ["available", "parse_unit", "pasted_api_calls", "deep_constants", "ClangUnit", "STUB"]
