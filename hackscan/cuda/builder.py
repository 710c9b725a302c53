"""Builds ``CudaFacts`` from a submission's units: one tree-sitter parse and one walk per unit
collect every function (kernel, device, host) with its parameters and the nodes of its body by
type, the launches, the calls, file-scope variables and macros, and the exported entry points;
then, per extension, named constants are folded, ``functions=`` exports added and called macros
expanded.
"""

from __future__ import annotations

import functools
import re
import threading

import tree_sitter as ts

from ..units import Unit
from .consts import never_folds
from .declarations import (
    declarators,
    function_declarator,
    init_parts,
    is_function_declarator,
    params_of,
    specifiers,
    type_field,
)
from .facts import CudaFacts
from .parser import (
    END_BYTE,
    START_BYTE,
    call_args,
    callee_name,
    compact,
    declarator_name,
    declarator_parts,
    first_error,
    kernel_config,
    language,
    method_receiver,
    parse,
    text,
)
from .records import (
    ARITH_OPS,
    Call,
    Export,
    ExtensionFacts,
    Function,
    Launch,
    Macro,
    ParseError,
    Variable,
    fold_pending,
    pos_of,
)


def build_cuda_facts(units: list[Unit]) -> CudaFacts:
    facts = CudaFacts(units)
    for unit in units:
        ext_name = unit.extension or unit.id
        x = facts.extensions.get(ext_name)
        if x is None:
            x = facts.extensions[ext_name] = ExtensionFacts(ext_name)
        x.units.append(unit)
        flags = unit.attrs.get("flags")
        if isinstance(flags, dict):
            for k, v in flags.items():
                x.flags.setdefault(k, list(v))
        _UnitBuilder(facts, x, unit).build()
    for x in facts.extensions.values():
        _finish_constants(x)
        _exports_from_attrs(x)
        if x.macros:
            _expand_call_macros(x)
    return facts


# top-level nodes that only wrap other top-level nodes
_CONTAINERS = frozenset({"translation_unit", "linkage_specification", "declaration_list", "namespace_definition",
                         "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef",
                         "template_declaration", "export_declaration"})


_MODULE_MACROS = frozenset({"PYBIND11_MODULE", "TORCH_LIBRARY", "TORCH_LIBRARY_IMPL", "TORCH_LIBRARY_FRAGMENT"})
_MACRO_CALL = re.compile(r"^(\w+)\((.*)\)$", re.S)
_SIMPLE_NAME = re.compile(r"^[A-Za-z_][\w:]*$")


def expand_macro_name(name: str, macros: dict[str, Macro]) -> str | None:
    """What a called name becomes after macro expansion, when that is a plain name.

    ``RT(StreamCreate)`` with ``#define RT(x) cuda##x`` -> ``cudaStreamCreate``;
    ``cudaDeviceSynchronize`` with ``#define cudaDeviceSynchronize() cudaSuccess`` -> ``cudaSuccess``.
    """
    m = _MACRO_CALL.match(name)
    if m is not None and m.group(1) in macros and macros[m.group(1)].params is not None:
        mac = macros[m.group(1)]
        args = [a.strip() for a in _split_args(m.group(2))]
        body = mac.body
        for p, a in zip(mac.params or (), args, strict=False):
            body = re.sub(rf"(?<![\w]){re.escape(p)}(?![\w])", a, body)
        body = re.sub(r"\s*##\s*", "", body).strip()
        return body if _SIMPLE_NAME.match(body) else None
    mac = macros.get(name)
    if mac is not None:
        body = mac.body.strip()
        return body if _SIMPLE_NAME.match(body) else None
    return None


def _split_args(raw: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in raw:
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur.append(ch)
    out.append("".join(cur))
    return out


def _expand_call_macros(x: ExtensionFacts) -> None:
    for fns in x.functions.values():
        for fn in fns:
            for c in fn.calls:
                if c.is_method:
                    continue
                expanded = expand_macro_name(c.name, x.macros)
                if expanded is not None and expanded != c.name:
                    c.macro = c.name
                    c.name = expanded
                    c.__dict__.pop("base", None)


def _finish_constants(x: ExtensionFacts) -> None:
    """Fold file-scope constants that refer to other constants (``#define N (B * D)``) now that
    all are known; function-local ones wait until someone asks (``ExtensionFacts.locals_of``)."""
    file_scope = []
    for entry in x.pending_constants:
        if entry[6]:
            x.local_pending.setdefault(entry[6], []).append(entry)
        else:
            file_scope.append(entry)
    env: dict[str, int | float] = {}
    fold_pending(x, file_scope, x.constants, env)
    x.__dict__.pop("const_env", None)
    x.pending_constants = []


def _exports_from_attrs(x: ExtensionFacts) -> None:
    known = {e.name for e in x.exports}
    for unit in x.units:
        fns = unit.attrs.get("functions")
        if not fns:
            continue
        for name in fns:  # type: ignore[union-attr]
            if name in known:
                continue
            known.add(name)
            defs = x.lookup(str(name))
            x.exports.append(Export(str(name), str(name), x.name, "functions", defs[0].pos if defs else None))
    if not x.exports and any(u.role == "code" for u in x.units):
        # cupy RawKernel / RawModule: Python launches the __global__ kernels directly
        for fn in x.all_functions:
            if fn.kind == "kernel":
                x.exports.append(Export(fn.name, fn.name, x.name, "cupy", fn.pos))


class _UnitBuilder:
    def __init__(self, facts: CudaFacts, x: ExtensionFacts, unit: Unit):
        self.facts = facts
        self.x = x
        self.unit = unit
        self.pending = x.pending_constants

    def build(self) -> None:
        tree = parse(self.unit.text)
        self.facts.trees[self.unit.id] = tree
        root = tree.root_node
        err = first_error(root)
        if err is not None:
            snippet = text(err)[:60] or err.type
            self.facts.parse_errors.append(ParseError(self.unit.id, pos_of(self.unit, err), snippet))
        self._top(root, template=False)

    # ----------------------------------------------------------------- top level
    def _top(self, node: ts.Node, template: bool) -> None:
        for child in node.named_children:
            t = child.type
            if t == "function_definition":
                self._function(child, template)
            elif t in _CONTAINERS:
                self._top(child, template or t == "template_declaration")
            elif t in ("struct_specifier", "class_specifier"):
                # member functions defined in the class body (``struct Impl { static Tensor run(...) {...} };``)
                # are functions too: ``Impl::run(x)`` calls one, by its last name like any qualified call
                body = child.child_by_field_name("body")
                if body is not None:
                    self._top(body, template)
            elif t == "declaration":
                self._global_declaration(child)
            elif t == "preproc_def":
                self._define(child)
            elif t == "preproc_function_def":
                self._macro_function(child)
            elif t == "ERROR":
                # a macro tree-sitter does not understand can swallow a function: look inside
                self._top(child, template)

    def _define(self, node: ts.Node) -> None:
        name_node = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        if name_node is None:
            return
        name = text(name_node)
        body = _strip_comments(text(value)) if value is not None else ""
        self.x.macros[name] = Macro(name, None, body, self.x.name, self.unit.id, pos_of(self.unit, node))
        if body:
            self.pending.append((name, "define", None, body, self.unit, node, None))

    def _macro_function(self, node: ts.Node) -> None:
        name_node = node.child_by_field_name("name")
        params = node.child_by_field_name("parameters")
        value = node.child_by_field_name("value")
        if name_node is None:
            return
        plist = tuple(text(p) for p in params.named_children) if params is not None else ()
        self.x.macros[text(name_node)] = Macro(text(name_node), plist, _strip_comments(text(value)) if value else "",
                                               self.x.name, self.unit.id, pos_of(self.unit, node))

    def _global_declaration(self, node: ts.Node) -> None:
        specs = specifiers(node)
        type_node = node.child_by_field_name("type")
        type_text = compact(type_node)
        for decl in node.children_by_field_name("declarator"):
            if decl.type == "function_declarator" or is_function_declarator(decl):
                name = declarator_name(decl)
                if name is not None and ("__global__" in specs):
                    self.x.declared_kernels.add(text(name))
                continue
            init = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
            target = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
            name_node, suffix = declarator_parts(target)
            if name_node is None:
                continue
            name = text(name_node)
            vtype = type_text + suffix
            # ``static const void* last``: the pointee is const, the variable is not
            const = ("const" in specs or "constexpr" in specs) and "*" not in vtype
            var = Variable(name, vtype, self.x.name, self.unit, node, None, static="static" in specs, const=const,
                           device=bool(specs & {"__device__", "__constant__", "__shared__", "__managed__"}),
                           init=init)
            self.x.globals.append(var)
            if const and init is not None and init.type not in ("initializer_list", "argument_list"):
                self.pending.append((name, "constexpr" if "constexpr" in specs else "const", init, "",
                                     self.unit, node, None))

    # ----------------------------------------------------------------- functions
    def _function(self, node: ts.Node, template: bool, lambda_export: str | None = None) -> None:
        decl = node.child_by_field_name("declarator")
        fdecl = function_declarator(decl)
        if fdecl is None:
            return
        name_node = fdecl.child_by_field_name("declarator")
        name = callee_name(name_node) if name_node is not None else ""
        if name in _MODULE_MACROS:
            self._module(node)
            return
        specs = specifiers(node)
        kind = "kernel" if "__global__" in specs else "device" if "__device__" in specs else "host"
        params = params_of(fdecl.child_by_field_name("parameters"))
        body = node.child_by_field_name("body")
        fn = Function(name=name.rsplit("::", 1)[-1], kind=kind, ext=self.x.name, unit=self.unit, node=node,
                      body=body, params=params, static="static" in specs, template=template,
                      lambda_export=lambda_export)
        if body is not None:
            self._walk_body(fn, body)
        self.x.functions.setdefault(fn.name, []).append(fn)
        self.facts.functions.append(fn)

    def _module(self, node: ts.Node) -> None:
        """PYBIND11_MODULE / TORCH_LIBRARY: ``m.def("name", &fn)`` binds a C++ function."""
        body = node.child_by_field_name("body")
        if body is None:
            return
        stack = [body]
        while stack:
            n = stack.pop()
            if n.type == "call_expression":
                func = n.child_by_field_name("function")
                if func is not None and func.type == "field_expression" and callee_name(func) in (".def", ".impl"):
                    self._module_def(n)
            stack.extend(n.named_children)

    def _module_def(self, call: ts.Node) -> None:
        args = call_args(call)
        if len(args) < 2 or args[0].type not in ("string_literal", "raw_string_literal"):
            return
        py_name = text(args[0]).strip('"').split("(")[0].split("::")[-1]
        target = args[1]
        while target.type in ("pointer_expression", "parenthesized_expression", "cast_expression"):
            inner = target.child_by_field_name("argument") or target.child_by_field_name("value")
            if inner is None and target.named_child_count:
                inner = target.named_children[-1]
            if inner is None:
                break
            target = inner
        pos = pos_of(self.unit, call)
        if target.type == "lambda_expression":
            self._lambda_function(target, py_name)
            self.x.exports.append(Export(py_name, f"<lambda {py_name}>", self.x.name, "pybind", pos))
            return
        if target.type == "call_expression":  # torch::wrap_pybind_function(fn), py::overload_cast<...>(&fn)
            inner_args = call_args(target)
            if inner_args:
                target = inner_args[0]
                while target.type == "pointer_expression":
                    target = target.child_by_field_name("argument") or target
                    if target.type != "pointer_expression":
                        break
        name = callee_name(target) if target.type in ("identifier", "qualified_identifier", "template_function") else ""
        if name:
            self.x.exports.append(Export(py_name, name.rsplit("::", 1)[-1], self.x.name, "pybind", pos))

    def _lambda_function(self, lam: ts.Node, py_name: str) -> None:
        decl = lam.child_by_field_name("declarator")
        params = params_of(decl.child_by_field_name("parameters")) if decl is not None else ()
        body = lam.child_by_field_name("body")
        fn = Function(name=f"<lambda {py_name}>", kind="host", ext=self.x.name, unit=self.unit, node=lam, body=body,
                      params=params, lambda_export=py_name)
        if body is not None:
            self._walk_body(fn, body)
        self.x.functions.setdefault(fn.name, []).append(fn)
        self.facts.functions.append(fn)

    def _walk_body(self, fn: Function, body: ts.Node) -> None:
        """Collect the body's nodes of the types rules read, with one query over the body."""
        host = fn.kind == "host"
        # host bodies: the same query with one more pattern, the arithmetic HS204 reads (one pass
        # over the body instead of a second query later)
        caps = (_host_body_query_cursor() if host else _body_query_cursor()).captures(body)
        if host:
            arith = caps.pop(_ARITH_CAPTURE, None)
            if arith:
                fn.arith = arith
        nodes = fn.nodes
        for t, found in caps.items():
            if len(found) > 1:
                # source order, outer node first where several start at the same byte (the calls
                # of a chain ``a.b().c()``): the query returns those in an order that varies
                # between processes, so sort by end descending, then (stably) by start
                found.sort(key=END_BYTE, reverse=True)
                found.sort(key=START_BYTE)
            nodes[t] = found
        calls = nodes.get("call_expression")
        if calls:
            call = self._call
            for c in calls:
                call(fn, c)
        decls = nodes.get("declaration")
        if decls:
            local = self._local_declaration
            for d in decls:
                local(fn, d)
        for asg in nodes.get("assignment_expression", ()):
            kids = asg.children
            if len(kids) == 3 and not asg.has_error:
                # ``left op right``: three required parts and no room for anything else
                left, op, right = kids
            else:
                left = asg.child_by_field_name("left")
                op = right = None
            if left is None:
                continue
            lt = left.type
            if lt == "identifier" or (host and lt == "field_expression"):
                if op is None:
                    op = asg.child_by_field_name("operator")
                if op is None or op.type != "=":
                    continue
                if right is None:
                    right = asg.child_by_field_name("right")
                if right is None:
                    continue
                if lt == "identifier":
                    fn.assigned.setdefault(text(left), []).append(right)
                else:
                    owner = left.child_by_field_name("argument")
                    if owner is not None and owner.type == "identifier":
                        fn.member_assigned.setdefault(text(owner), []).append(right)
        for c in nodes.get("preproc_def", ()):
            self._define(c)

    def _call(self, fn: Function, call: ts.Node) -> None:
        # ``function`` is the first part of every call_expression rule, and a node's leading
        # comments belong to its parent, so in an error-free call it is the first child (read by
        # position, as in ``declarations.py``).  A launch's ``<<<...>>>`` (``kernel_call_syntax``)
        # comes right after it (the CUDA rule: function, kernel_call_syntax, arguments), or after
        # comments; so only a call whose second child is one of these two needs its children
        # searched (``kernel_config``).  An erroneous call is searched as it is.
        if call.has_error:
            func = call.child_by_field_name("function")
            launch = True
        else:
            kids = call.children
            func = kids[0] if kids else None
            launch = len(kids) > 2 and kids[1].type in _LAUNCH_SECOND
        if func is None:
            return
        config = kernel_config(call) if launch else None
        if config is not None:
            cfg = config + [None] * (4 - len(config))
            fn.launches.append(Launch(callee_name(func), call, fn, cfg[0], cfg[1], cfg[2], cfg[3], call_args(call)))
            return
        name = callee_name(func)
        fn.calls.append(Call(name, call, fn, method_receiver(func)))
        base = name.rsplit("::", 1)[-1]
        if base in _LAUNCH_APIS:
            args = call_args(call)
            if args:
                kname = _launched_symbol(args[0])
                if kname:
                    cfg = args[1:3] + [None, None]
                    stream = args[5] if len(args) > 5 else None
                    smem = args[4] if len(args) > 4 else None
                    fn.launches.append(Launch(kname, call, fn, cfg[0], cfg[1], smem, stream, [], api=base))

    def _local_declaration(self, fn: Function, node: ts.Node) -> None:
        # the common shapes are read by position, as in ``declarations.py``
        static = const = constexpr = False
        type_node = None
        kids = node.children
        type_at = -1
        for i, c in enumerate(kids):
            t = c.type
            if t == "storage_class_specifier":
                # a block-scope ``thread_local`` has static storage duration too: it outlives the call
                static = static or c.text == b"static" or c.text == b"thread_local"
            elif t == "type_qualifier":
                raw = c.text
                const = const or raw == b"const"
                constexpr = constexpr or raw == b"constexpr"
            elif t != "comment":
                type_node, type_at = type_field(node, kids, i, c)
                break
        type_text = compact(type_node)
        local_types = fn.local_types
        for decl in declarators(node, kids, type_at):
            if decl.type == "init_declarator":
                target, value = init_parts(decl)
            else:
                target, value = decl, None
            if target is not None and target.type == "identifier":
                name_node: ts.Node | None = target
                suffix = ""
            else:
                name_node, suffix = declarator_parts(target)
            if name_node is None:
                continue
            name = text(name_node)
            local_types[name] = vtype = type_text + suffix
            if value is not None:
                fn.assigned.setdefault(name, []).append(value)
            if static:
                fn.static_locals.append(Variable(name, vtype, self.x.name, self.unit, node, fn,
                                                 static=True, const=(const or constexpr) and "*" not in suffix,
                                                 init=value))
            if value is not None and (constexpr or (const and type_text in _INT_TYPES)):
                if not never_folds(value):  # such a constant is not queued for folding
                    self.pending.append((name, "constexpr" if constexpr else "const", value, "",
                                         self.unit, node, fn.name))


# node types of function bodies that facts and rules read; one query captures them all (cheaper
# than walking every node from Python: the walk would visit ten times as many)
BODY_TYPES = ("call_expression", "declaration", "assignment_expression", "update_expression", "if_statement",
              "for_statement", "while_statement", "do_statement", "return_statement", "try_statement",
              "lambda_expression", "conditional_expression", "gnu_asm_expression", "preproc_def", "switch_statement")


_local_cursor = threading.local()


# the second child of an error-free call that may be a launch (see ``_UnitBuilder._call``)
_LAUNCH_SECOND = frozenset({"kernel_call_syntax", "comment"})
_LAUNCH_APIS = frozenset({"cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelEx", "cuLaunchKernel"})


def _body_patterns() -> str:
    """What a function body's query captures: every ``BODY_TYPES`` node (launches are calls,
    told apart by their children: ``_UnitBuilder._call``)."""
    return " ".join(f"({t}) @{t}" for t in BODY_TYPES)


@functools.lru_cache(maxsize=1)
def _body_query() -> ts.Query:
    # compiled once per process (the Query is immutable; each thread has its own cursor)
    return ts.Query(language(), _body_patterns())


def _body_query_cursor() -> ts.QueryCursor:
    cur = getattr(_local_cursor, "cursor", None)
    if cur is None:
        cur = _local_cursor.cursor = ts.QueryCursor(_body_query())
    return cur


_ARITH_CAPTURE = "arith.op"  # a capture name no node type has: host arithmetic (``Function.arith``)


@functools.lru_cache(maxsize=1)
def _host_body_query() -> ts.Query:
    # the body patterns plus host arithmetic (HS204), so a host body needs one query, not two
    return ts.Query(language(), _body_patterns() +
                    " (binary_expression operator: [" + " ".join(f'"{op}"' for op in sorted(ARITH_OPS)) +
                    f"]) @{_ARITH_CAPTURE}")


def _host_body_query_cursor() -> ts.QueryCursor:
    cur = getattr(_local_cursor, "host_cursor", None)
    if cur is None:
        cur = _local_cursor.host_cursor = ts.QueryCursor(_host_body_query())
    return cur


_INT_TYPES = frozenset({"int", "unsigned", "unsignedint", "int64_t", "int32_t", "size_t", "long", "uint32_t",
                        "uint64_t", "short", "longlong", "float", "double"})


def _strip_comments(body: str) -> str:
    body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S)
    body = re.sub(r"//[^\n]*", "", body)
    return body.replace("\\\n", " ").strip()


def _launched_symbol(arg: ts.Node) -> str:
    """The kernel named by ``(void*)k``, ``(const void*)&k<float>``, ``reinterpret_cast<void*>(k)``."""
    stack = [arg]
    while stack:
        n = stack.pop()
        if n.type in ("identifier", "template_function", "qualified_identifier"):
            name = callee_name(n)
            if name not in ("void", "reinterpret_cast", "static_cast"):
                return name
        if n.type in ("cast_expression", "pointer_expression", "parenthesized_expression"):
            stack.extend(reversed(n.named_children))
        elif n.type == "call_expression":
            stack.extend(reversed(call_args(n)))
    return ""
