"""The optional libclang pass: skipped where libclang is not installed."""

from __future__ import annotations

import textwrap
import time

import pytest

from hackscan.config import Config
from hackscan.cuda import clang
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission
from hackscan.units import MappedText, Unit

pytestmark = pytest.mark.skipif(not clang.available(), reason="libclang is not installed")

SRC = textwrap.dedent("""
    #include <torch/extension.h>
    #include <cuda_runtime.h>
    #define GLUE(a, b) a##b
    #define N (16 * 1024)
    constexpr int HALF = N / 2 + sizeof(float);
    template <int V> struct Wrap { static constexpr int value = V * 2; };
    const int WRAPPED = Wrap<HALF>::value;
    __global__ void k(float* y) { y[threadIdx.x] = 1.f; }
    void go(float* y) {
        cudaStream_t s;
        GLUE(cuda, StreamCreate)(&s);
        k<<<HALF / 256, 256, 0, s>>>(y);
    }
""")


def make_unit(text: str = SRC) -> Unit:
    return Unit(id="deep:cuda", language="cuda", mapped=MappedText.verbatim(text, 1, 0), extension="deep")


def test_constants_are_folded_by_clang() -> None:
    consts = clang.deep_constants(make_unit())
    assert consts["HALF"] == 8196
    assert consts["WRAPPED"] == 16392  # a template the tree-sitter folder cannot follow


def test_token_pasted_calls_are_found_with_host_positions() -> None:
    found = clang.pasted_api_calls(make_unit())
    assert [(name, pos.line) for name, pos in found] == [("cudaStreamCreate", 12)]


def test_plain_calls_are_not_reported_as_pasted() -> None:
    text = SRC.replace("GLUE(cuda, StreamCreate)(&s);", "cudaStreamCreate(&s);")
    assert clang.pasted_api_calls(make_unit(text)) == []


def test_deep_option_reports_the_expanded_call() -> None:
    code = "from torch.utils.cpp_extension import load_inline\nsrc = r'''" + SRC + "'''\n" \
           "ext = load_inline(name='deep', cpp_sources='', cuda_sources=src, functions=['go'])\n"
    sub = Submission(path="deep.py", code=code, file="deep.py")
    shallow = StaticScanner(Config(select=("HS217",))).scan(sub)
    deep = StaticScanner(Config(select=("HS217",), rule_options={"HS217": {"deep": True}})).scan(sub)
    # both pasted fragments are macro parameters: only the expansion shows what is called
    assert shallow.findings == ()
    assert {f.location.line for f in deep.findings} == {13}
    assert any("cudaStreamCreate" in f.message for f in deep.findings)


def test_cost_per_unit_is_bounded() -> None:
    unit = make_unit()
    clang.parse_unit(unit)  # warm: loads the library and the stub
    start = time.perf_counter()
    for _ in range(5):
        clang.parse_unit(unit)
    per_unit = (time.perf_counter() - start) / 5
    assert per_unit < 0.25, f"libclang pass took {per_unit * 1000:.0f} ms per unit"
