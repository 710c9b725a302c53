"""Timing escape (TAXONOMY class 9): work that runs outside the window the harness times.

A harness records CUDA events on the *current* stream around a call (or synchronizes the device
and reads a wall clock).  Work launched on another stream, in another thread, or deferred until
someone looks at the result (a tensor subclass that computes lazily) is not inside that window
unless the candidate joins it back before returning.  On an H200, an 8192^3 matmul on a side
stream reads 0.24 ms by current-stream events against 21.5 ms of real time.  These checks find the
escape and look for the join.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.module import subtree
from ...python.patterns import MiscFacts
from ...python.resolve import dotted_name
from .harness_fallback import HarnessModel

STREAM_CTORS = {"torch.cuda.Stream", "torch.cuda.streams.Stream", "torch.cuda.ExternalStream", "cupy.cuda.Stream",
                "cupy.cuda.stream.Stream", "torch.Stream", "torch.cuda.streams.ExternalStream"}
STREAM_CONTEXTS = {"torch.cuda.stream", "torch.cuda.StreamContext", "torch.cuda.streams.StreamContext",
                   "torch.cuda.set_stream", "torch.cuda.use_stream", "cupy.cuda.using_stream"}
CURRENT_STREAMS = {"torch.cuda.current_stream", "torch.cuda.default_stream", "cupy.cuda.get_current_stream",
                   "torch.cuda.Stream.null", "cupy.cuda.Stream.null"}
DEVICE_SYNCS = {"torch.cuda.synchronize", "cupy.cuda.runtime.deviceSynchronize", "cupy.cuda.Device.synchronize",
                "torch.cuda.current_stream.synchronize"}
THREAD_CTORS = {
    "threading.Thread": "a thread", "threading.Timer": "a timer thread",
    "concurrent.futures.ThreadPoolExecutor": "a thread pool", "concurrent.futures.ProcessPoolExecutor": "a process pool",
    "concurrent.futures.thread.ThreadPoolExecutor": "a thread pool", "multiprocessing.Process": "a process",
    "multiprocessing.Pool": "a process pool", "multiprocessing.pool.ThreadPool": "a thread pool",
    "multiprocessing.pool.Pool": "a process pool", "_thread.start_new_thread": "a raw thread",
    "asyncio.create_task": "an asyncio task", "asyncio.ensure_future": "an asyncio task",
    "asyncio.run_coroutine_threadsafe": "an asyncio task",
}
_THREAD_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in THREAD_CTORS) | {"run_in_executor"}
JOINS = ("join", "result", "shutdown", "wait", "exception")
JOIN_FUNCS = {"concurrent.futures.wait", "concurrent.futures.as_completed", "asyncio.gather", "asyncio.wait",
              "asyncio.run"}


def _side_streams(facts: MiscFacts) -> set[str]:
    """Dotted names (``self.stream``, ``s``, ``streams``) bound to streams the candidate creates."""
    host = facts.host
    out: set[str] = set()
    ctor_calls = {id(c) for c in facts.calls_named("Stream", "ExternalStream") if facts.cname(c) in STREAM_CTORS}
    if not ctor_calls:
        return out
    calls = []
    for node in host.of_type(ast.Assign):
        if any(id(n) in ctor_calls for n in subtree(node.value)):
            _add_targets(node, out)
        elif isinstance(node.value, ast.Call):
            calls.append(node)
    # ``side = streams[int(x.is_cuda)]()``: what calling a name that holds a stream factory gives
    for node in calls:
        if _is_side(host, node.value, out):
            _add_targets(node, out)
    return out


def _add_targets(node: ast.Assign, out: set[str]) -> None:
    for t in node.targets:
        for tt in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
            name = dotted_name(tt)
            if name:
                out.add(name)


def _is_side(host, expr: ast.AST | None, side: set[str]) -> bool:
    if expr is None:
        return False
    e = expr
    while isinstance(e, ast.Subscript):
        e = e.value
    if isinstance(e, ast.Call):
        name = host.canonical(e.func)
        if name in STREAM_CTORS:
            return True
        if name in CURRENT_STREAMS:
            return False
        # calling what a side name holds: ``_streams[int(x.is_cuda)]()`` with ``_streams =
        # (torch.cuda.current_stream, lambda: torch.cuda.Stream())``, a factory bound to a name: any entry
        # the index can pick may be the stream the candidate created
        f = e.func
        while isinstance(f, ast.Subscript):
            f = f.value
        return bool(dotted_name(f)) and dotted_name(f) in side
    return bool(dotted_name(e)) and dotted_name(e) in side


def _stream_uses(facts: MiscFacts, side: set[str]) -> list[tuple[ast.AST, ast.AST, str]]:
    """(node, its function, how) for every place work is put on a side stream."""
    host = facts.host
    uses: list[tuple[ast.AST, ast.AST, str]] = []
    for item in host.of_type(ast.withitem):
        ctx_expr = item.context_expr
        fn = facts.owner(item)
        if isinstance(ctx_expr, ast.Call) and host.canonical(ctx_expr.func) in STREAM_CONTEXTS and ctx_expr.args:
            if _is_side(host, ctx_expr.args[0], side):
                uses.append((ctx_expr, fn, f"work in `with {ast.unparse(ctx_expr)[:50]}`"))
        elif _is_side(host, ctx_expr, side):
            uses.append((ctx_expr, fn, f"work in `with {ast.unparse(ctx_expr)[:50]}`"))
    for call in host.of_type(ast.Call):
        name = facts.cname(call) if isinstance(call.func, ast.Attribute) and call.func.attr == "set_stream" else ""
        if name in ("torch.cuda.set_stream", "cupy.cuda.Stream.use") and call.args and _is_side(host, call.args[0], side):
            uses.append((call, facts.owner(call), f"{name}() to a side stream"))
        elif isinstance(call.func, ast.Attribute) and call.func.attr == "use" and _is_side(host, call.func.value, side):
            uses.append((call, facts.owner(call), "a cupy stream made current with .use()"))
        for k in call.keywords:
            if k.arg == "stream" and _is_side(host, k.value, side):
                uses.append((call, facts.owner(call), f"a launch with stream={ast.unparse(k.value)[:40]}"))
        for a in call.args:
            # a raw handle handed to an extension: s.cuda_stream / s.ptr / s.handle
            if isinstance(a, ast.Attribute) and a.attr in ("cuda_stream", "ptr", "handle", "stream_id") and \
                    _is_side(host, a.value, side):
                uses.append((call, facts.owner(call), f"a raw side-stream handle ({ast.unparse(a)[:40]}) passed to "
                                                      "compiled code"))
    return uses


def _is_join(host, call: ast.Call, side: set[str], blocking_only: bool = False) -> bool:
    """A call that makes later work (or the host) wait for the side stream.

    ``blocking_only``: after ``set_stream`` (or inside the side stream's own ``with`` block) the
    "current stream" *is* the side stream, so only host-blocking synchronisation joins it.
    """
    name = host.canonical(call.func)
    if name in DEVICE_SYNCS:
        return True
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    if f.attr == "synchronize":
        return True
    if blocking_only:
        return False
    if f.attr == "wait_stream":
        return not _is_side(host, f.value, side)  # side.wait_stream(main) is the fork, not the join
    if f.attr == "wait_event":
        return True
    if f.attr == "wait":  # event.wait(stream): joins unless it makes a side stream wait
        return not call.args or not _is_side(host, call.args[0], side)
    return False


def _joined_after(facts: MiscFacts, node: ast.AST, fn: ast.AST | None, side: set[str], depth: int = 0,
                  blocking_only: bool = False, block_end: int | None = None,
                  dead: Callable[[ast.AST], bool] | None = None) -> bool:
    host = facts.host
    line = node.lineno
    for call in facts.nodes_by_owner(ast.Call).get(fn, ()):
        if call.lineno < line:
            continue
        inside = block_end is not None and call.lineno <= block_end
        if _is_join(host, call, side, blocking_only or inside) and (dead is None or not dead(call)):
            return True
        if depth < 2 and (dead is None or not dead(call)):
            # a helper called after the launch may do the join (self._sync())
            for target in facts.call_targets(call):
                if any(_is_join(host, c, side, blocking_only or inside)
                       for c in facts.nodes_by_owner(ast.Call).get(target, ())):
                    return True
    if fn is None or fn is facts.forward or depth >= 2:
        return False
    sites = [c for g in facts.runs for c in facts.nodes_by_owner(ast.Call).get(g, ()) if fn in facts.call_targets(c)]
    return bool(sites) and all(_joined_after(facts, c, facts.owner(c), side, depth + 1, blocking_only, dead=dead)
                               for c in sites)


def _harness_dead(ctx: ScanContext) -> Callable[[ast.AST], bool]:
    """Whether a join sits in an ``if`` arm the benchmark never takes (``if x.requires_grad:`` under
    ``no_grad`` inputs, ``if not self.training:`` under KernelBench): such a join never runs when timed.
    The harness model (HS118's) is built on the first join asked about."""
    host = ctx.host
    model: list[HarnessModel | None] = []

    def dead(call: ast.AST) -> bool:
        if not model:
            flow = ctx.model_flow
            model.append(HarnessModel(ctx, flow) if flow is not None and flow.forward is not None else None)
        harness = model[0]
        if harness is None:
            return False
        child = call
        for anc in host.ancestors(call):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                return False
            if isinstance(anc, ast.If) and child is not anc.test:
                harness.reasons = []
                truth = harness.truth(anc.test)
                if truth is not None and truth != (child in anc.body):
                    return True
            child = anc
        return False
    return dead


def unjoined_side_stream(ctx: ScanContext) -> Iterator[Hit]:
    """HS140: work on a stream the candidate created, not joined to the current stream before returning."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("Stream", "stream", "set_stream", "ExternalStream", "using_stream"):
        return
    side = _side_streams(facts)
    if not side:
        return
    runs = facts.runs
    dead: Callable[[ast.AST], bool] | None = None
    for node, fn, how in _stream_uses(facts, side):
        if fn not in runs or facts.is_main_guarded(node):
            continue
        with_stmt = next((a for a in host.ancestors(node) if isinstance(a, (ast.With, ast.AsyncWith))), None) \
            if how.startswith("work in") else None
        block_end = with_stmt.end_lineno if with_stmt is not None else None
        if dead is None:
            dead = _harness_dead(ctx)
        if _joined_after(facts, node, fn, side, blocking_only="set_stream" in how or ".use()" in how,
                         block_end=block_end, dead=dead):
            continue
        in_forward = fn in facts.reachable_set
        yield ctx.hit(ctx.at(node), args={"how": how, "where": f"{getattr(fn, 'name', 'module code')}()"},
                      severity=None if in_forward else Severity.WARNING,
                      confidence=None if in_forward else Confidence.MEDIUM,
                      evidence={"use": how, "in_forward": in_forward})


def unjoined_background_work(ctx: ScanContext) -> Iterator[Hit]:
    """HS141: threads, pools and processes whose work is not joined before forward returns."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_THREAD_ATTRS):
        return
    runs = facts.runs
    for call in facts.calls_named(*_THREAD_ATTRS):
        name = facts.cname(call)
        what = THREAD_CTORS.get(name)
        if what is None and isinstance(call.func, ast.Attribute) and call.func.attr == "run_in_executor":
            what = "an executor task"
        if what is None:
            continue
        fn = facts.owner(call)
        if fn not in runs or facts.is_main_guarded(call):
            continue
        if _thread_joined(facts, call, fn):
            continue
        in_forward = fn in facts.reachable_set
        yield ctx.hit(ctx.at(call), args={"what": what, "where": f"{getattr(fn, 'name', 'module code')}()"},
                      severity=None if in_forward else Severity.WARNING,
                      confidence=None if in_forward else Confidence.MEDIUM, evidence={"ctor": name})


def _thread_joined(facts: MiscFacts, ctor: ast.Call, fn: ast.AST | None) -> bool:
    host = facts.host
    # `with ThreadPoolExecutor() as ex:` waits for its tasks on exit
    parent = host.parents.get(ctor)
    if isinstance(parent, ast.withitem):
        return True
    for call in facts.nodes_by_owner(ast.Call).get(fn, ()):
        if call.lineno < ctor.lineno:
            continue
        if host.canonical(call.func) in JOIN_FUNCS:
            return True
        if isinstance(call.func, ast.Attribute) and call.func.attr in JOINS and _waits(call):
            return True
    return False


def _waits(call: ast.Call) -> bool:
    """``t.join()`` waits; ``t.join(0.0)`` / ``fut.result(timeout=0)`` only peek; ``", ".join(xs)`` is a string."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Constant):
        return False
    if any(k.arg == "wait" and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords):
        return False  # executor.shutdown(wait=False)
    timeout = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "timeout"), None)
    if timeout is None:
        return not call.args
    if isinstance(timeout, ast.Constant) and isinstance(timeout.value, (int, float)):
        return timeout.value >= 1
    return not isinstance(timeout, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp, ast.Name)) or \
        f.attr != "join"


def deferred_tensor_subclass(ctx: ScanContext) -> Iterator[Hit]:
    """HS142: tensor subclasses / wrappers with __torch_function__ or __torch_dispatch__ (lazy results)."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("__torch_function__", "__torch_dispatch__", "_make_subclass", "_make_wrapper_subclass"):
        return
    lazy: dict[str, tuple[ast.ClassDef, str]] = {}
    for cls in host.of_type(ast.ClassDef):
        hooks = [s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name in (
            "__torch_function__", "__torch_dispatch__")]
        if hooks:
            lazy[cls.name] = (cls, hooks[0])
    for call in host.of_type(ast.Call):
        name = host.canonical(call.func)
        if name in ("torch.Tensor._make_subclass", "torch.Tensor._make_wrapper_subclass"):
            cls = host.enclosing(call, ast.ClassDef)
            if isinstance(cls, ast.ClassDef) and cls.name not in lazy:
                lazy[cls.name] = (cls, name.rsplit(".", 1)[-1])
    if not lazy:
        return
    reach = facts.reachable_set
    for name, (cls, hook) in lazy.items():
        built = [c for c in facts.calls_named(name) if isinstance(c.func, ast.Name) and facts.owner(c) in reach]
        if built:
            site = min(built, key=lambda c: c.lineno)
            yield ctx.hit(ctx.at(cls), args={"cls": name, "hook": hook,
                                             "what": f"forward builds one at line {site.lineno}, so the result can "
                                                     "compute when it is used, after the timed window"},
                          evidence={"class": name, "hook": hook, "built_at": site.lineno})
        else:
            yield ctx.hit(ctx.at(cls), args={"cls": name, "hook": hook,
                                             "what": "no construction from forward was found"},
                          severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                          evidence={"class": name, "hook": hook})
