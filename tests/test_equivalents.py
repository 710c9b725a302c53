"""The one table of equivalent ops: a candidate's op is the reference's op whatever the spelling."""

from __future__ import annotations

import pytest

from hackscan.cuda.names import same_op
from hackscan.dynamic.census_judge import fallback_share
from hackscan.python.catalog import op_family
from hackscan.python.equivalents import computes_reference, reference_work


def fams(*names: str) -> frozenset[str]:
    return frozenset(op_family(n) for n in names)


@pytest.mark.parametrize("cand, ref", [
    ("torch.addmm", ("torch.nn.Linear",)),
    ("torch.nn.functional.linear", ("torch.matmul", "torch.add")),
    ("torch.nn.functional.silu", ("torch.mul", "torch.sigmoid")),
    ("torch.sigmoid", ("torch.nn.SiLU",)),
    ("torch.clamp", ("torch.relu",)),
    ("Tensor.relu_", ("torch.nn.ReLU",)),
    ("torch.rsqrt", ("torch.nn.LayerNorm",)),
    ("torch.nn.functional.layer_norm", ("torch.var_mean", "torch.rsqrt")),
    ("torch.mm", ("torch.nn.Conv2d",)),
    ("torch.erf", ("torch.nn.functional.gelu",)),
    ("torch.sum", ("torch.mean",)),
    ("torch.nn.functional.softmax", ("torch.exp", "torch.sum")),
])
def test_spellings_of_the_reference_op_match(cand: str, ref: tuple[str, ...]) -> None:
    assert computes_reference(fams(cand), fams(*ref))


@pytest.mark.parametrize("cand, ref", [
    ("torch.add", ("torch.nn.Linear",)),        # a bias add is not the GEMM
    ("torch.mul", ("torch.nn.SiLU",)),          # generic arithmetic is never a distinctive part
    ("torch.nn.functional.conv2d", ("torch.matmul",)),  # a conv lowers to a GEMM, not the other way
    ("torch.sigmoid", ("torch.tanh",)),
])
def test_other_ops_do_not(cand: str, ref: tuple[str, ...]) -> None:
    assert not computes_reference(fams(cand), fams(*ref))


def test_closure_keeps_the_reference_own_families() -> None:
    own = fams("torch.nn.Linear", "torch.relu")
    assert own <= reference_work(own)


def test_aten_names_follow_the_table() -> None:
    assert same_op("at::addmm", "torch.nn.Linear")
    assert same_op("at::mm", "torch.nn.Conv2d")
    assert not same_op("at::conv2d", "torch.matmul")


def test_census_counts_an_equivalent_aten_op() -> None:
    share, detail = fallback_share({"ops": {"aten.addmm": {"work": 9.0}, "aten.relu": {"work": 1.0}}},
                                   {"ops": {"aten.mm": {"work": 10.0}}})
    assert detail["reference_ops_used"] == ["aten.addmm"]
    assert share == pytest.approx(0.9)
