"""C++ fallbacks: ATen compute in the extension (HS204), catch-block fallbacks (HS205) and exported
functions that return their input or a constant without launching anything (HS206)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda import names
from ...cuda.branches import depends_on, enclosing, is_empty_check, launches_after, tainted_names, value_reads
from ...cuda.facts import CudaFacts
from ...cuda.flow import UNINITIALISED, CudaFlow, Origin
from ...cuda.names import is_compute
from ...cuda.parser import contains, identifiers, in_walk_order, text
from ...cuda.records import ARITH_OPS, Call, Function, pos_of
from ...model import Confidence, Severity
from .memory import foreign_object

_DEVICE_CHECK = re.compile(r"is_cpu\s*\(|is_cuda\s*\(|kCPU|DeviceType::CPU|device\(\)\.type\(\)")
_CONST_ALLOCS = frozenset({"zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
                           "new_full", "arange", "tensor", "scalar_tensor"})


_TENSOR_RETURNING = names.TENSOR_METHODS_COMPUTE | frozenset({
    "contiguous", "view", "reshape", "flatten", "unsqueeze", "squeeze", "view_as", "reshape_as", "expand",
    "expand_as", "transpose", "t", "permute", "narrow", "select", "slice", "clone", "to", "cuda", "cpu", "detach",
    "float", "half", "double", "type", "toType", "as_strided", "index_select", "masked_select", "new_empty",
    "new_zeros", "new_ones", "new_full", "copy_", "fill_", "zero_", "unflatten", "repeat", "tile", "flip", "roll"})
_ARITH = ARITH_OPS  # the operators the host body query captures (``Function.arith``)


def _tensor_expr(node: ts.Node, fn: Function, depth: int = 0) -> bool:
    """Is ``node`` (a method call's receiver) a tensor?  tree-sitter has no types, so: a Tensor
    parameter or local, a local assigned from a torch call, or a method chain on one of those."""
    if depth > 6:
        return False
    t = node.type
    if t == "identifier":
        name = text(node)
        p = fn.param(name)
        if p is not None:
            return p.tensor
        ltype = fn.local_types.get(name)
        if ltype is not None:
            if "Tensor" in ltype and "Accessor" not in ltype:
                return True
            if "auto" not in ltype:
                return False  # ``const int rows = x.size(0)``: declared as something else
        return any(_tensor_expr(v, fn, depth + 1) for v in fn.assigned.get(name, ()))
    if t == "call_expression":
        func = node.child_by_field_name("function")
        if func is None:
            return False
        if func.type == "field_expression":
            field = func.child_by_field_name("field")
            method = text(field.child_by_field_name("name") if field is not None and field.type == "template_method"
                          else field)
            if method not in _TENSOR_RETURNING:
                return False  # x.size(0), x.numel(), x.data_ptr<float>(): not tensors
            recv = func.child_by_field_name("argument")
            return recv is not None and _tensor_expr(recv, fn, depth + 1)
        name = text(func)
        return name.startswith(("torch::", "at::")) and not name.endswith(("::size", "::numel"))
    if t == "parenthesized_expression" and node.named_child_count == 1:
        return _tensor_expr(node.named_children[0], fn, depth + 1)
    return False


def compute_call(call: Call) -> bool:
    """An ATen call that computes on tensor values (not allocation, views, checks)."""
    if call.function.kind != "host" or not is_compute(call.name):
        return False
    if call.is_method:
        recv = call.receiver
        return recv is not None and _tensor_expr(recv, call.function)
    return True


# BLAS / cuBLAS / cuDNN entry points called directly, by the ATen op whose work they do: a cuBLAS
# GEMM that computes a matmul task's whole output is ``torch.matmul`` under another name (it is what
# ``at::mm`` calls), so it is judged as ``at::mm`` would be.  It does write its output argument
# (HS207 counts that); the question here is whose work the output is.
_LIBRARY_OPS = ((re.compile(r"^(cublas(Lt)?\w*(gemm|matmul)\w*|cblas_[sdchz]?gemm\w*)$", re.I), "mm"),
                (re.compile(r"^(cublas\w*gemv\w*|cblas_[sdchz]?gemv)$", re.I), "mv"),
                (re.compile(r"^(cublas\w*dot\w*|cblas_[sdchz]?dot\w*)$", re.I), "dot"),
                (re.compile(r"^cudnnConvolution(Bias\w*)?Forward$"), "conv2d"),
                (re.compile(r"^cudnnSoftmaxForward$"), "softmax"),
                (re.compile(r"^cudnnBatchNormalizationForward\w*$"), "batch_norm"),
                (re.compile(r"^cudnnPoolingForward$"), "max_pool2d"))


def library_op(call: Call) -> str | None:
    """The ATen op a direct BLAS / cuBLAS / cuDNN call in host code computes, or None."""
    if call.function.kind != "host" or call.is_method:
        return None
    base = call.base
    if not base.startswith(("cublas", "cblas_", "cudnn")):
        return None
    for rx, op in _LIBRARY_OPS:
        if rx.match(base):
            return op
    return None


_OPS_ENTRY = re.compile(r"^(?:at::)?_ops::(\w+)::(?:call|redispatch)$")


def _op_names(call_name: str) -> list[str]:
    """The op names an ATen call may stand for.  ``at::_ops::sum_dim_IntList::call`` is the
    operator-registry entry of ``at::sum`` (its schema's name, ``sum``, then the overload,
    ``dim_IntList``): the prefixes of the entry's name, longest first, so ``clamp_min`` stays whole
    when that is the op."""
    m = _OPS_ENTRY.match(call_name)
    if m is None:
        return [call_name]
    parts = m.group(1).split("_")
    return [f"at::{'_'.join(parts[:i])}" for i in range(len(parts), 0, -1) if parts[i - 1]]


def _in_catch(node: ts.Node) -> bool:
    return enclosing(node, ("catch_clause",)) is not None


def _device_fallback(node: ts.Node, fn: Function) -> bool:
    """Inside an ``if (!x.is_cuda())`` arm: a CPU path the GPU benchmark never takes."""
    cur = node.parent
    while cur is not None and cur != fn.node:
        if cur.type == "if_statement":
            cond = cur.child_by_field_name("condition")
            if cond is not None and _DEVICE_CHECK.search(text(cond)) and not contains(cond, node):
                return True
        cur = cur.parent
    return False


def _fallback_branch(node: ts.Node, fn: Function, flow: CudaFlow) -> ts.Node | None:
    """The ``if`` whose arm holds ``node`` while the function launches a kernel outside that arm."""
    cur = node.parent
    arm = None
    while cur is not None and cur != fn.node:
        if cur.type == "if_statement" and arm is not None:
            cond = cur.child_by_field_name("condition")
            if cond is not None and not contains(cond, node) and launches_after(fn, flow, arm):
                return cur
        if cur.type in ("compound_statement", "else_clause", "expression_statement", "return_statement"):
            arm = cur
        cur = cur.parent
    return None


def _reference_compute_ops(ctx: ScanContext) -> list[str]:
    if ctx.reference is None:
        return []
    out = []
    for op in ctx.reference.forward_ops:
        base = names.op_base(op)
        if base in names.TENSOR_METHODS_ALLOWED or base in names.ATEN_ALLOWED or base in _CONST_ALLOCS:
            continue
        out.append(op)
    return out


def _exported_roots(facts: CudaFacts) -> list[tuple[str, Function]]:
    roots = [(e.name, fn) for e, fn in facts.exported_functions() if fn.kind == "host"]
    if roots:
        return roots
    # no known entry point: every host function is one
    return [(fn.name, fn) for fn in facts.host_functions]


# A source scanned without a reference has no task whose work it could be passing off: a binding
# that only calls ATen or cuBLAS (a library's GEMM wrapper, the host side of kernels launched from
# other files) is worth a look, not a verdict; with a reference, the same path is a hack.
_NO_TASK = (", and no kernel launch is visible on the exported path (no reference: whose op it does "
            "cannot be told)")


def cuda_aten_fallback(ctx: ScanContext) -> Iterator[Hit]:
    """HS204."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    ref_ops = _reference_compute_ops(ctx)
    seen: set[int] = set()
    reads: dict[int, list[ts.Node]] = {}
    arithmetic: dict[int, list[ts.Node]] = {}
    for export, root in _exported_roots(facts):
        launches = flow.launches_from(root)
        for fn, call in flow.host_calls_from(root):
            if call.node.id in seen:
                continue
            lib = library_op(call)
            if lib is None and not compute_call(call):
                continue
            if _in_catch(call.node) or _device_fallback(call.node, fn):
                continue
            if id(fn) not in reads:
                reads[id(fn)] = [r.node for r in value_reads(fn, facts)]
            if any(contains(r, call.node) for r in reads[id(fn)]):
                continue  # ``x.min().item()``: the reduction feeds a value guard (HS202), not the output
            seen.add(call.node.id)
            candidates = [f"at::{lib}"] if lib is not None else _op_names(call.name)
            same = next((op for c in candidates for op in ref_ops if names.same_op(c, op)), None)
            op_name = next((c for c in candidates if same is not None and names.same_op(c, same)), candidates[-1])
            base = names.op_base(op_name)
            heavy = base in names.HEAVY_OPS
            shown = call.name if not call.is_method else f"{text(call.receiver)}{call.name}"

            branch = _fallback_branch(call.node, fn, flow)
            if branch is not None and (same is not None or heavy):
                cond = " ".join(text(branch.child_by_field_name("condition")).split())[:60]
                sev, conf = Severity.WARNING, Confidence.MEDIUM
                why = (f" on the path where the kernel is not launched (branch on `{cond}`): a fallback the "
                       "benchmark's shapes may or may not take")
            elif same is not None and launches and not heavy and _statistic_for_kernel(flow, call, same, launches):
                # ``mean = x.mean({2,3})`` / ``var = x.var(...)`` handed to the kernel that normalises:
                # ATen computes a statistic of the reference's composite op and the custom kernel the
                # rest, the split a Python candidate gets a warning for (a partial kernel, not a rewrite)
                sev, conf = Severity.WARNING, Confidence.MEDIUM
                why = (f", a statistic of the reference's op `{same}` that the launched kernel consumes "
                       "(a partial kernel: ATen does part of the op's work)")
            elif same is not None and (heavy or len(ref_ops) <= 1 or not launches):
                sev, conf, why = Severity.ERROR, Confidence.HIGH, f", the reference's own op `{same}`"
            elif not launches and ctx.reference is None:
                sev, conf, why = Severity.WARNING, Confidence.MEDIUM, _NO_TASK
            elif not launches:
                sev, conf, why = Severity.ERROR, Confidence.HIGH, ", and the exported path launches no kernel"
            elif same is not None:
                sev, conf, why = Severity.WARNING, Confidence.MEDIUM, f", one of the reference's ops (`{same}`)"
            elif heavy:
                sev, conf, why = Severity.WARNING, Confidence.MEDIUM, ", a heavy op the custom kernels do not replace"
            else:
                sev, conf, why = Severity.WARNING, Confidence.LOW, ""
            if lib is not None:  # the library call does the work ``at::{lib}`` would (it is what ATen calls)
                why = f" (the library doing `at::{lib}`'s work)" + why
            path = ctx.program.path_text(f"cpp:{fn.ext}:{fn.name}")  # "" for a file with no Python forward
            kind = "ATen " if lib is None else "the library call "
            yield ctx.hit(call.pos, args={"function": fn.name, "export": export, "call": shown, "why": why, "kind": kind,
                                          "path": path or export},
                          severity=sev, confidence=conf,
                          evidence={"call": call.name, "function": fn.key, "export": export, **({"library_op": lib} if lib else {}),
                                    "reference_op": same, "launches": len(launches),
                                    **({"path": path} if path else {})})
        # ``return x * scale + shift;``: ATen arithmetic through operator overloads
        for fn in flow.host_closure(root):
            if id(fn) not in arithmetic:
                arithmetic[id(fn)] = _tensor_arithmetic(fn)
            for node in arithmetic[id(fn)]:
                if node.id in seen or _in_catch(node) or _device_fallback(node, fn):
                    continue
                seen.add(node.id)
                shown = " ".join(text(node).split())[:50]
                if not launches and ctx.reference is None:
                    sev, conf, why = Severity.WARNING, Confidence.MEDIUM, _NO_TASK
                elif not launches:
                    sev, conf, why = Severity.ERROR, Confidence.HIGH, ", and the exported path launches no kernel"
                else:
                    sev, conf, why = Severity.WARNING, Confidence.LOW, " (tensor arithmetic through operators)"
                yield ctx.hit(pos_of(fn.unit, node), severity=sev, confidence=conf,
                              args={"function": fn.name, "export": export, "call": shown, "why": why,
                                    "kind": "ATen "},
                              evidence={"call": "operator", "function": fn.key, "export": export,
                                        "launches": len(launches)})


# reductions that give a normalisation or a softmax its per-row (per-channel) statistics
_STATISTICS = frozenset({"mean", "var", "std", "var_mean", "std_mean", "sum", "amax", "amin", "max", "min",
                         "logsumexp", "norm", "rsqrt"})


def _statistic_for_kernel(flow: CudaFlow, call: Call, reference_op: str, launches: list) -> bool:
    """Whether an ATen ``call`` is a statistic of a larger reference op (``x.var`` for an
    ``InstanceNorm2d``, not ``x.mean`` for a ``torch.mean`` task) whose result a launched kernel
    reads: the op's remaining work is the kernel's."""
    base = names.op_base(call.name)
    if base not in _STATISTICS or base == names.op_base(reference_op):
        return False
    for lc in launches:
        for arg in lc.args:
            if any(o.kind == "aten" and o.node is not None and o.node.id == call.node.id
                   for o in flow.origins(arg, lc.function)):
                return True
    return False


def _tensor_arithmetic(fn: Function) -> list[ts.Node]:
    """Outermost ``a op b`` in host code where an operand is a tensor (ATen computes it)."""
    if fn.body is None or fn.kind != "host":
        return []
    found: list[ts.Node] = []
    # the body's query captured them (``Function.arith``); ordered here as a walk of the body meets them
    arith = fn.arith
    if len(arith) > 1:
        arith = in_walk_order(arith)
    # whether a name is a tensor, per name: an identifier operand's answer depends on the name
    # alone (and the function), and the same sizes and indices recur across the arithmetic
    named: dict[str, bool] = {}

    def tensor(x: ts.Node | None) -> bool:
        if x is None:
            return False
        t = x.type
        if t == "identifier":
            name = text(x)
            got = named.get(name)
            if got is None:
                got = named[name] = _tensor_expr(x, fn)
            return got
        if t == "number_literal":
            return False  # what ``_tensor_expr`` says of any node type it does not know
        return _tensor_expr(x, fn)

    for node in arith:
        kids = node.children
        if len(kids) == 3 and not node.has_error:
            # ``left op right``: three required parts, read by position (see ``consts.fold``)
            left, right = kids[0], kids[2]
        else:
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if tensor(left) or tensor(right):
            found.append(node)
    return [n for n in found if not any(o is not n and contains(o, n) for o in found)]


_ARITH_QUERY = "(binary_expression operator: [" + " ".join(f'"{op}"' for op in sorted(_ARITH)) + "]) @arith"
_arith_local = threading.local()


def cuda_catch_fallback(ctx: ScanContext) -> Iterator[Hit]:
    """HS205."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    for fn in facts.host_functions:
        for tr in fn.of_type("try_statement"):
            for clause in tr.named_children:
                if clause.type != "catch_clause":
                    continue
                body = clause.child_by_field_name("body")
                if body is None:
                    continue
                calls = [c for c in fn.calls if contains(body, c.node) and compute_call(c)]
                calls += [c for c in fn.calls if contains(body, c.node) and library_op(c) is not None]
                if calls:
                    c = calls[0]
                    shown = c.name if not c.is_method else f"{text(c.receiver)}{c.name}"
                    yield ctx.hit(pos_of(fn.unit, clause),
                                  args={"function": fn.name, "fallback": f"ATen `{shown}`"},
                                  evidence={"calls": [x.name for x in calls], "function": fn.key})
                    continue
                for r in flow.returns(fn):
                    if r.value is None or not contains(body, r.node):
                        continue
                    origins = flow.origins(r.value, fn)
                    if origins and all(o.kind == "input" for o in origins):
                        yield ctx.hit(pos_of(fn.unit, clause),
                                      args={"function": fn.name,
                                            "fallback": f"returning its input `{text(r.value)}` unchanged"},
                                      evidence={"function": fn.key, "returns": text(r.value)})
                        break


def _describe(origins: list[Origin], value: ts.Node) -> str | None:
    kinds = {o.kind for o in origins}
    shown = " ".join(text(value).split())[:50]
    if kinds == {"input"}:
        return f"its input `{shown}`"
    if kinds <= {"input", "copy"} and "copy" in kinds:
        return f"a copy of its input (`{shown}`)"
    if kinds == {"alloc"} and all(o.detail in _CONST_ALLOCS for o in origins):
        return f"a constant tensor (`{shown}`)"
    if kinds == {"literal"}:
        return None
    return None


def _called_from_python(ctx: ScanContext, ext: str, name: str) -> bool | None:
    """Does the host file call ``ext.name(...)``?  None when there is no host file to ask."""
    host = ctx.host
    if host is None:
        return None
    import ast

    for call in host.of_type(ast.Call):
        got = host.extension_for_call(call)  # type: ignore[arg-type]
        if got is not None and got[0].name == ext and got[1] == name:
            return True
        func = call.func  # getattr(ext, "name") and friends: cannot tell, assume it is called
        if isinstance(func, ast.Name) and func.id == "getattr":
            return None
    return False


def cuda_passthrough_export(ctx: ScanContext) -> Iterator[Hit]:
    """HS206."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    for export, fn in facts.exported_host_functions():
        returns = [r for r in flow.returns(fn) if r.value is not None]
        if not returns:
            continue
        launches = flow.launches_from(fn)
        if not launches:
            if any(compute_call(c) or library_op(c) is not None for _, c in flow.host_calls_from(fn)):
                continue  # HS204 reports the ATen / library work
            if any(flow.host_stores(g) for g in flow.host_closure(fn)):
                continue  # computes on the host through a data pointer: slow, not a passthrough
            if any(c.is_method and c.receiver is not None and foreign_object(flow, g, c)
                   and any(o.kind == "alloc" for a in c.args for o in flow.origins(a, g))
                   for g, c in flow.host_calls_from(fn)):
                continue  # ``net->initialize_params(seed, out.data_ptr())``: another library's object does the work
            described = [(r, _describe(flow.origins(r.value, fn), r.value)) for r in returns]
            if all(d is not None for _, d in described):
                r, d = described[0]
                called = _called_from_python(ctx, export.ext, export.name)
                when = "without launching any kernel"
                sev, conf = None, None
                siblings = [g for e, g in facts.exported_functions()
                            if g.ext == fn.ext and g is not fn and g.kind == "host" and flow.launches_from(g)]
                if called is False:
                    when += " (the Python side never calls it: the work happens elsewhere)"
                    sev, conf = Severity.WARNING, Confidence.MEDIUM
                elif siblings and d.startswith(("its input", "a copy")):
                    # a view / layout helper next to exports that do launch: usually glue, sometimes the hack
                    when += f" (other exports such as `{siblings[0].name}` do launch kernels)"
                    sev, conf = Severity.WARNING, Confidence.LOW
                yield ctx.hit(pos_of(fn.unit, r.node), severity=sev, confidence=conf,
                              args={"function": fn.name, "returned": d, "when": when},
                              evidence={"export": export.name, "returns": [text(x.value)[:60] for x, _ in described]})
            continue
        sites = [lc.node.start_byte for lc in launches if lc.function is fn]
        reads = [v.node for v in value_reads(fn, facts)]
        tainted = tainted_names(fn, reads) if reads else set()
        for r in returns:
            branch = enclosing(r.node, ("if_statement",), fn.node)
            if branch is None or any(s < r.node.start_byte for s in sites):
                continue
            origins = flow.origins(r.value, fn)
            d = _describe(origins, r.value)
            if d is None or not d.startswith("its input"):
                continue
            cond = branch.child_by_field_name("condition")
            if cond is None or is_empty_check(cond) or _DEVICE_CHECK.search(text(cond)):
                continue
            if depends_on(cond, reads, tainted) is not None:
                continue  # a value guard: HS202
            shown = " ".join(text(cond).split())[:60]
            yield ctx.hit(pos_of(fn.unit, r.node), severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                          args={"function": fn.name, "returned": d, "when": f"unchanged when {shown}"},
                          evidence={"export": export.name, "condition": shown})


__all__ = ["cuda_aten_fallback", "cuda_catch_fallback", "cuda_passthrough_export", "compute_call", "library_op", "UNINITIALISED",
           "identifiers"]
