"""Timer and harness tampering (TAXONOMY class 10).

A harness times with ``torch.cuda.Event`` / ``torch.cuda.synchronize`` / ``time.perf_counter`` and
compares with ``torch.allclose`` / ``torch.testing.assert_close``.  A candidate imported into the
same process can replace any of them; nothing legitimate does.  These checks look for writes to
attributes of those modules (directly, through aliases, ``setattr``, ``getattr`` with computed
names, module ``__dict__``s) and for the interpreter-level back doors (``sys.modules``,
``gc.get_objects``, ``ctypes`` memory writes, trace hooks).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Severity
from ...python.indirection import PARTIALS, loop_iterations
from ...python.patterns import CONFIG_PREFIXES, object_names

# roots whose attributes a harness relies on (``sys`` is handled by the interpreter-state rule)
_PATCH_ROOTS = ("torch", "time", "timeit", "triton", "numpy", "builtins", "gc", "os", "random", "functools",
                "importlib", "inspect", "threading", "cupy", "torch_xla", "jax")
# names whose replacement fakes a timing or a comparison outright
_TIMING = ("synchronize", "Event", "elapsed_time", "record", "perf_counter", "perf_counter_ns", "time", "time_ns",
           "monotonic", "process_time", "default_timer", "do_bench", "Timer", "timeit", "wait", "query",
           "current_stream", "Stream", "profile", "profiler", "benchmark")
_COMPARE = ("allclose", "isclose", "equal", "eq", "assert_close", "assert_allclose", "testing", "all", "any",
            "max", "abs", "sub", "norm", "__eq__", "__sub__", "__abs__", "ne")


def _is_config(name: str) -> bool:
    return name.startswith(CONFIG_PREFIXES)


def _what(name: str) -> str:
    last = name.rsplit(".", 1)[-1]
    if last in _TIMING or any(f".{t}." in f".{name}." for t in ("cuda.Event", "profiler", "benchmark")):
        return "a function a harness uses for timing"
    if last in _COMPARE or ".testing." in f".{name}.":
        return "a function a harness uses to compare outputs"
    return _GENERIC


_GENERIC = "an attribute of a module the harness shares with the candidate"


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        out: list[ast.AST] = []
        for t in node.targets:
            out.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        return out
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    return []


_SETTERS = ("setattr", "delattr", "__setattr__", "__delattr__", "update", "__setitem__", "setdefault")


def _root(target: ast.AST) -> str | None:
    """The leftmost name of an attribute / subscript chain (``torch`` for ``torch.cuda.x``)."""
    e = target
    while isinstance(e, (ast.Attribute, ast.Subscript, ast.Call)):
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else "" if e is not None else None


def _harness_name(name: str) -> bool:
    root = name.split(".", 1)[0]
    return root in _PATCH_ROOTS and "." in name and not _is_config(name)


def _fills_missing(host, node: ast.AST, t: ast.Attribute) -> bool:
    """``if "f" not in dir(torch.distributed): torch.distributed.f = torch.distributed._f`` (or
    ``if not hasattr(mod, "f")``): a back-port of an attribute this version of the module lacks.  It
    replaces nothing: where the harness runs, the attribute exists and the branch is not taken."""
    stmt_parent = None
    for anc in host.ancestors(node):
        if isinstance(anc, ast.If):
            stmt_parent = anc
            break
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            return False
    if stmt_parent is None or not any(node is x for s in stmt_parent.body for x in ast.walk(s)):
        return False
    test, obj, attr = stmt_parent.test, ast.dump(t.value), t.attr
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Call):
        c = test.operand
        return (isinstance(c.func, ast.Name) and c.func.id == "hasattr" and len(c.args) == 2
                and ast.dump(c.args[0]) == obj and isinstance(c.args[1], ast.Constant) and c.args[1].value == attr)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn):
        key, where = test.left, test.comparators[0]
        if not (isinstance(key, ast.Constant) and key.value == attr):
            return False
        if isinstance(where, ast.Call) and isinstance(where.func, ast.Name) and where.func.id in ("dir", "vars") \
                and where.args and ast.dump(where.args[0]) == obj:
            return True
        return isinstance(where, ast.Attribute) and where.attr == "__dict__" and ast.dump(where.value) == obj
    return False


def harness_function_patched(ctx: ScanContext) -> Iterator[Hit]:
    """HS150: assignments (and setattr) to attributes of torch, time, timing and testing modules."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    names = object_names(facts)
    for node in host.of_type(ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete):
        if type(node) is ast.Assign and len(node.targets) == 1:
            t0 = node.targets[0]
            tt0 = type(t0)
            if tt0 is ast.Name:
                continue  # ``x = ...``, most assignments: no attribute or subscript target
            if tt0 is ast.Attribute and type(t0.value) is ast.Name and t0.value.id in ("self", "cls"):
                continue  # ``self.x = ...``: skipped by the loop below too, without building the target list
        for t in _targets(node):
            tt = type(t)
            if tt is not ast.Attribute and tt is not ast.Subscript:
                continue
            v = t.value
            if type(v) is ast.Name and v.id in ("self", "cls"):
                continue  # ``self.x = ...``: by far the most common target, settled without a walk
            root = _root(t)
            if root is None or root in ("self", "cls"):
                continue  # the common case: instance state, never a module
            owner = facts.owner(node)
            target = ""
            if isinstance(t, ast.Attribute):
                target = names.resolve(t, owner)
            elif isinstance(t, ast.Subscript):
                # torch.cuda.__dict__["synchronize"] = f ; vars(time)["perf_counter"] = f
                base = t.value
                if isinstance(base, ast.Attribute) and base.attr == "__dict__":
                    obj = names.resolve(base.value, owner)
                elif isinstance(base, ast.Call) and host.canonical(base.func) == "vars" and base.args:
                    obj = names.resolve(base.args[0], owner)
                else:
                    obj = ""
                if obj:
                    key = names.fold_text(t.slice, owner)
                    target = f"{obj}.{key if key is not None else '<computed>'}"
            if target and _harness_name(target) and not (isinstance(t, ast.Attribute) and _fills_missing(host, node, t)):
                verb = "deletes" if isinstance(node, ast.Delete) else "assigns"
                yield ctx.hit(ctx.at(t), args={"verb": verb, "target": target, "what": _what(target)},
                              evidence={"target": target})
    for call, fname, args in _setter_calls(facts, host):
        obj_expr: ast.AST | None = None
        attr_expr: ast.AST | None = None
        if fname in ("setattr", "builtins.setattr", "delattr", "object.__setattr__", "type.__setattr__") and len(args) >= 2:
            obj_expr, attr_expr = args[0], args[1]
        elif isinstance(call.func, ast.Attribute) and call.func.attr in ("__setattr__", "__delattr__") and call.args:
            obj_expr, attr_expr = call.func.value, call.args[0]
        elif isinstance(call.func, ast.Attribute) and call.func.attr in ("update", "__setitem__", "setdefault"):
            base = call.func.value
            if isinstance(base, ast.Attribute) and base.attr == "__dict__":
                obj_expr = base.value
            elif isinstance(base, ast.Call) and host.canonical(base.func) == "vars" and base.args:
                obj_expr = base.args[0]
        if obj_expr is None:
            continue
        owner = facts.owner(call)
        obj = names.resolve(obj_expr, owner)
        rows: list[dict[str, ast.AST]] = [{}]
        if not obj and type(obj_expr) is ast.Name:
            # ``for owner, name in ((torch.cuda, "synchronize"), ...): setattr(owner, name, f)``: one
            # setattr per row of the literal table the loop walks
            rows = loop_iterations(call, host.ancestors(call))
        for row in rows:
            o = names.resolve(row[obj_expr.id], owner) if row and obj_expr.id in row else obj  # type: ignore[attr-defined]
            if not o:
                continue
            a = row.get(attr_expr.id, attr_expr) if row and type(attr_expr) is ast.Name else attr_expr  # type: ignore[union-attr]
            key = names.fold_text(a, owner) if a is not None else None
            target = f"{o}.{key if key is not None else '<computed>'}"
            if _harness_name(target) or (key is None and o.split(".", 1)[0] in _PATCH_ROOTS):
                yield ctx.hit(ctx.at(call), args={"verb": "sets", "target": target, "what": _what(target)},
                              evidence={"target": target, "via": fname or "__dict__"})
                break


def _setter_calls(facts, host) -> Iterator[tuple[ast.Call, str, list[ast.AST]]]:
    """The calls that may set an attribute, as (call, the setter's name, its arguments).

    ``functools.partial(setattr, torch)("allclose", f)`` and ``set_ = partial(setattr, torch);
    set_("allclose", f)`` are calls of ``setattr`` with the bound arguments first; building a partial
    alone sets nothing."""
    for call in facts.calls_named(*_SETTERS, "partial"):
        fname = facts.cname(call)
        if fname not in PARTIALS:
            yield call, fname, list(call.args)
            continue
        if not call.args:
            continue
        outer = host.parents.get(call)
        if type(outer) is ast.Call and outer.func is call:
            uses = [outer]
        elif type(outer) is ast.Assign and len(outer.targets) == 1 and type(outer.targets[0]) is ast.Name:
            name = outer.targets[0].id
            uses = [c for c in facts.calls_named(name) if type(c.func) is ast.Name and c.func.id == name]
        else:
            continue
        setter = host.canonical(call.args[0])
        for use in uses:
            yield use, setter, list(call.args[1:]) + list(use.args)


_GC_WALKS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_TRACE_HOOKS = {"sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile",
                "sys.addaudithook", "sys.monitoring.register_callback", "sys.monitoring.use_tool_id",
                "threading.settrace_all_threads", "threading.setprofile_all_threads"}
_CTYPES_WRITES = {"ctypes.memmove", "ctypes.memset", "ctypes.pythonapi", "ctypes.py_object", "ctypes.string_at",
                  "ctypes.cast"}
_SYS_STATE = ("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache")
_FRAME_STATE = ("f_globals", "f_locals", "f_builtins")
_INTERPRETER_NEEDLES = ("modules", "gc", "get_objects", "get_referrers", "get_referents", "settrace", "setprofile",
                        "addaudithook", "monitoring", "ctypes", "pythonapi", "memmove", "memset", "__builtins__",
                        "f_globals", "f_locals", "f_builtins", "__code__", "__globals__", "__closure__", "meta_path",
                        "path_hooks", "path_importer_cache")


_INTERPRETER_CALLS = frozenset(n.rsplit(".", 1)[-1] for n in _GC_WALKS | _TRACE_HOOKS | _CTYPES_WRITES) | {
    "update", "pop", "setdefault", "__setitem__", "__delitem__", "clear", "popitem", "insert", "append", "extend",
    "remove"}


def interpreter_state_tampering(ctx: ScanContext) -> Iterator[Hit]:
    """HS151: sys.modules / import hooks, gc heap walks, trace hooks, ctypes writes, builtins dicts."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_INTERPRETER_NEEDLES):
        return

    def state_of(expr: ast.AST, owner: ast.AST | None) -> str:
        e = expr
        while isinstance(e, (ast.Subscript, ast.Attribute)):
            if isinstance(e, ast.Attribute) and e.attr in _FRAME_STATE:
                return f"frame.{e.attr}"
            if isinstance(e, ast.Name) and e.id == "__builtins__":
                break
            inner = host.canonical(e)
            if inner in _SYS_STATE:
                return inner
            e = e.value
        if isinstance(e, ast.Name) and e.id == "__builtins__":
            return "__builtins__"
        name = host.canonical(e)
        return name if name in _SYS_STATE else ""

    for node in host.of_type(ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete):
        owner = None
        for t in _targets(node):
            if isinstance(t, ast.Name) and t.id != "__builtins__" or _root(t) in ("self", "cls", None):
                continue
            owner = facts.owner(node)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Subscript) and \
                    host.canonical(t.value.value) == "sys.modules":
                what = "sys.modules[...]." + t.attr
            elif isinstance(t, ast.Attribute) and t.attr in ("__code__", "__globals__", "__closure__"):
                what = f"a function's {t.attr} (rewriting another function's code)"
            elif isinstance(t, (ast.Subscript, ast.Attribute)):
                what = state_of(t, owner)
            elif isinstance(t, ast.Name) and t.id == "__builtins__":
                what = "__builtins__"
            else:
                what = ""
            if what:
                yield ctx.hit(ctx.at(t), args={"what": f"writes {what}"}, evidence={"state": what})
    candidates = facts.calls_named(*_INTERPRETER_CALLS)
    if facts.uses("pythonapi"):
        candidates = candidates + [c for c in host.of_type(ast.Call) if "pythonapi" in ast.unparse(c.func)]
    for call in candidates:
        fname = facts.cname(call)
        what = ""
        if fname in _GC_WALKS:
            what = f"walks the heap with {fname}() (how a candidate finds the harness's objects)"
        elif fname in _TRACE_HOOKS:
            what = f"installs an interpreter hook with {fname}()"
        elif fname.startswith("ctypes.pythonapi") or fname in _CTYPES_WRITES and fname != "ctypes.cast" or (
                fname == "ctypes.cast" and call.args and isinstance(call.args[0], ast.Call)
                and host.canonical(call.args[0].func) == "id"):
            what = f"reaches into interpreter memory with {fname}()"
        elif isinstance(call.func, ast.Attribute) and call.func.attr in (
                "update", "pop", "setdefault", "__setitem__", "__delitem__", "clear", "popitem", "insert", "append",
                "extend", "remove"):
            base = host.canonical(call.func.value)
            if base in _SYS_STATE:
                what = f"modifies {base} with .{call.func.attr}()"
            elif isinstance(call.func.value, ast.Name) and call.func.value.id == "__builtins__":
                what = f"modifies __builtins__ with .{call.func.attr}()"
            elif isinstance(call.func.value, ast.Attribute) and call.func.value.attr in _FRAME_STATE:
                what = f"modifies a frame's {call.func.value.attr}"
        if what:
            yield ctx.hit(ctx.at(call), args={"what": what}, evidence={"call": fname})


def computed_harness_attribute(ctx: ScanContext) -> Iterator[Hit]:
    """HS152: getattr on torch / time / testing modules with a name spelled at run time."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses("getattr", "hasattr"):
        return
    names = object_names(facts)
    for call in facts.calls_named("getattr", "hasattr"):
        if len(call.args) < 2:
            continue
        fname = facts.cname(call)
        if fname not in ("getattr", "builtins.getattr", "hasattr"):
            continue
        key = call.args[1]
        if isinstance(key, ast.Constant):
            continue  # a literal name is an ordinary (if roundabout) attribute access
        owner = facts.owner(call)
        obj = names.resolve(call.args[0], owner)
        if not obj or obj.split(".", 1)[0] not in _PATCH_ROOTS:
            continue
        folded = names.fold_text(key, owner)
        target = f"{obj}.{folded if folded is not None else '<computed>'}"
        # spelling a timing or comparison function piecewise is hiding it, not configuring
        sev = Severity.ERROR if folded is not None and _what(target) != _GENERIC else None
        yield ctx.hit(ctx.at(call), args={"target": target, "shown": folded or "a name computed at run time"},
                      evidence={"target": target}, severity=sev)


# the allocator's counters a harness reads after a call to measure it, under any backend's module
# (``torch.cuda``, ``torch.cuda.memory``, ``torch.xpu`` ... share these names), and the C entry
# points behind them: the one list both the file's pre-check and the match read
_RESETS = frozenset({"reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
                     "reset_accumulated_memory_stats", "_cuda_resetPeakMemoryStats",
                     "_cuda_resetAccumulatedMemoryStats"})


def measurement_counters_reset(ctx: ScanContext) -> Iterator[Hit]:
    """HS153: the candidate names a function that resets the memory counters a harness reads after
    the call (``torch.cuda.reset_peak_memory_stats`` and its kin), called or kept in a name: its
    own peak (a full-size workspace) then never shows in ``max_memory_allocated``.  Reading the
    counters (``max_memory_allocated``, ``memory_stats``) or ``empty_cache`` is left alone."""
    host = ctx.host
    if host is None or not ctx.patterns.uses(*_RESETS):
        return
    aliases = host.imports.aliases  # ``from torch.cuda import reset_peak_memory_stats as r``: ``r``
    reached: set[ast.AST] | None = None
    seen: set[int] = set()
    for node in host.of_type(ast.Attribute, ast.Name):
        spelled = node.attr if type(node) is ast.Attribute else node.id  # type: ignore[attr-defined]
        if spelled not in _RESETS and not (type(node) is ast.Name and spelled in aliases):
            continue
        name = host.canonical(node)
        if not name.startswith("torch.") or name.rsplit(".", 1)[-1] not in _RESETS or node.lineno in seen:  # type: ignore[attr-defined]
            continue
        if reached is None:
            flow = ctx.model_flow
            reached = {info.node for info in flow.functions.values()} if flow is not None else set()
        if not _model_code(host.parents, node, reached):
            continue
        seen.add(node.lineno)  # type: ignore[attr-defined]
        yield ctx.hit(ctx.at(node), args={"name": name}, evidence={"function": name})


def _model_code(parents: dict[ast.AST, ast.AST], node: ast.AST, reached: set[ast.AST]) -> bool:
    """Module-level code (run at import), a class's body or methods, or a function the model's
    forward reaches (``reached``): not a benchmark helper of a library file that the model never
    calls, nor the ``__main__`` block."""
    inside_def = False
    n = parents.get(node)
    while n is not None:
        if n in reached or type(n) is ast.ClassDef:
            return True
        if type(n) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            inside_def = True
        if type(n) is ast.If and _main_guard(n.test):
            return False  # ``if __name__ == "__main__":`` never runs when a harness imports the file
        n = parents.get(n)
    return not inside_def


def _main_guard(test: ast.expr) -> bool:
    return (type(test) is ast.Compare and type(test.left) is ast.Name and test.left.id == "__name__"
            and len(test.comparators) == 1 and type(test.comparators[0]) is ast.Constant
            and test.comparators[0].value == "__main__")
