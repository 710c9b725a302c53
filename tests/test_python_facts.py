"""The Python host facts: data flow through forward and its helpers, branches, try blocks, mutations,
partial slices and parameter holders, on small hand-written candidates."""

from __future__ import annotations

import ast
import textwrap

import pytest

from hackscan.python.catalog import classify_method, classify_torch, op_family
from hackscan.python.facts import ModelFlow
from hackscan.python.module import HostModule
from hackscan.python.provenance import EMPTY, Provenance
from hackscan.python.valueflow import build_model_flow

EXT = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="k", cpp_sources="torch::Tensor relu(torch::Tensor x); void fill(torch::Tensor y);",
                  cuda_sources="", functions=["relu", "fill"])
'''


def facts_of(body: str, prefix: str = EXT, class_name: str | None = None) -> ModelFlow:
    host = HostModule.parse(prefix + textwrap.dedent(body), "<test>")
    return build_model_flow(host, class_name)


def line_of(f: ModelFlow, needle: str) -> int:
    for i, line in enumerate(f.host.source.text.splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(needle)


# ------------------------------------------------------------------------------------------ flow
def test_flow_join_is_a_union_and_keeps_identity_for_empty() -> None:
    a = Provenance(inputs=frozenset({"x"}), alias=frozenset({"x"}))
    b = Provenance(ops=frozenset({1}))
    j = a.join(b)
    assert j.inputs == {"x"} and j.ops == {1} and j.alias == {"x"}
    assert a.join(EMPTY) is a and EMPTY.join(a) is a
    assert j.fresh().alias == frozenset()
    assert a.metadata() == Provenance(meta=frozenset({"x"}))
    assert a.with_(kernels=frozenset({3})).kernels == {3}


def test_flow_predicates() -> None:
    x = Provenance(inputs=frozenset({"x"}), alias=frozenset({"x"}))
    assert x.passthrough and not x.constant
    assert Provenance(allocs=frozenset({0}), meta=frozenset({"x"})).constant
    assert not Provenance(inputs=frozenset({"x"}), ops=frozenset({0})).passthrough
    assert Provenance(state=frozenset({"param:fc.weight"})).understood
    assert not Provenance(state=frozenset({"self.cache"})).understood
    assert not Provenance(opaque=frozenset({3})).understood


# ------------------------------------------------------------------------------------------ catalog
@pytest.mark.parametrize("name,family", [
    ("torch.nn.functional.relu", "relu"), ("Tensor.relu_", "relu"), ("torch.nn.ReLU", "relu"),
    ("torch.mm", "matmul"), ("torch.nn.Linear", "matmul"), ("torch.nn.functional.linear", "matmul"),
    ("torch.nn.Conv2d", "conv"), ("torch.nn.BatchNorm2d", "batch_norm"), ("torch.softmax", "softmax"),
])
def test_op_family_merges_spellings(name: str, family: str) -> None:
    assert op_family(name) == family


def test_catalog_kinds() -> None:
    assert classify_torch("torch.empty_like") == "alloc"
    assert classify_torch("torch.matmul") == "compute"
    assert classify_torch("torch.cuda.synchronize") == "misc"
    assert classify_torch("torch._C._nn.leaky_relu") == "compute"
    assert classify_torch("torch.reshape") == "view"
    assert classify_method("shape") is None and classify_method("size") == "meta"
    assert classify_method("contiguous") == "view" and classify_method("float") == "cast"
    assert classify_method("item") == "host" and classify_method("sum") == "compute"


# ------------------------------------------------------------------------------------------ model and reach
def test_finds_modelnew_forward_and_inlines_helpers() -> None:
    f = facts_of('''
        def launch(t):
            return ext.relu(t)

        class ModelNew(nn.Module):
            def _impl(self, x):
                return launch(x.contiguous())

            def forward(self, x):
                return self._impl(x)
        ''')
    assert f.model_name == "ModelNew" and f.args == ("x",)
    assert set(f.functions) == {"ModelNew.forward", "ModelNew._impl", "launch"}
    assert [k.name for k in f.kernels] == ["export:k.relu"]
    assert f.output.kernels and f.output.inputs == {"x"}
    assert f.feeds_output("launch")


def test_autograd_function_apply_reaches_its_forward() -> None:
    f = facts_of('''
        class Relu(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return ext.relu(x)

        class ModelNew(nn.Module):
            def forward(self, x):
                return Relu.apply(x)
        ''')
    assert "Relu.forward" in f.functions
    assert f.output.kernels and not f.output.ops


def test_without_modelnew_the_last_module_with_forward_is_analysed() -> None:
    f = facts_of('''
        class Block(nn.Module):
            def forward(self, x):
                return x

        class Fast(nn.Module):
            def forward(self, x):
                return torch.relu(x)
        ''')
    assert f.model_name == "Fast"


# ------------------------------------------------------------------------------------------ data flow
def test_output_through_torch_compute_names_the_op() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, A, B):
                ext.relu(A)
                return torch.matmul(A.contiguous(), B)
        ''')
    out = f.output
    assert not out.kernels
    assert [o.name for o in f.ops_of(out)] == ["torch.matmul"]


def test_kernel_writes_through_fresh_buffers_and_pointers() -> None:
    f = facts_of('''
        @triton.jit
        def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            pass

        class ModelNew(nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                k[(1,)](x, y, x.numel(), BLOCK=1024)
                z = torch.empty_like(x)
                ext.fill(z.data_ptr())
                return y, z
        ''', prefix=EXT + "import triton\nimport triton.language as tl\n")
    assert len(f.kernels) == 2
    assert f.output.kernels == {0, 1}


def test_views_keep_the_alias_and_copies_drop_it() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                a = x.view(-1).contiguous()
                b = x.clone()
                return a, b
        ''')
    flows = [f.flow_of(e) for e in f.forward_returns[0].node.value.elts]
    assert flows[0].alias == {"x"} and flows[0].passthrough
    assert flows[1].alias == frozenset() and flows[1].passthrough


def test_metadata_is_not_a_value_dependency() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty(x.size(0), x.shape[1], device=x.device)
                return out
        ''')
    out = f.output
    assert out.constant and out.meta == {"x"} and not out.inputs
    assert [a.fill for a in f.allocs_of(out)] == ["uninitialised"]


# ------------------------------------------------------------------------------------------ branches
def test_value_and_metadata_conditions() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                if x.numel() == 0:
                    return torch.empty_like(x)
                if x.min().item() >= 0:
                    return x
                return ext.relu(x)
        ''')
    meta, value = f.branches
    assert meta.condition.metadata_only and not meta.condition.value_dependent
    assert value.condition.value_args == {"x"}
    assert [t for t, _ in value.condition.value_reads] == ["x.min().item()"]
    assert value.body.returns[0].flow.passthrough
    # ``if c: return`` with no else: the rest of the function is the other arm
    assert value.orelse.label == "after" and value.orelse.kernels


def test_shape_literals_in_conditions_are_folded() -> None:
    f = facts_of('''
        dim = 16384

        class ModelNew(nn.Module):
            def forward(self, x):
                if x.shape == (16, dim):
                    return x
                return ext.relu(x)
        ''')
    (b,) = f.branches
    assert sorted(v for v, _ in b.condition.shape_literals) == [16, 16384]
    assert not b.condition.value_dependent


def test_ternary_and_identity_checks() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x, cache=None):
                y = x if cache is None else cache
                return ext.relu(y) if torch.all(y >= 0) else y
        ''')
    first, second = f.branches
    assert not first.condition.value_dependent  # ``is None`` compares identity, not values
    assert second.kind == "ifexp" and second.condition.value_dependent
    assert second.body.kernels and not second.orelse.kernels


def test_fallback_flags_and_try_blocks() -> None:
    f = facts_of('''
        try:
            ext2 = load_inline(name="k2", cpp_sources="", cuda_sources="", functions=["go"])
            ok = True
        except Exception:
            ok = False

        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.use_kernel = ext2 is not None

            def forward(self, x):
                if not ok:
                    return torch.softmax(x, dim=1)
                try:
                    y = ext2.go(x)
                except RuntimeError:
                    y = torch.softmax(x, dim=1)
                return y
        ''')
    assert {"ok", "ext2", "self.use_kernel"} <= set(f.fallback_flags)
    (t,) = f.tries
    assert t.body.kernels and not t.handlers[0].arm.kernels
    assert [o.name for o in t.handlers[0].arm.ops] == ["torch.softmax"]
    assert t.handlers[0].broad
    # the handler sees the x of before the failed statement, not the kernel's result
    assert not f.op_input_kernels


# ------------------------------------------------------------------------------------------ mutations
def test_mutations_of_inputs_and_not_of_temporaries() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x, y):
                flat = x.view(-1)
                flat.relu_()
                y[0] = 1.0
                t = x.clone()
                t.mul_(2)
                torch.add(t, 1, out=t)
                return t
        ''')
    assert sorted((m.arg, m.kind) for m in f.mutations) == [("x", "method"), ("y", "setitem")]


def test_void_extension_on_an_input_is_an_in_place_write() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                ext.fill(x)
                return x
        ''')
    assert [(m.arg, m.kind) for m in f.mutations] == [("x", "kernel")]
    assert f.output.kernels  # and the returned input carries the kernel's work


# ------------------------------------------------------------------------------------------ partial slices
def test_strided_reduction_and_first_row_broadcast() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                a = x[:, ::16].mean(dim=1, keepdim=True)
                b = x[0:1].expand(x.size(0), -1)
                return a, b
        ''')
    kinds = sorted(p.kind for p in f.partials_of(f.output))
    assert kinds == ["first-broadcast", "strided-reduction"]
    assert f.partials[0].slice.step == 16 or f.partials[1].slice.step == 16


def test_elementwise_max_of_strided_slices_is_not_a_reduction() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.max(x[:, ::2], x[:, 1::2])
        ''')
    assert not f.partials


# ------------------------------------------------------------------------------------------ members
def test_holders_derived_attributes_and_reads() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.fc = nn.Linear(c, c, bias=False)
                self.bn = nn.BatchNorm1d(c)
                self.scale = nn.Parameter(torch.ones(c))
                self.act = nn.ReLU()
                w = self.fc.weight.detach()
                self.register_buffer("w_t", w.t().contiguous())

            def forward(self, x):
                return ext.relu(x @ self.w_t) * self.bn.weight
        ''')
    h = f.holders
    assert h["fc"].kind == "module" and h["fc"].params == ("weight",)
    assert h["bn"].identity_init and h["scale"].identity_init
    assert h["act"].kind == "stateless" and h["w_t"].kind == "buffer"
    assert f.derived["w_t"] == {"fc.weight"}
    assert f.reads("w_t") and f.reads("bn") and not f.reads("scale")


def test_submodule_classes_are_analysed_with_their_prefix() -> None:
    f = facts_of('''
        class Block(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.conv = nn.Conv2d(c, c, 3)

            def forward(self, x):
                return ext.relu(self.conv(x))

        class ModelNew(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.block = Block(c)

            def forward(self, x):
                return self.block(x)
        ''')
    assert f.holders["block.conv"].kind == "module"
    assert "block.conv" in f.attr_reads
    assert "Block.forward" in f.functions and f.output.kernels


def test_reference_reuse_is_recorded() -> None:
    f = facts_of('''
        from reference import Model

        class ModelNew(Model):
            def forward(self, x):
                return super().forward(x)
        ''', prefix="import torch\nimport torch.nn as nn\n")
    kinds = sorted(u.kind for u in f.reference_uses)
    assert kinds == ["import", "inherits", "super-forward"]


def test_reference_model_can_be_analysed_too() -> None:
    f = facts_of('''
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.bn = nn.BatchNorm2d(4)

            def forward(self, x):
                return self.bn(x).relu_()
        ''', prefix="import torch\nimport torch.nn as nn\n", class_name="Model")
    assert f.model_name == "Model" and [o.family for o in f.ops] == ["batch_norm", "relu"]


def test_positions_and_shape_uses() -> None:
    f = facts_of('''
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty(16, 16384, device=x.device)
                return out.view(-1, 16384)
        ''')
    kinds = sorted(u.kind for u in f.shape_uses)
    assert kinds == ["alloc", "view"]
    assert f.shape_uses[0].line == line_of(f, "torch.empty(16, 16384")
    assert isinstance(f.shape_uses[0].node, ast.Call)


def test_deep_recursion_is_cut_and_marked() -> None:
    f = facts_of('''
        def again(x):
            return again(x)

        class ModelNew(nn.Module):
            def forward(self, x):
                return again(x)
        ''')
    assert f.truncated and f.output.opaque
