"""Escaping the timer: side streams never joined (HS209), host threads (HS210), and redefining the
CUDA / timing API the harness measures with (HS211)."""

from __future__ import annotations

from collections.abc import Iterator

import tree_sitter as ts

from ...context import Hit, ScanContext
from ...cuda import names
from ...cuda.facts import CudaFacts
from ...cuda.flow import CudaFlow
from ...cuda.parser import callee_name, identifiers, text
from ...cuda.records import Call, Function, Launch, pos_of
from ...model import Confidence, Severity

_DEFAULT_STREAMS = frozenset({"cudaStreamLegacy", "cudaStreamPerThread", "nullptr", "NULL", "0", "stream_default"})
_GUARDS = ("CUDAStreamGuard", "OptionalCUDAStreamGuard", "StreamGuard")
_GUARDS_BYTES = tuple(g.encode() for g in _GUARDS)
# calls that bind a library handle to a stream: (handle, stream) arguments
_LIBRARY_SET_STREAM = frozenset({"cublasSetStream", "cublasSetStream_v2", "cublasLtSetStream", "cusparseSetStream",
                                 "cusolverDnSetStream", "cudnnSetStream", "cufftSetStream", "curandSetStream"})
_CAPTURE = frozenset({"cudaStreamBeginCapture", "cudaStreamEndCapture", "capture_begin", "capture_end"})


def _first_ident(node: ts.Node) -> str | None:
    for i in identifiers(node):
        return text(i)
    return None


def _assigned_name(call: Call) -> str | None:
    """The local a call's result is stored in: ``auto s = getStreamFromPool();``."""
    parent = call.node.parent
    while parent is not None and parent.type in ("call_expression", "field_expression", "argument_list",
                                                 "parenthesized_expression"):
        parent = parent.parent
    if parent is None:
        return None
    if parent.type == "init_declarator":
        d = parent.child_by_field_name("declarator")
        return text(d) if d is not None and d.type == "identifier" else None
    if parent.type == "assignment_expression":
        left = parent.child_by_field_name("left")
        return _first_ident(left) if left is not None else None
    return None


def _created_streams(facts: CudaFacts) -> dict[tuple[str, str], Call]:
    created: dict[tuple[str, str], Call] = {}
    for fn in facts.host_functions:
        for c in fn.calls:
            if c.is_method:
                continue
            if c.base in names.STREAM_CREATE and c.args:
                name = _first_ident(c.args[0])
                if name:
                    created[(fn.ext, name)] = c
            elif c.base in names.STREAM_FROM_POOL:
                name = _assigned_name(c)
                created[(fn.ext, name or f"<pool@{c.pos.line}>")] = c
    return created


def _stream_kind(expr: ts.Node | None, fn: Function, flow: CudaFlow, created: dict[tuple[str, str], Call],
                 used: set[int] | None = None) -> str:
    """``current`` / ``default`` / ``side`` / ``unknown`` for a launch's stream expression.

    ``used`` collects the ids of the creation calls a side stream traces back to."""
    if expr is None:
        return "default"
    if text(expr).strip() in _DEFAULT_STREAMS:
        return "default"
    kinds = set()
    by_node = {c.node.id: c for c in created.values()}
    for o in flow.origins(expr, fn):
        last = o.detail.rsplit("::", 1)[-1]
        if o.kind in ("aten", "call") and last in names.STREAM_CURRENT:
            kinds.add("current")
        elif o.kind in ("aten", "call") and last in names.STREAM_FROM_POOL:
            kinds.add("side")
            if used is not None and o.node is not None and o.node.id in by_node:
                used.add(id(by_node[o.node.id]))
        elif o.kind == "literal" or last in _DEFAULT_STREAMS:
            kinds.add("default")
        elif o.kind in ("local", "static", "global", "unknown") and (o.function.ext if o.function else fn.ext,
                                                                      o.detail) in created:
            kinds.add("side")
            if used is not None:
                used.add(id(created[(o.function.ext if o.function else fn.ext, o.detail)]))
        else:
            kinds.add("unknown")
    if "side" in kinds:
        return "side"
    if kinds and kinds <= {"current", "default"}:
        return "current"
    return "unknown"


def _guarded_side(fn: Function, flow: CudaFlow, created: dict[tuple[str, str], Call],
                  used: set[int] | None = None) -> ts.Node | None:
    """A ``CUDAStreamGuard g(side)`` / ``setCurrentCUDAStream(side)`` in ``fn``: "current" is then the side stream."""
    for decl in fn.of_type("declaration"):
        tnode = decl.child_by_field_name("type")
        # the bytes of the type: the source is UTF-8 and the names are ASCII, so this is the test
        # on its text without decoding every declaration's type
        if tnode is None or not (tnode.text or b"").endswith(_GUARDS_BYTES):
            continue
        for d in decl.children_by_field_name("declarator"):
            arg = None
            if d.type == "init_declarator":
                value = d.child_by_field_name("value")
                if value is not None and value.named_child_count:
                    arg = value.named_children[0]
            elif d.type == "function_declarator":  # ``CUDAStreamGuard guard(side);`` parses as a declaration
                params = d.child_by_field_name("parameters")
                if params is not None and params.named_child_count:
                    first = params.named_children[0]
                    arg = first.child_by_field_name("type") if first.type == "parameter_declaration" else first
            if arg is not None and _stream_kind(arg, fn, flow, created, used) == "side":
                return decl
    for c in fn.calls:
        if c.base == "setCurrentCUDAStream" and c.args and _stream_kind(c.args[0], fn, flow, created, used) == "side":
            return c.node
    return None


def _joins(facts: CudaFacts, flow: CudaFlow, root: Function, created: dict[tuple[str, str], Call]) -> list[Call]:
    """Calls that make the host or the current stream wait for other streams.

    ``cudaStreamWaitEvent(side, ev)`` is the fork direction (the side stream waits for the current
    one) and joins nothing; only a wait issued on the current or default stream does."""
    out = []
    for fn, c in flow.host_calls_from(root):
        if c.base not in names.STREAM_JOIN or (c.is_method and c.base not in ("synchronize", "wait", "block")):
            continue
        if c.base in ("cudaStreamWaitEvent", "cuStreamWaitEvent") and c.args:
            if _stream_kind(c.args[0], fn, flow, created) == "side":
                continue
        out.append(c)
    return out


def _joined_after(joins: list[Call], launch: Launch) -> bool:
    """A join that can run after the launch: later in the same function, or anywhere else."""
    for j in joins:
        if j.function is not launch.function or j.node.start_byte > launch.node.start_byte:
            return True
    return False


def cuda_unjoined_stream(ctx: ScanContext) -> Iterator[Hit]:
    """HS209."""
    facts = ctx.cuda
    flow = ctx.cuda_flow
    created = _created_streams(facts)
    used: set[int] = set()
    reported: set[int] = set()
    # a function's stream guard, worked out once: it depends on the function alone (``used`` only
    # collects, and a second look would add the same ids), while every launch there asks it
    guards: dict[int, ts.Node | None] = {}
    roots = [fn for e, fn in facts.exported_functions() if fn.kind == "host"] or facts.host_functions
    # each root's joins, worked out once and only when asked: for a launch on a side stream, and
    # for the streams created (most roots have neither)
    joins_of: dict[int, list[Call]] = {}

    def joins(root: Function) -> list[Call]:
        got = joins_of.get(id(root))
        if got is None:
            got = joins_of[id(root)] = _joins(facts, flow, root, created)
        return got

    captures: dict[int, bool] = {}  # per function: does it capture a CUDA graph (asked per launch)
    for root in roots:
        for lc in flow.launches_from(root):
            capturing = captures.get(id(lc.function))
            if capturing is None:
                capturing = captures[id(lc.function)] = any(c.base in _CAPTURE for c in lc.function.calls)
            if capturing:
                continue  # recorded into a CUDA graph, replayed later on the stream the graph is launched on
            kind = _stream_kind(lc.stream, lc.function, flow, created, used)
            guard = None
            if kind in ("current", "default"):
                key = id(lc.function)
                if key in guards:
                    guard = guards[key]
                else:
                    guard = guards[key] = _guarded_side(lc.function, flow, created, used)
                if guard is not None:
                    kind = "side"
            if kind != "side":
                continue
            if _joined_after(joins(root), lc) or lc.node.id in reported:
                continue
            reported.add(lc.node.id)
            stream = " ".join(text(lc.stream).split()) if lc.stream is not None else "the guarded stream"
            how = "switched to by a stream guard" if guard is not None else "created or taken from the pool"
            yield ctx.hit(lc.pos, args={"what": f"kernel `{lc.kernel}` is launched on `{stream}`, a stream {how}, "
                                                f"and nothing joins it back to the current stream before "
                                                f"`{root.name}` returns"},
                          evidence={"kernel": lc.kernel, "stream": stream, "export": root.name})
    if not created:
        return
    # a library handle bound to a created stream (``cublasSetStream(handle, side)``): every call on the
    # handle after it is work on that stream, as a launch on it would be
    for root in roots:
        for fn, c in flow.host_calls_from(root):
            if c.base not in _LIBRARY_SET_STREAM or c.is_method or len(c.args) < 2 or c.node.id in reported:
                continue
            if _stream_kind(c.args[1], fn, flow, created, used) != "side" or _joined_after(joins(root), c):
                continue
            reported.add(c.node.id)
            stream = " ".join(text(c.args[1]).split())
            yield ctx.hit(c.pos, args={"what": f"`{c.name}` binds the library handle to `{stream}`, a stream the "
                                                f"extension created, and nothing joins it back to the current "
                                                f"stream before `{root.name}` returns: the library's kernels run "
                                                "outside the harness's events"},
                          evidence={"call": c.name, "stream": stream, "export": root.name})
    joined_anywhere = any(joins(r) for r in roots)
    for (_ext, name), c in created.items():
        if id(c) in used or joined_anywhere:
            continue
        if c.function not in facts.reachable and facts.exports:
            continue
        if any(x.base in _CAPTURE for x in c.function.calls):
            continue  # a capture stream: its work runs when the graph is launched
        yield ctx.hit(c.pos, severity=Severity.WARNING, confidence=Confidence.LOW,
                      args={"what": f"`{c.function.name}` creates a stream (`{c.name}`) that is never joined to the "
                                    "current stream; if work runs on it the harness's events do not see it"},
                      evidence={"call": c.name, "stream": name})


# ------------------------------------------------------------------------------------- HS210

_THREAD_TYPES = ("std::thread", "std::jthread", "thread", "jthread")


def cuda_host_thread(ctx: ScanContext) -> Iterator[Hit]:
    """HS210."""
    facts = ctx.cuda
    for fn in facts.host_functions:
        starts: list[tuple[ts.Node, str, str | None]] = []  # (node, what, variable)
        for decl in fn.of_type("declaration"):
            tnode = decl.child_by_field_name("type")
            ttext = "".join(text(tnode).split()) if tnode is not None else ""
            if ttext in _THREAD_TYPES:
                for d in decl.children_by_field_name("declarator"):
                    if d.type == "init_declarator":
                        name = d.child_by_field_name("declarator")
                        starts.append((decl, ttext, text(name) if name is not None else None))
        for c in fn.calls:
            if c.is_method:
                if c.base == "emplace_back" and c.receiver is not None:
                    vtype = fn.local_types.get(text(c.receiver), "")
                    if "thread" in vtype:
                        starts.append((c.node, "std::thread", text(c.receiver)))
                continue
            if c.name in ("std::thread", "std::jthread"):
                starts.append((c.node, c.name, _assigned_name(c)))
            elif c.base in ("async",) and c.namespace in ("std", ""):
                starts.append((c.node, "std::async", _assigned_name(c)))
            elif c.base == "pthread_create":
                starts.append((c.node, "pthread_create", _first_ident(c.args[0]) if c.args else None))
        if not starts:
            continue
        methods = {(text(c.receiver) if c.receiver is not None else "", c.base) for c in fn.calls if c.is_method}
        detached_any = any(m == "detach" for _, m in methods)
        joined_any = any(m in ("join", "get", "wait") for _, m in methods) or any(
            c.base == "pthread_join" for c in fn.calls)
        range_joins = any(m == "join" for _, m in methods)
        for node, what, var in starts:
            detached = (var is not None and (var, "detach") in methods) or _chained_detach(node)
            joined = (var is not None and ((var, "join") in methods or (var, "get") in methods or
                                           (var, "wait") in methods)) or range_joins or (
                what == "pthread_create" and joined_any)
            if what == "std::async" and var is None and not detached:
                joined = True  # a discarded std::async future blocks in its destructor
            if detached or (detached_any and var is None):
                sev, conf, state = Severity.ERROR, Confidence.HIGH, "detaches it: its work outlives the call"
            elif not joined:
                sev, conf, state = Severity.ERROR, Confidence.MEDIUM, "never joins it before returning"
            else:
                sev, conf, state = Severity.WARNING, Confidence.LOW, (
                    "joins it before returning (kernels it launches run on that thread's stream)")
            yield ctx.hit(pos_of(fn.unit, node), severity=sev, confidence=conf,
                          args={"what": f"`{fn.name}` starts a host thread ({what}) and {state}"},
                          evidence={"function": fn.key, "thread": what, "variable": var})


def _chained_detach(node: ts.Node) -> bool:
    """``std::thread(...).detach()``."""
    parent = node.parent
    if parent is not None and parent.type == "field_expression":
        field = parent.child_by_field_name("field")
        return field is not None and text(field) == "detach"
    return False


# ------------------------------------------------------------------------------------- HS211

def cuda_api_interposition(ctx: ScanContext) -> Iterator[Hit]:
    """HS211."""
    facts = ctx.cuda
    for fn in facts.functions:
        if fn.kind != "host" or fn.lambda_export:
            continue
        name = fn.name
        c_linkage = _extern_c(fn.node)
        if name in names.HARNESS_API or (c_linkage and names.is_cuda_api_name(name)):
            # only a C-linkage definition replaces the library's symbol for other callers; a C++
            # overload merely shadows it inside the extension
            sev = None if c_linkage else Severity.WARNING
            conf = None if c_linkage else Confidence.MEDIUM
            yield ctx.hit(fn.pos, severity=sev, confidence=conf,
                          args={"how": "defines" + (" (with C linkage)" if c_linkage else " (a C++ overload)"),
                                "symbol": name},
                          evidence={"symbol": name, "c_linkage": c_linkage})
    for m in facts.macros:
        if m.name in names.HARNESS_API:
            yield ctx.hit(m.pos, args={"how": "#defines over", "symbol": m.name},
                          evidence={"symbol": m.name, "body": m.body[:80]})


def _extern_c(node: ts.Node) -> bool:
    cur = node.parent
    while cur is not None:
        if cur.type == "linkage_specification":
            return True
        cur = cur.parent
    for c in node.children:
        if c.type == "storage_class_specifier" and text(c) == "extern":
            return True
    return False


__all__ = ["cuda_unjoined_stream", "cuda_host_thread", "cuda_api_interposition", "callee_name"]
