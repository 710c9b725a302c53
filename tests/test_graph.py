"""The composed call graph: Python functions, torch ops and launches, joined to the C++ graph."""

from __future__ import annotations

import textwrap

from hackscan.context import ScanContext
from hackscan.inputs import Submission
from hackscan.python import program as G
from hackscan.python.module import HostModule

from .conftest import ROOT


def ctx_for(code: str) -> ScanContext:
    code = textwrap.dedent(code)
    sub = Submission(path="<t>", code=code)
    host = HostModule.parse(code, "<t>")
    return ScanContext(sub, host, list(host.units))


def test_python_nodes_edges_and_reachability() -> None:
    ctx = ctx_for('''
        import torch
        import torch.nn as nn
        import triton
        import triton.language as tl

        @triton.jit
        def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            pass

        @triton.jit
        def unused_kernel(x_ptr):
            pass

        def launch(x):
            y = torch.empty_like(x)
            add_kernel[(1,)](x, y, x.numel(), BLOCK=1024)
            return y

        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.relu(launch(x))
        ''')
    g = ctx.graph
    assert G.forward_node(g) == "py:ModelNew.forward"
    assert g.has_edge("py:ModelNew.forward", "py:launch")
    assert g.has_edge("py:launch", "triton:add_kernel")
    assert g.edges["py:launch", "triton:add_kernel"]["kind"] == "launches"
    assert g.has_edge("py:ModelNew.forward", "torch:torch.relu")
    assert G.kernels_reachable(g) == {"triton:add_kernel"}
    assert G.any_kernel_reachable(g)
    assert G.unreached_kernels(g) == {"triton:unused_kernel"}
    assert G.torch_ops_reachable(g) == {"torch:torch.relu"}
    assert G.entries_reachable(g) == {"triton:add_kernel"}


def test_no_kernel_reachable_in_a_torch_rewrite() -> None:
    ctx = ctx_for('''
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)
        ''')
    g = ctx.graph
    assert not G.any_kernel_reachable(g)
    assert G.torch_ops_reachable(g) == {"torch:torch.matmul"}
    assert G.reachable(g) == {"py:ModelNew.forward", "torch:torch.matmul"}


def test_composes_with_the_cuda_graph_behind_exports() -> None:
    path = ROOT / "kernels" / "matmul" / "hack_torch_fallback.py"
    ctx = ctx_for(path.read_text())
    g = ctx.graph
    exports = [n for n, d in g.nodes(data=True) if d.get("kind") == "export"]
    assert exports, "the extension's exported function is a node"
    kernels = [n for n, d in g.nodes(data=True) if d.get("kind") == "kernel"]
    assert kernels and all(n.startswith("kernel:") for n in kernels)
    # forward never calls the extension: its kernel exists but is not reached
    assert not G.any_kernel_reachable(g)
    assert set(kernels) <= G.unreached_kernels(g)
    assert any(n.startswith("torch:") for n in G.torch_ops_reachable(g))


def test_export_reached_through_python_leads_to_its_kernel() -> None:
    path = ROOT / "kernels" / "relu" / "clean_cuda_relu_vec4.py"
    g = ctx_for(path.read_text()).graph
    reached = G.kernels_reachable(g)
    assert any(n.startswith("kernel:") for n in reached)
    assert G.entries_reachable(g) and all(n.startswith("export:") for n in G.entries_reachable(g))
