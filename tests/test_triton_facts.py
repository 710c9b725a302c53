"""TritonFacts: what the HS3xx rules rely on, checked on small kernels (no triton install needed)."""

from __future__ import annotations

import pytest

from hackscan.python.module import HostModule
from hackscan.triton.facts import build_triton_facts

MATMUL = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK_K": 32}), triton.Config({"BLOCK_K": 32})], key=["K"])
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0).to(tl.float16)
        b = tl.load(b_ptrs)
        acc += tl.dot(a, b, allow_tf32=False)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=offs_m[:, None] < M)


class ModelNew(torch.nn.Module):
    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device)
        a = A.contiguous()
        mm_kernel[(triton.cdiv(M, 64),)](a, B, C, M, N, K, a.stride(0), a.stride(1), B.stride(0), B.stride(1),
                                         BLOCK_M=64, BLOCK_N=64)
        return C
'''


@pytest.fixture(scope="module")
def mm():
    host = HostModule.parse(MATMUL, "mm.py")
    return build_triton_facts(host)


def test_parameters_are_classified(mm) -> None:
    k = mm.kernels["mm_kernel"]
    assert k.pointer_params == ("a_ptr", "b_ptr", "c_ptr")
    assert set(k.constexpr_params) == {"BLOCK_M", "BLOCK_N", "BLOCK_K"}
    assert "stride_am" in k.scalar_params and "K" in k.scalar_params
    assert k.autotune_values == {"BLOCK_K": {32}}
    assert k.constexpr_value("BLOCK_K") == 32  # one value across every autotune config


def test_loads_and_stores_know_their_pointer_and_mask(mm) -> None:
    k = mm.kernels["mm_kernel"]
    by_line = {a.node.lineno: a for a in k.accesses}
    a_load = next(a for a in k.loads if "a_ptr" in a.pointers)
    b_load = next(a for a in k.loads if "b_ptr" in a.pointers)
    assert a_load.masked and not b_load.masked
    assert a_load.loop is not None  # inside the K loop
    assert {x.end for x in a_load.aranges} == {"BLOCK_M", "BLOCK_K"}
    (store,) = k.stores
    assert store.pointers == frozenset({"c_ptr"}) and store.masked
    assert k.stores_to("c_ptr") == [store] and k.stores_to("a_ptr") == []
    assert len(by_line) == 3


def test_loops_dots_and_casts(mm) -> None:
    k = mm.kernels["mm_kernel"]
    (loop,) = k.loops
    assert loop.var == "k" and loop.step_value is None and loop.step.id == "BLOCK_K"
    (dot,) = k.dots
    assert dot.allow_tf32 is False and dot.operand_casts == ("float16", None)
    (cast,) = k.casts
    assert cast.dtype == "float16" and cast.value_derived
    assert len(k.program_ids) == 1


def test_launch_arguments_are_mapped_and_classified(mm) -> None:
    (launch,) = mm.launches
    assert launch.kernel == "mm_kernel" and launch.function.name == "forward"
    src = {a.param: a.source for a in launch.args}
    assert src["a_ptr"] == "forward-input"  # a = A.contiguous() is a view of the input
    assert src["b_ptr"] == "forward-input"
    assert src["c_ptr"] == "allocation" and launch.arg_for("c_ptr").detail == "torch.empty"
    assert src["stride_am"] == "metadata"
    assert launch.constexprs == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert launch.grid_value is None  # depends on M


GUARDS = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if tl.max(x, axis=0) <= 0:
        return
    e = tl.load(idx_ptr + pid)
    if e < 0:
        tl.store(out_ptr + offs, x, mask=offs < n)
    y = tl.where(x > 0, x, 0.0)
    tl.store(out_ptr + offs, y, mask=offs < n)
'''


def test_value_guards_tell_reductions_from_scalar_loads() -> None:
    tf = build_triton_facts(HostModule.parse(GUARDS, "g.py"))
    guards = tf.kernels["k"].guards
    assert [(g.depends_on, g.returns, g.store_asymmetry) for g in guards] == [
        ("reduction", True, False), ("scalar-load", False, True)]


def test_helper_launch_resolves_callers_arguments() -> None:
    src = '''
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def launch(a, b):
    copy_kernel[(4,)](a, b, a.numel(), BLOCK=256)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        launch(out, x)
        return out
'''
    tf = build_triton_facts(HostModule.parse(src, "h.py"))
    (launch,) = tf.launches
    assert launch.arg_for("src_ptr").source == "allocation"
    assert launch.arg_for("dst_ptr").source == "forward-input"  # the kernel writes the caller's x
    assert launch.grid_value == (4,)


def test_stores_through_a_jit_helper_count_for_the_caller() -> None:
    src = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _store_block(dst, vals, mask):
    tl.store(dst, vals, mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    _store_block(out_ptr + offs, tl.maximum(x, 0.0), mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''
    tf = build_triton_facts(HostModule.parse(src, "h.py"))
    k = tf.kernels["relu_kernel"]
    assert "out_ptr" in k.pointer_params and k.stores_to("out_ptr")
    assert not k.stores_to("x_ptr")
