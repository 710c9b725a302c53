"""The program model: one answer to "which class is the model", asked by every analysis that needs
it, and the call / launch graph that answers "does forward reach X" and names the path."""

from __future__ import annotations

import ast
import textwrap

import pytest

from hackscan.config import Config
from hackscan.context import ScanContext
from hackscan.dynamic.runnable import inspect
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission, discover
from hackscan.measure.seeds import Seed
from hackscan.perf.parent_side import anchor_line
from hackscan.python import program as P
from hackscan.python.module import HostModule

from .conftest import ROOT

# a module with forward, then a plain helper class that also has a forward: the helper is not the
# model (it is no nn.Module); two finders once disagreed here, one analysing Net and one Timer
NET_TIMER = textwrap.dedent('''
    import time
    import torch
    import torch.nn as nn

    class Net(nn.Module):
        def forward(self, x):
            return torch.relu(x)

    class Timer:
        def forward(self, fn):
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
    ''')


def _ctx(code: str) -> ScanContext:
    host = HostModule.parse(code, "<t>")
    return ScanContext(Submission(path="<t>", code=code), host, list(host.units))


def _finders(code: str) -> dict[str, str | None]:
    """What each consumer of the program model takes for the model, by name."""
    ctx = _ctx(code)
    misc = ctx.patterns.model
    seed = Seed("s", "<t>", code, "", "").facts.model
    return {"program": ctx.program.model_name, "valueflow": ctx.model_flow.model_name if ctx.model_flow else None,
            "patterns": misc.name if misc is not None else None,
            "seeds": seed.name if seed is not None else None}


def test_a_plain_class_with_forward_after_the_module_is_not_the_model() -> None:
    assert set(_finders(NET_TIMER).values()) == {"Net"}
    ctx = _ctx(NET_TIMER)
    assert ctx.program.forward_line == NET_TIMER.splitlines().index("    def forward(self, x):") + 1
    # the dynamic stage cannot run it (the harness needs ModelNew), and says so
    assert inspect(Submission(path="<t>", code=NET_TIMER)).problem == "the candidate defines no ModelNew class"


@pytest.mark.parametrize(("code", "model"), [
    # ModelNew wins over a later module, even when it is not an nn.Module itself
    ("import torch.nn as nn\nclass ModelNew:\n    def forward(self, x):\n        return x\n"
     "class Later(nn.Module):\n    def forward(self, x):\n        return x\n", "ModelNew"),
    # an alias is what the harness finds under the name ModelNew
    ("import torch.nn as nn\nclass A(nn.Module):\n    def forward(self, x):\n        return x\n"
     "class B(nn.Module):\n    def forward(self, x):\n        return x\nModelNew = A\n", "A"),
    # an autograd Function has a forward but is not a module
    ("import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    def forward(self, x):\n        return x\n"
     "class Fn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        return x\n", "Net"),
    # a subclass of a local class counts; the reference's Model never does
    ("import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n"
     "class Fast(Model):\n    def forward(self, x):\n        return x\n", "Fast"),
    ("import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n", None),
])
def test_every_finder_applies_the_one_rule(code: str, model: str | None) -> None:
    assert set(_finders(code).values()) == {model}


def test_a_second_forward_in_the_class_is_the_one_everyone_points_at() -> None:
    code = ("import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
            "    def forward(self, x):\n        return x + 1\n")
    ctx = _ctx(code)
    assert ctx.program.forward_line == 5
    assert ctx.model_flow.forward.node.lineno == 5
    assert ctx.patterns.forward.lineno == 5
    assert anchor_line(code) == 5
    assert inspect(Submission(path="<t>", code=code)).forward_line == 5


def test_the_finders_agree_on_every_fixture() -> None:
    paths = sorted(p for d in ("fixtures", "kernels") for p in (ROOT / d).rglob("*.py")
                   if "reference" not in p.name)
    assert len(paths) > 50
    for path in paths:
        code = path.read_text()
        try:
            found = _finders(code)
        except SyntaxError:
            continue
        assert len(set(found.values())) == 1, (path, found)
        line = P.anchor(ast.parse(code))
        assert anchor_line(code) == (line[0] if line else 1)


def test_the_static_scan_carries_the_outline_the_dynamic_stage_would_compute() -> None:
    path = ROOT / "kernels" / "relu" / "clean_cuda_relu_vec4.py"
    sub = next(iter(discover([str(path)])))
    report = StaticScanner(Config()).scan(sub)
    assert isinstance(report.program, P.Outline)
    assert report.program.model == "ModelNew" and report.program.harness_name
    assert "cuda" in report.program.languages and report.program.extensions
    assert inspect(sub, report.program) == inspect(sub)
    # what the outline says is what is used: a different outline gives a different target
    assert inspect(sub, P.Outline()).problem == "the candidate defines no ModelNew class"


def test_forward_reaches_the_kernel_through_binding_and_host_function() -> None:
    ctx = _ctx((ROOT / "kernels" / "relu" / "clean_cuda_relu_vec4.py").read_text())
    prog = ctx.program
    kernel = "kernel:kernels_relu_vec4:relu_vec4_kernel"
    assert kernel in prog.reachable()
    assert prog.path_to(kernel) == ["py:ModelNew.forward", "export:kernels_relu_vec4.relu_forward",
                                    "cpp:kernels_relu_vec4:relu_forward", kernel]
    # the host function that only repeats its binding's name is not named twice
    assert prog.path_text(kernel) == "forward -> kernels_relu_vec4.relu_forward -> relu_vec4_kernel"


def test_a_path_through_a_helper_names_it_and_an_unreached_kernel_has_none() -> None:
    ctx = _ctx(textwrap.dedent('''
        import torch
        import torch.nn as nn
        import triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
            pass

        @triton.jit
        def unused_kernel(x_ptr):
            pass

        def launch(x):
            add_kernel[(1,)](x, x.numel(), BLOCK=1024)
            return x

        class ModelNew(nn.Module):
            def forward(self, x):
                return launch(x)
        '''))
    assert ctx.program.path_text("triton:add_kernel") == "forward -> launch -> add_kernel"
    assert ctx.program.path_to("triton:unused_kernel") == []
    assert ctx.program.path_text("triton:unused_kernel") == ""
    assert "triton:unused_kernel" in P.unreached_kernels(ctx.graph)


def test_the_unused_kernel_finding_names_the_path_through_the_helper() -> None:
    path = ROOT / "fixtures" / "python" / "matmul" / "hack_result_unused.py"
    report = StaticScanner(Config()).scan(next(iter(discover([str(path)]))))
    hs104 = [f for f in report.findings if f.rule == "HS104"]
    assert hs104 and "forward -> _warm -> " in hs104[0].message
    assert hs104[0].evidence["paths"] == ["forward -> _warm -> fx_matmul_unused.matmul_tiled"]
