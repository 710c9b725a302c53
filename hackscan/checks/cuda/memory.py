"""Memory the extension should not trust or touch: unwritten outputs (HS207), state kept across
calls (HS208) and kernels writing into the caller's input tensors (HS213)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda import names
from ...cuda.branches import branches, enclosing, in_empty_branch, launch_effect, launch_sites
from ...cuda.facts import CudaFacts
from ...cuda.flow import CAST_CALLS, UNINITIALISED, CudaFlow, Origin
from ...cuda.parser import call_args, callee_name, contains, identifiers, text
from ...cuda.records import Export, Function, Launch, Variable, pos_of
from ...model import Confidence, Severity

# tensor methods that write into their receiver
_MUTATORS = re.compile(r"^(copy_|fill_|zero_|index_put_|index_copy_|index_fill_|masked_fill_|masked_scatter_|"
                       r"scatter_|scatter_add_|put_|set_|uniform_|normal_|random_|bernoulli_|exponential_|"
                       r"clamp_|add_|mul_|sub_|div_|addmm_|baddbmm_|relu_|copy|.*_$)")
# host calls that read pointers but never write through them
_PURE_HOST = frozenset({"TORCH_CHECK", "printf", "fprintf", "sizeof", "min", "max", "assert", "cudaFuncSetAttribute",
                        "cudaFuncGetAttributes", "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaPointerGetAttributes",
                        "cudaGetLastError", "C10_CUDA_CHECK", "AT_DISPATCH_FLOATING_TYPES",
                        "AT_DISPATCH_FLOATING_TYPES_AND_HALF", "AT_DISPATCH_FLOATING_TYPES_AND2", "AT_DISPATCH_ALL_TYPES",
                        "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemPrefetchAsync", "cudaMemAdvise"})
_LOOPS = ("for_statement", "while_statement", "do_statement", "for_range_loop")
_TUPLE_MAKERS = frozenset({"make_tuple", "make_pair", "tuple", "pair", "vector", "forward_as_tuple", "tie"})


def _returned_values(value: ts.Node) -> list[ts.Node]:
    """``return {a, b}`` / ``std::make_tuple(a, b)`` / ``std::vector<Tensor>{a, b}``: each element."""
    if value.type == "initializer_list":
        return [c for c in value.named_children if c.type != "comment"]
    if value.type == "call_expression":
        func = value.child_by_field_name("function")
        if func is not None and callee_name(func).rsplit("::", 1)[-1] in _TUPLE_MAKERS:
            return call_args(value)
    if value.type == "compound_literal_expression":
        inner = value.child_by_field_name("value")
        if inner is not None:
            return _returned_values(inner)
    return [value]


def _dim_product(node: ts.Node | None, fn: Function, flow: CudaFlow) -> int | None:
    """Threads described by a grid/block expression: ``256``, ``dim3(16, 16)``, ``blocks``."""
    if node is None:
        return None
    if node.type == "identifier":
        values = fn.assigned.get(text(node))
        if values and len(values) == 1 and values[0].type in ("argument_list", "initializer_list"):
            total = 1
            for a in values[0].named_children:
                v = flow.fold(a, fn)
                if not isinstance(v, int):
                    return None
                total *= v
            return total
    if node.type == "call_expression" and callee_name(node.child_by_field_name("function")) == "dim3":
        total = 1
        for a in call_args(node):
            v = flow.fold(a, fn)
            if not isinstance(v, int):
                return None
            total *= v
        return total
    v = flow.fold(node, fn)
    return v if isinstance(v, int) else None


def _stores_in_loop(kernel: Function, flow: CudaFlow, index: int) -> bool:
    for site in flow.stores(kernel).by_param.get(index, ()):
        if enclosing(site.node, _LOOPS, kernel.node) is not None or not site.certain:
            return True
        if site.how.startswith("call:"):
            return True  # a device helper may loop
    return False


def _input_numel(ctx: ScanContext, origin: Origin, flow: CudaFlow) -> int | None:
    """Elements of the reference input an ``empty_like(input)`` output copies its shape from."""
    if ctx.reference is None or origin.node is None or origin.detail not in ("empty_like",):
        return None
    args = call_args(origin.node)
    if not args:
        return None
    for o in flow.origins(args[0], origin.function) if origin.function is not None else []:
        if o.kind == "input" and 0 <= o.index < len(ctx.reference.inputs):
            shape = ctx.reference.inputs[o.index].shape
            if shape and all(isinstance(d, int) for d in shape):
                n = 1
                for d in shape:
                    n *= d  # type: ignore[operator]
                return n
    return None


def cuda_unwritten_output(ctx: ScanContext) -> Iterator[Hit]:
    """HS207."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    for export, fn in facts.exported_host_functions():
        outs = _uninitialised_returns(flow, fn)
        if not outs:
            continue
        sites = _SiteMapper(facts, flow, fn)
        # allocation id -> [(site in fn, "store" | "maybe")]; launches that receive it but do not store
        written: dict[int, list[tuple[ts.Node, str]]] = {}
        unstored: dict[int, list[tuple[ts.Node, Launch]]] = {}
        storing: dict[int, list[tuple[Launch, Function, int]]] = {}

        def mark(alloc: ts.Node, where: ts.Node | None, how: str,
                 written: dict[int, list[tuple[ts.Node, str]]] = written) -> None:
            if where is not None:
                written.setdefault(alloc.id, []).append((where, how))

        _mark_launches(facts, flow, fn, sites, outs, mark, storing, unstored)
        _mark_host_writes(facts, flow, fn, sites, mark)
        reported: set[int] = set()
        for o, v, ret in outs:
            if o.node.id in reported:
                continue
            writers = written.get(o.node.id, [])
            shown = " ".join(text(v).split())[:40]
            alloc = f"torch::{o.detail}" if not o.detail.startswith("new_") else f".{o.detail}()"
            # where the allocation is, worked out for a report only (most outputs are written)
            where_unit = o.function.unit if o.function else fn.unit
            why = None
            if not writers:
                targets = _unstoring_launches(facts, flow, fn, o)
                why = (f"kernel `{targets[0]}` never stores through the parameter it receives it as" if targets
                       else "no launched kernel stores to it")
            elif (o.function is fn and not _in_loop(ret, fn)
                  and all(w.start_byte > ret.start_byte and not contains(ret, w) for w, _ in writers)):
                why = f"the return on line {pos_of(fn.unit, ret).line} hands it back before anything writes it"
            else:
                why = _unwritten_arm([w for w, _ in writers], unstored.get(o.node.id, []), fn)
            if why is not None:
                reported.add(o.node.id)
                yield ctx.hit(pos_of(where_unit, o.node), args={"var": shown, "alloc": alloc, "function": fn.name, "why": why},
                              evidence={"export": export.name, "alloc": text(o.node)[:80]})
                continue
            if any(how != "store" for _, how in writers):
                continue
            hit = _row_geometry(ctx, flow, storing.get(o.node.id, []), shown, alloc, fn, export, o, where_unit)
            if hit is not None:
                reported.add(o.node.id)
                yield hit
                continue
            hit = _coverage(ctx, flow, o, storing.get(o.node.id, []), shown, alloc, fn, export, where_unit)
            if hit is not None:
                reported.add(o.node.id)
                yield hit


def _uninitialised_returns(flow: CudaFlow, fn: Function) -> list[tuple[Origin, ts.Node, ts.Node]]:
    """The uninitialised allocations ``fn`` returns: (allocation, returned expression, return)."""
    outs: list[tuple[Origin, ts.Node, ts.Node]] = []  # (allocation, returned expression, return)
    for r in flow.returns(fn):
        if r.value is None or in_empty_branch(r.node, fn.node):
            continue
        for v in _returned_values(r.value):
            for o in flow.origins(v, fn):
                if o.kind == "alloc" and o.detail in UNINITIALISED and o.node is not None and not o.maybe:
                    outs.append((o, v, r.node))
    return outs


def _mark_launches(facts: CudaFacts, flow: CudaFlow, fn: Function, sites: _SiteMapper,
                   outs: list[tuple[Origin, ts.Node, ts.Node]], mark: Callable[[ts.Node, ts.Node | None, str], None],
                   storing: dict[int, list[tuple[Launch, Function, int]]],
                   unstored: dict[int, list[tuple[ts.Node, Launch]]]) -> None:
    """Mark what the launches from ``fn`` write: a kernel that stores through the parameter an
    allocation reaches it as (recorded in ``storing``), one that may, one that does not (``unstored``)."""
    for lc in flow.launches_from(fn):
        kernel = facts.kernel_for(lc)
        site = sites.site(lc.function, lc.node)
        for idx, arg in enumerate(lc.args):
            if arg.type == "lambda_expression":
                # a device lambda: whatever it captures may be written
                for ident in identifiers(arg):
                    for o in flow.origins(ident, lc.function):
                        if o.kind == "alloc" and o.node is not None:
                            mark(o.node, site, "maybe")
                continue
            for o in flow.origins(arg, lc.function):
                if o.kind != "alloc" or o.node is None:
                    continue
                if kernel is None or (o.aggregate and flow.stores(kernel).stores(idx)):
                    mark(o.node, site, "maybe")
                elif flow.stores(kernel).stores(idx):
                    mark(o.node, site, "store")
                    storing.setdefault(o.node.id, []).append((lc, kernel, idx))
                elif not o.aggregate and site is not None:
                    unstored.setdefault(o.node.id, []).append((site, lc))
        if kernel is None and lc.api != "<<<>>>":
            for o, _, _ in outs:  # cudaLaunchKernel with an args array: cannot map parameters
                mark(o.node, site, "maybe")


def _mark_host_writes(facts: CudaFacts, flow: CudaFlow, fn: Function, sites: _SiteMapper,
                      mark: Callable[[ts.Node, ts.Node | None, str], None]) -> None:
    """Mark what host code reached from ``fn`` may write: sinks of host calls, parameter blocks handed
    to a launcher looked up at run time, stores through pointers."""
    for host_fn, call in flow.host_calls_from(fn):
        for alloc in _sink_allocs(facts, flow, host_fn, call):
            mark(alloc, sites.site(host_fn, call.node), "maybe")
    for host_fn in flow.host_closure(fn):
        # ``params.dx = dx.data_ptr(); launcher(launch_params);``: a parameter block handed to a
        # launcher looked up at run time (a function pointer or std::function local, not a lambda)
        call = _runtime_launcher(host_fn)
        if call is not None:
            for asg in host_fn.of_type("assignment_expression"):
                left, right = asg.child_by_field_name("left"), asg.child_by_field_name("right")
                if left is None or right is None or left.type != "field_expression":
                    continue  # ``launch_params.params.dx = dx.data_ptr()``: a member, at any depth
                for o in flow.origins(right, host_fn):
                    if o.kind == "alloc" and o.node is not None:
                        mark(o.node, sites.site(host_fn, call.node), "maybe")
        for node, origins in flow.host_stores(host_fn):
            for o in origins:
                if o.kind == "alloc" and o.node is not None:
                    mark(o.node, sites.site(host_fn, node), "maybe")


def _coverage(ctx: ScanContext, flow: CudaFlow, o: Origin, launches: list, shown: str, alloc: str, fn: Function,
              export: Export, where_unit) -> Hit | None:
    """A warning when the only launches writing the output run a constant, small number of threads
    with no loop around their stores."""
    if not launches:
        return None
    small = []
    for lc, kernel, idx in launches:
        g = _dim_product(lc.grid, lc.function, flow)
        b = _dim_product(lc.block, lc.function, flow)
        if g is None or b is None or _stores_in_loop(kernel, flow, idx):
            return None
        small.append((lc, kernel, g * b))
    most = max(t for _, _, t in small)
    need = _input_numel(ctx, o, flow)
    if need is None:
        if o.detail != "empty_like" or most > 1024:
            return None
    elif most >= need:
        return None
    lc, kernel, _ = small[0]
    why = (f"the only launch writing it (`{kernel.name}<<<...>>>`) runs {most} threads with no loop around "
           f"its stores" + (f", fewer than the {need} elements" if need else ""))
    return ctx.hit(pos_of(where_unit, o.node), severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                   args={"var": shown, "alloc": alloc, "function": fn.name, "why": why},
                   evidence={"export": export.name, "threads": most, "elements": need})


def _row_geometry(ctx: ScanContext, flow: CudaFlow, launches: list, shown: str, alloc: str, fn: Function,
                  export: Export, o: Origin, where_unit) -> Hit | None:
    """Every launch writing the output indexes by ``blockIdx.y`` / ``.z`` on a one-dimensional grid:
    ``gridDim.y`` is 1, so only the first row (plane) of blocks is written and the rest keeps what the
    allocator left.  A kernel that reads ``gridDim.y`` / ``.z`` may loop over the axis and is left alone."""
    if not launches:
        return None
    axes: set[str] = set()
    for lc, kernel, _idx in launches:
        body = (kernel.body.text or b"") if kernel.body is not None else b""  # bytes: no decode per launch
        used = {a for a in ("y", "z") if b"blockIdx." + a.encode() in body and b"gridDim." + a.encode() not in body}
        if not used or _grid_rank(lc.grid, lc.function) != 1:
            return None
        axes |= used
    lc, kernel, _ = launches[0]
    axis = sorted(axes)[0]
    why = (f"`{kernel.name}` takes its {'row' if axis == 'y' else 'plane'} from `blockIdx.{axis}` while the launch "
           f"(line {lc.pos.line}) has a one-dimensional grid (`gridDim.{axis}` is 1): only the first is written")
    return ctx.hit(pos_of(where_unit, o.node), args={"var": shown, "alloc": alloc, "function": fn.name, "why": why},
                   evidence={"export": export.name, "kernel": kernel.name, "axis": axis,
                             "grid": " ".join(text(lc.grid).split())[:60] if lc.grid is not None else None})


def _grid_rank(node: ts.Node | None, fn: Function) -> int | None:
    """How many grid dimensions a launch's grid expression sets: 1 for an integer expression, the
    argument count of ``dim3(...)`` (a local ``dim3 g(a, b)`` / ``dim3 g = {a, b}`` too); None unknown."""
    if node is None:
        return None
    if node.type == "call_expression":
        if callee_name(node.child_by_field_name("function")) == "dim3":
            return len(call_args(node))
        return None
    if node.type == "identifier":
        typ = fn.local_types.get(text(node), "")
        if "dim3" in typ:
            values = fn.assigned.get(text(node)) or []
            if len(values) == 1 and values[0].type in ("argument_list", "initializer_list"):
                return values[0].named_child_count
            return None
        return 1 if typ.replace("const", "").strip() in _INT_TYPES else None
    if node.type in ("number_literal", "binary_expression", "parenthesized_expression"):
        return 1
    return None


_INT_TYPES = frozenset({"int", "unsignedint", "unsigned", "int64_t", "int32_t", "uint32_t", "size_t", "long",
                        "autoint", "auto"})


class _SiteMapper:
    """Maps a node in a helper to the call in ``fn`` through which the helper runs."""

    def __init__(self, facts: CudaFacts, flow: CudaFlow, fn: Function):
        self.facts, self.flow, self.fn = facts, flow, fn
        self._closures: dict[int, set[int]] = {}

    def site(self, where: Function, node: ts.Node) -> ts.Node | None:
        if where is self.fn:
            return node
        x = self.facts.extensions[self.fn.ext]
        for c in self.fn.calls:
            if c.is_method:
                continue
            for g in x.lookup(c.name, "host"):
                if g is self.fn:
                    continue
                closure = self._closures.get(id(g))
                if closure is None:
                    closure = self._closures[id(g)] = {id(h) for h in self.flow.host_closure(g)}
                if id(where) in closure:
                    return c.node
        return None


def _in_loop(node: ts.Node, fn: Function) -> bool:
    return enclosing(node, _LOOPS, fn.node) is not None


def _unwritten_arm(storing: list[ts.Node], unstored: list[tuple[ts.Node, Launch]], fn: Function) -> str | None:
    """A launch that receives the output without storing to it, on an ``if`` arm where nothing else
    writes it while the other arm does: that path returns the output unwritten."""
    for site, lc in unstored:
        cur = site.parent
        while cur is not None and cur != fn.node:
            if cur.type == "if_statement":
                then = cur.child_by_field_name("consequence")
                other = cur.child_by_field_name("alternative")
                if then is not None and other is not None:
                    mine, theirs = (then, other) if contains(then, site) else (other, then)
                    if (contains(mine, site) and not any(contains(mine, w) for w in storing)
                            and any(contains(theirs, w) for w in storing)
                            and not any(w.start_byte < cur.start_byte for w in storing)):
                        return (f"on one branch only kernel `{lc.kernel}` receives it, and that kernel never stores "
                                "through the parameter")
            cur = cur.parent
    return None


def _sink_allocs(facts: CudaFacts, flow: CudaFlow, fn: Function, call) -> list[ts.Node]:
    """Allocations a non-launch call may write: ``out.copy_(...)``, ``at::mm_out(out, ...)``,
    ``cublasSgemm(..., out.data_ptr<float>(), ...)``, ``cudaMemcpy(out.data_ptr(), ...)``."""
    x = facts.extensions[fn.ext]
    out: list[ts.Node] = []
    if call.is_method:
        if call.receiver is not None and _MUTATORS.match(call.base):
            out.extend(o.node for o in flow.origins(call.receiver, fn) if o.kind == "alloc" and o.node is not None)
        elif call.receiver is not None and foreign_object(flow, fn, call):
            # ``module->inference(stream, n, in, out.data_ptr(), ...)``, ``plan.execute(handle, pack)``:
            # an object of another library's class that receives the output's pointer may write it
            for a in call.args:
                if a.type not in ("number_literal", "string_literal"):
                    out.extend(o.node for o in flow.origins(a, fn) if o.kind == "alloc" and o.node is not None)
        return out
    base = call.base
    if base in names.ATEN_ALLOWED or x.lookup(call.name, "host") or base in _PURE_HOST or base in CAST_CALLS:
        return out
    for a in call.args:
        if a.type in ("number_literal", "string_literal"):
            continue
        out.extend(o.node for o in flow.origins(a, fn) if o.kind == "alloc" and o.node is not None)
    return out


def _runtime_launcher(fn: Function):
    """A call in ``fn`` of a local bound to a callable obtained at run time (``auto launcher =
    get_launcher(...); launcher(params);``): what it runs is not in this source."""
    for c in fn.calls:
        if c.is_method or "::" in c.name:
            continue
        values = fn.assigned.get(c.name)
        if values and all(v.type == "call_expression" for v in values) and c.args:
            return c
    return None


_TENSOR_KINDS = frozenset({"alloc", "input", "aten", "copy", "literal"})
# value types whose methods only hold or describe pointers (a container, a string, a tensor)
_HOLDER_TYPE = re.compile(r"^(const\s+)?(std::|c10::|at::|torch::)|Tensor|vector|array|map|set|string|list")


def foreign_object(flow: CudaFlow, fn: Function, call) -> bool:
    """Whether a method call's receiver is an object of another library's class (reached through
    ``->``, or a local of a non-container, non-tensor type), not a tensor or a standard container."""
    if call.receiver.type != "call_expression" and any(o.kind in _TENSOR_KINDS
                                                        for o in flow.origins(call.receiver, fn)):
        return False
    func = call.node.child_by_field_name("function")
    if func is not None and func.type == "field_expression" and text(func.child_by_field_name("operator") or func)[:2] == "->":
        return True
    if call.receiver.type == "call_expression":
        # ``Builder().setDataPointers(n, ptrs).build()``: a chain on an object of another library
        root = call.receiver
        while root.type == "call_expression":
            f = root.child_by_field_name("function")
            nxt = f.child_by_field_name("argument") if f is not None and f.type == "field_expression" else None
            if nxt is None:
                break
            root = nxt
        # the chain's first object is built by a named constructor or factory of another library
        # (``cudnn_frontend::VariantPackBuilder()``); a tensor expression or a container is not
        return root.type == "call_expression" and not _HOLDER_TYPE.search(text(root)[:60]) and \
            not any(o.kind in _TENSOR_KINDS for o in flow.origins(root, fn))
    declared = fn.local_types.get(text(call.receiver))
    return declared is not None and not _HOLDER_TYPE.search(declared)


def _unstoring_launches(facts: CudaFacts, flow: CudaFlow, fn: Function, origin: Origin) -> list[str]:
    out = []
    for lc in flow.launches_from(fn):
        for arg in lc.args:
            if any(o.node == origin.node for o in flow.origins(arg, lc.function) if o.node is not None):
                out.append(lc.kernel)
    return out


# ------------------------------------------------------------------------------------- HS208

def cuda_static_cache(ctx: ScanContext) -> Iterator[Hit]:
    """HS208."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    state = [v for v in facts.static_locals + facts.globals if not v.device and not v.const]
    if not state:
        return
    tensors = [v for v in state if v.tensor_like]
    pointers = [v for v in state if not v.tensor_like and (v.pointer or re.search(r"int64|intptr|size_t", v.type))]
    keyed = {id(v) for v in tensors if v.container and _pointer_keyed(v.type)}
    returned_keyed: set[int] = set()
    for fn in facts.host_functions:
        visible_t = {v.name: v for v in tensors if v.ext == fn.ext and v.function in (None, fn)}
        visible_p = {v.name: v for v in pointers if v.ext == fn.ext and v.function in (None, fn)}
        if not visible_t and not visible_p:
            continue
        # locals that hold what a container lookup gave back (``auto it = cache.find(k)``)
        derived = _derived_from(fn, set(visible_t))
        sites = launch_sites(fn, flow)
        for r in flow.returns(fn):
            if r.value is None:
                continue
            ids = {text(i) for i in identifiers(r.value)}
            hit = next((n for n in ids if n in visible_t), None) or next(
                (derived[n] for n in ids if n in derived), None)
            if hit is None:
                continue
            var = visible_t[hit]
            before = [s for s in sites if s.start_byte < r.node.start_byte]
            arm = enclosing(r.node, ("if_statement",), fn.node)
            skipped = not before or (arm is not None and not any(contains(arm, s) for s in sites))
            if id(var) in keyed:
                returned_keyed.add(id(var))
                skipped = True
            sev = Severity.ERROR if skipped else Severity.WARNING
            what = (f"`{fn.name}` returns the static tensor `{hit}` kept from an earlier call"
                    + (" without launching a kernel on this path" if skipped
                       else "; successive calls return the same buffer"))
            yield ctx.hit(pos_of(fn.unit, r.node), severity=sev,
                          confidence=Confidence.HIGH if skipped else Confidence.MEDIUM,
                          args={"what": what}, evidence={"variable": hit, "function": fn.key})
        for br in branches(fn, flow):
            ctext = text(br.condition)
            if not re.search(r"data_ptr|\.data\(\)|is_same|\bdata\b", ctext) or not re.search(r"[=!]=", ctext):
                continue
            idents = [text(i) for i in identifiers(br.condition)]
            held = next((n for n in idents if n in visible_p), None) or next(
                (n for n in idents if n in visible_t), None)
            if held is None:
                continue
            effect, skips = launch_effect(br, fn, flow)
            if not skips:
                continue  # refreshing a cache (a transformed weight) when the pointer changes: fine
            yield ctx.hit(pos_of(fn.unit, br.node),
                          args={"what": f"`{fn.name}` compares an input pointer with `{held}`, kept from a previous "
                                        f"call (a last-pointer check), and {effect}"},
                          evidence={"condition": " ".join(ctext.split())[:80], "function": fn.key})
    for v in tensors:
        if id(v) in keyed and id(v) not in returned_keyed:
            yield ctx.hit(v.pos, severity=Severity.WARNING, confidence=Confidence.LOW,
                          evidence={"variable": v.name, "type": v.type},
                          args={"what": f"`{v.name}` ({v.type}) keeps tensors keyed by a pointer; fine for weight "
                                        "transforms, a stale-result cache when it holds outputs"})


def _derived_from(fn: Function, names_: set[str]) -> dict[str, str]:
    """Local -> the static container it was read from."""
    out: dict[str, str] = {}
    for name, values in fn.assigned.items():
        for v in values:
            src = next((text(i) for i in identifiers(v) if text(i) in names_), None)
            if src is not None:
                out[name] = src
                break
    return out


def _pointer_keyed(type_text: str) -> bool:
    m = re.search(r"map<([^,]+),", type_text)
    if not m:
        return False
    key = m.group(1)
    return "*" in key or bool(re.search(r"intptr|uintptr|int64_t|size_t|long", key))


# ------------------------------------------------------------------------------------- HS213

def cuda_input_mutation(ctx: ScanContext) -> Iterator[Hit]:
    """HS213."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    if ctx.reference is not None and any(op.endswith("_") for op in ctx.reference.forward_ops):
        return  # the reference itself works in place
    done: set[tuple] = set()
    for export, root in facts.exported_functions():
        if root.kind != "host":
            continue
        # (position, writer, parameter written, origin) for kernel stores and host stores alike;
        # only stores into the export's own inputs are kept (the others are never reported), so
        # positions and names are worked out for those alone
        writes: list[tuple] = []
        for lc in flow.launches_from(root):
            kernel = facts.kernel_for(lc)
            if kernel is None:
                continue
            stores = flow.stores(kernel)
            for idx in sorted(stores.by_param):
                if idx >= len(lc.args):
                    continue
                pname = kernel.params[idx].name if idx < len(kernel.params) else f"#{idx}"
                for o in flow.origins(lc.args[idx], lc.function):
                    if o.kind != "input" or o.function is not root or o.aggregate:
                        continue
                    writes.append((lc.pos, f"kernel `{kernel.name}`", pname, o))
        for g in flow.host_closure(root):
            # assignments through pointers, and library calls that fill or copy into one (memset, cudaMemcpy)
            for node, origins in flow.host_stores(g) + flow.host_fills(g):
                for o in origins:
                    if o.kind != "input" or o.function is not root or o.aggregate:
                        continue
                    if node.type == "call_expression":  # a fill: what it writes is its first argument
                        args = node.child_by_field_name("arguments")
                        first = args.named_children[0] if args is not None and args.named_children else node
                        written = f"{text(first)} (through {callee_name(node.child_by_field_name('function') or node)})"
                    else:
                        written = text(node.child_by_field_name("left") or node)
                    writes.append((pos_of(g.unit, node), f"host code in `{g.name}`", " ".join(written.split())[:60], o))
        for pos, writer, pname, o in writes:
            key = (export.ext, export.name, o.index, writer)
            if key in done:
                continue
            done.add(key)
            how, where = _python_caller(ctx, export, o.index, o.detail)
            if how == "own":
                continue
            if how == "forward":
                sev, conf = Severity.ERROR, Confidence.HIGH
                caller = f"; `forward` passes its own argument there ({where})"
            elif how == "state":
                sev, conf = Severity.WARNING, Confidence.MEDIUM
                caller = f"; the caller passes module state ({where})"
            elif how == "param":
                sev, conf = Severity.WARNING, Confidence.MEDIUM
                caller = f"; the caller passes its own argument ({where})"
            else:
                sev, conf = Severity.WARNING, Confidence.LOW
                caller = ""
            yield ctx.hit(pos, severity=sev, confidence=conf,
                          message=f"{writer} stores into `{pname}`, which is the tensor passed to `{export.name}` "
                                  f"as argument {o.index}{caller}",
                          evidence={"export": export.name, "parameter": o.detail, "python": how})


_ALIAS_PY = frozenset({"contiguous", "view", "reshape", "flatten", "squeeze", "unsqueeze", "view_as", "reshape_as",
                       "transpose", "t", "permute", "expand", "narrow", "select", "detach", "cuda", "to", "float",
                       "data"})


def _python_caller(ctx: ScanContext, export: Export, index: int, pname: str) -> tuple[str, str]:
    """How the Python side feeds parameter ``index`` of ``export``: forward / param / state / own / unknown."""
    host = ctx.host
    if host is None:
        return "unknown", ""
    worst = ("unknown", "")
    rank = {"unknown": 0, "own": 1, "state": 2, "param": 3, "forward": 4}
    found_any = False
    for call in host.of_type(ast.Call):
        got = host.extension_for_call(call)  # type: ignore[arg-type]
        if got is None:
            continue
        ext, fname = got
        if ext.name != export.ext or fname != export.name:
            continue
        arg = None
        if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
            arg = call.args[index]
        else:
            arg = next((k.value for k in call.keywords if k.arg == pname), None)
        if arg is None:
            continue
        found_any = True
        how = _classify_arg(host, call, arg)
        line = getattr(call, "lineno", 0)
        if rank[how] > rank[worst[0]] or (worst[0] == "unknown" and how == "own"):
            worst = (how, f"line {line}")
    if not found_any:
        return "unknown", ""
    return worst


def _self_attr_is_buffer(host, attr: str) -> bool:
    """``self.static_out = torch.empty_like(x)``: a buffer the module allocated for itself (not a
    parameter, not an input it kept)."""
    found = False
    for node in host.of_type(ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) and t.value.id == "self":
                value = node.value
                if not isinstance(value, ast.Call):
                    if not (isinstance(value, ast.Constant) and value.value is None):
                        return False
                    continue
                name = host.canonical(value.func)
                last = name.rsplit(".", 1)[-1]
                if last in ("Parameter", "Buffer") or (isinstance(value.func, ast.Attribute) and
                                                       value.func.attr in _ALIAS_PY):
                    return False
                found = True
    return found


def _classify_arg(host, call: ast.Call, arg: ast.AST, depth: int = 0) -> str:
    fn = host.enclosing(call, ast.FunctionDef, ast.AsyncFunctionDef)
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute):
        if arg.func.attr in _ALIAS_PY:
            return _classify_arg(host, call, arg.func.value, depth + 1)
        return "own"
    if isinstance(arg, ast.Attribute):
        base = arg.value
        if isinstance(base, ast.Name) and base.id == "self":
            return "own" if _self_attr_is_buffer(host, arg.attr) else "state"
        if arg.attr == "data":
            return _classify_arg(host, call, base, depth + 1)
        return "unknown"
    if isinstance(arg, ast.Subscript):
        return _classify_arg(host, call, arg.value, depth + 1)
    if not isinstance(arg, ast.Name) or fn is None:
        return "own" if isinstance(arg, (ast.Call, ast.BinOp)) else "unknown"
    # the last assignment to the name above the call, within the function
    last = None
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.lineno < call.lineno:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == arg.id for t in targets):
                if last is None or node.lineno > last.lineno:
                    last = node
    if last is not None and last.value is not None and depth < 4:
        value = last.value
        if isinstance(value, ast.Name) or (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                                           and value.func.attr in _ALIAS_PY):
            return _classify_arg(host, last, value, depth + 1) if isinstance(value, ast.Name) else \
                _classify_arg(host, call, value, depth + 1)
        return "own"
    params = [a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs if a.arg != "self"]
    if arg.id in params:
        return "forward" if fn.name == "forward" else "param"
    return "unknown"


__all__ = ["cuda_unwritten_output", "cuda_static_cache", "cuda_input_mutation", "Variable"]
