"""Custom code that provably cannot build, bind or be called: facts for HS119 and the fallback rules.

Most generated "kernels" that fall back to torch do so because their extension never builds.  Each
fact here is a certainty about how torch's ``cpp_extension`` builds an extension, not a guess:

* ``load_inline(cpp_sources, cuda_sources, functions=[...])`` writes ``main.cpp`` from
  ``#include <torch/extension.h>``, the ``cpp_sources`` and a generated
  ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("f", torch::wrap_pybind_function(f), "f"); }``;
  the ``cuda_sources`` go to a separate ``cuda.cu``.  A name in ``functions=`` must therefore be
  declared in ``cpp_sources``: one defined only in ``cuda_sources`` (a ``__global__`` kernel, or a
  host function without a prototype), or with ``cpp_sources`` empty, is an undeclared identifier in
  ``main.cpp`` and the build stops (``undeclared``).
* ``functions=`` (even ``[]``) adds that module definition; a source of the same extension with its
  own ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)`` defines the module twice: a redefinition in
  ``main.cpp`` or two ``PyInit_<name>`` symbols at link time (``duplicate-module``).
* ``cpp_sources`` and ``.cpp`` files given to ``load()`` are compiled by the host C++ compiler, which
  cannot parse a ``<<<...>>>`` launch (``cuda-as-cpp``).
* Functions bound through ``functions=`` carry no argument names: pybind11 rejects any keyword
  argument, so a cupy/pycuda-style ``ext.fn(x, grid=..., block=...)`` raises ``TypeError``; so does a
  ``fn((grid,), (block,), (args))`` launch whose tuple lands on a ``torch::Tensor`` parameter
  (torch's caster takes tensors only) (``unbindable-call``: a call-site reason).
* A few APIs that do not exist in any torch release (``MISSING_APIS``): calling one raises
  ``AttributeError`` (``missing-api``).

Where the evidence is not complete the fact is not stated: a ``cpp_sources`` that mentions the name
anywhere (a macro could declare it), includes a local header or pastes tokens, an unresolved source or
``functions=`` list, ``**kwargs`` in the call, or a construct under ``#if``/``#ifdef``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..units import Unit

if TYPE_CHECKING:
    import tree_sitter as ts

    from ..context import Pos, ScanContext
    from ..python.module import Extension, HostModule

# Attributes that no torch release has (checked against the installed torch in
# tests/test_buildability.py); generated code calls them as if they compiled CUDA:
#   torch.cuda.compile                      - torch.compile exists, torch.cuda.compile never did
#   torch._C._jit_compile_cuda              - no such binding; the JIT never compiled raw CUDA
#   torch.utils.cpp_extension.load_cuda     - the loaders are load / load_inline
#   torch.utils.cpp_extension.compile_cuda  - idem
#   torch.cuda.load_inline                  - load_inline lives in torch.utils.cpp_extension only
MISSING_APIS = frozenset({
    "torch.cuda.compile",
    "torch._C._jit_compile_cuda",
    "torch.utils.cpp_extension.load_cuda",
    "torch.utils.cpp_extension.compile_cuda",
    "torch.cuda.load_inline",
})

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_LOCAL_INCLUDE = re.compile(r'#\s*include\s*"')
_CONDITIONALS = frozenset({"preproc_if", "preproc_ifdef", "preproc_elif", "preproc_else", "preproc_elifdef"})


@dataclass(frozen=True)
class CannotRun:
    """One reason an extension's code can never run."""

    extension: str  # the extension name, or the API called
    reason: str  # undeclared | duplicate-module | cuda-as-cpp | unbindable-call | missing-api
    detail: str  # what was found, for the message
    pos: Pos


def cannot_run(ctx: ScanContext) -> list[CannotRun]:
    """Every certain reason, computed once per scan (the check and the fallback rules all ask)."""
    got = ctx.__dict__.get("_cannot_run")
    if got is None:
        got = ctx.__dict__["_cannot_run"] = list(_find(ctx)) if ctx.host is not None else []
    return got


# --------------------------------------------------------------------------------------------- search
def _find(ctx: ScanContext) -> Iterator[CannotRun]:
    host = ctx.host
    assert host is not None
    units = {u.id: u for u in ctx.units}
    unresolved = {p.extension for p in host.problems}
    for ext in host.extensions:
        if ext.kind == "cupy" or ext.name in unresolved or _has_unpacking(ext.call):
            continue
        ext_units = [units[i] for i in ext.unit_ids if i in units]
        if ext.kind == "load_inline":
            yield from _duplicate_module(ctx, host, ext, ext_units)
            yield from _undeclared(ctx, host, ext, ext_units)
        yield from _cuda_as_cpp(ctx, ext, ext_units)
    yield from _calls(ctx, host)


def _has_unpacking(call: ast.Call) -> bool:
    return any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def _functions_given(host: HostModule, ext: Extension) -> bool:
    """``functions=`` is present and resolved (``[]`` included: it still writes a module)."""
    node = host._arg(ext.call, "functions", ())
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return False
    if ext.functions is not None:
        return True
    return isinstance(node, (ast.List, ast.Tuple)) and not node.elts


def _conditional(node: ts.Node) -> bool:
    """Under ``#if``/``#ifdef``: which arm the compiler sees is not decided here."""
    n = node.parent
    while n is not None:
        if n.type in _CONDITIONALS:
            return True
        n = n.parent
    return False


def _unit_pos(unit: Unit, node: ts.Node) -> Pos:
    from ..units import Pos

    line, col = unit.byte_position(node.start_byte)
    return Pos(line, col + 1, unit.id, unit.attrs.get("file"))  # type: ignore[arg-type]


def _modules(ctx: ScanContext, unit: Unit) -> Iterator[tuple[ts.Node, str]]:
    """``PYBIND11_MODULE(<name>, m) {...}`` definitions of a unit: (node, module name)."""
    if "PYBIND11_MODULE" not in unit.text:
        return
    tree = ctx.cuda.trees.get(unit.id)
    if tree is None:
        return
    from .parser import callee_name, text  # tree-sitter only when there are C++ units to read

    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            decl = n.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            name = decl.child_by_field_name("declarator") if decl is not None else None
            if name is not None and callee_name(name) == "PYBIND11_MODULE":
                params = decl.child_by_field_name("parameters")
                first = params.named_children[0] if params is not None and params.named_children else None
                yield n, text(first).strip() if first is not None else ""
            continue
        stack.extend(reversed(n.named_children))


def _duplicate_module(ctx: ScanContext, host: HostModule, ext: Extension, units: list[Unit]) -> Iterator[CannotRun]:
    if not _functions_given(host, ext):
        return
    for unit in units:
        for node, name in _modules(ctx, unit):
            if _conditional(node) or name not in ("TORCH_EXTENSION_NAME", ext.name):
                continue
            where = "main.cpp (a redefinition)" if unit.role == "cpp_sources" else \
                "cuda.cu as well as main.cpp (PyInit_" + ext.name + " defined twice at link time)"
            yield CannotRun(ext.name, "duplicate-module",
                            f"its {unit.role} defines PYBIND11_MODULE and functions= makes load_inline write a "
                            f"second one into {where}", _unit_pos(unit, node))
            return


def _declared(ctx: ScanContext, unit: Unit) -> set[str]:
    """Names with a function declarator (prototype or definition) anywhere in the unit."""
    tree = ctx.cuda.trees.get(unit.id)
    out: set[str] = set()
    if tree is None:
        return out
    from .parser import callee_name  # tree-sitter only when there are C++ units to read

    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type == "function_declarator":
            d = n.child_by_field_name("declarator")
            if d is not None:
                out.add(callee_name(d).rsplit("::", 1)[-1])
            continue
        if n.type != "compound_statement":  # declarations inside bodies are local: not main.cpp's scope
            stack.extend(n.named_children)
    return out


def _undeclared(ctx: ScanContext, host: HostModule, ext: Extension, units: list[Unit]) -> Iterator[CannotRun]:
    if not ext.functions or _host_arg(host, ext, "extra_include_paths"):
        return
    cpp = [u for u in units if u.role == "cpp_sources"]
    cuda = [u for u in units if u.role == "cuda_sources"]
    if not cuda:
        return  # the names must be defined somewhere of the user's own to be certainly theirs
    cpp_text = "\n".join(_COMMENT.sub(" ", u.text) for u in cpp)
    if _LOCAL_INCLUDE.search(cpp_text) or "##" in cpp_text:
        return
    # the declarators are read from the trees only for a name the text search does not find (most
    # names are spelled in cpp_sources, and a walk of every tree node from Python costs more than
    # the parse): the test is the same either way, an ``or`` of two pure tests in the other order
    declared: set[str] | None = None
    xf = ctx.cuda.extensions.get(ext.name)
    for name in ext.functions:
        if not _IDENT.match(name) or re.search(rf"\b{name}\b", cpp_text):
            continue
        if declared is None:
            declared = set()
            for u in cpp:
                declared |= _declared(ctx, u)
        if name in declared:
            continue
        defs = [f for f in (xf.functions.get(name, []) if xf is not None else []) if f.unit.role == "cuda_sources"]
        if not defs or _conditional(defs[0].node):
            continue
        fn = defs[0]
        what = "a __global__ kernel" if fn.kind == "kernel" else "a function"
        where = "cpp_sources is empty" if not cpp else "cpp_sources never declares it"
        yield CannotRun(ext.name, "undeclared",
                        f"functions= binds `{name}`, {what} defined only in cuda_sources, but {where}: "
                        "main.cpp, where load_inline writes the bindings, does not compile", fn.pos)


def _host_arg(host: HostModule, ext: Extension, name: str) -> bool:
    node = host._arg(ext.call, name, ())
    return node is not None and not (isinstance(node, ast.Constant) and node.value is None)


# compilers that parse ``<<<...>>>`` in any file they are given (the HIP and CUDA drivers)
_CUDA_DRIVERS = re.compile(r"(^|[/\\])(hipcc|nvcc|amdclang\+\+)(\.exe)?$")


def _cuda_host_compiler(host: HostModule) -> bool:
    """Whether the module points the build's host compiler at a CUDA-capable driver
    (``os.environ["CXX"] = "hipcc"``, ``os.environ.setdefault("CXX", "nvcc")``): torch's build
    then hands cpp_sources to it, and a launch there parses.  The value must be a constant naming
    such a driver; ``g++`` or anything computed leaves the host compiler what it was."""
    def driver(value: ast.AST | None) -> bool:
        return isinstance(value, ast.Constant) and isinstance(value.value, str) and \
            bool(_CUDA_DRIVERS.search(value.value.strip()))

    def is_cxx(key: ast.AST | None) -> bool:
        return isinstance(key, ast.Constant) and key.value == "CXX"

    def environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
            (isinstance(node, ast.Name) and node.id == "environ")

    for node in host.of_type(ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and environ(target.value) and is_cxx(target.slice) \
                    and driver(node.value):
                return True
    for call in host.of_type(ast.Call):
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        if func.attr in ("setdefault", "putenv") and (environ(func.value) or func.attr == "putenv") \
                and len(call.args) == 2 and is_cxx(call.args[0]) and driver(call.args[1]):
            return True
        if func.attr == "update" and environ(func.value) and call.args and isinstance(call.args[0], ast.Dict):
            d = call.args[0]
            if any(is_cxx(k) and driver(v) for k, v in zip(d.keys, d.values, strict=True)):
                return True
    return False


def _cuda_as_cpp(ctx: ScanContext, ext: Extension, units: list[Unit]) -> Iterator[CannotRun]:
    cpp_units = {u.id for u in units if u.role == "cpp_sources" or (u.role == "file" and u.language == "cpp")}
    if not cpp_units or "<<<" not in "".join(u.text for u in units if u.id in cpp_units):
        return
    if ctx.host is not None and _cuda_host_compiler(ctx.host):
        return
    for launch in ctx.cuda.launches:
        unit = launch.function.unit
        if unit.id in cpp_units and launch.api == "<<<>>>" and not _conditional(launch.node):
            what = "cpp_sources" if unit.role == "cpp_sources" else f"the .cpp file {unit.id.split(':', 1)[-1]}"
            yield CannotRun(ext.name, "cuda-as-cpp",
                            f"{what} launches `{launch.kernel}<<<...>>>`, CUDA syntax that the host C++ "
                            "compiler cannot parse (only cuda_sources / .cu files go to nvcc)", launch.pos)
            return


def _calls(ctx: ScanContext, host: HostModule) -> Iterator[CannotRun]:
    """One pass over the host's calls: a ``functions=`` binding called in a way pybind11 cannot bind
    (keywords, or a tuple where the C++ parameter is a tensor), and calls of ``MISSING_APIS``.  Only
    attribute calls whose last name is a bound function or a missing API's are looked at closer."""
    bound: dict[str, Extension] = {}
    for ext in host.extensions:
        if ext.kind == "load_inline" and ext.functions and not _has_unpacking(ext.call):
            for owner in ext.bound_to:
                bound[owner] = ext
    if not bound:
        # most files: no binding to misuse and no missing API named anywhere.  A loop, not an early
        # exit of ``any(genexpr)``: ``load_inline`` is in nearly every file, and closing a generator
        # left early costs more than the test (Python 3.11)
        text = host.source.text
        for last in _MISSING_LASTS:
            if last in text:
                break
        else:
            return
    names = _MISSING_LASTS.union(*(e.functions or () for e in bound.values()))
    from ..python.resolve import dotted_name

    for call in host.of_type(ast.Call):
        func = call.func
        if type(func) is not ast.Attribute or func.attr not in names:
            continue
        if func.attr in _MISSING_LASTS:
            api = host.canonical(func)
            if api in MISSING_APIS:
                yield CannotRun(api, "missing-api",
                                f"`{api}` does not exist in torch: the call raises AttributeError and what it "
                                "should build never exists", ctx.at(call))
                continue
        if any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        ext = bound.get(dotted_name(func.value))
        if ext is None or ext.functions is None or func.attr not in ext.functions:
            continue
        if call.keywords:
            kws = ", ".join(f"{kw.arg}=" for kw in call.keywords)
            yield CannotRun(ext.name, "unbindable-call",
                            f"`{func.attr}` is bound by functions=, without argument names, and is called with "
                            f"{kws} (a cupy/pycuda launch style): pybind11 raises TypeError on every call",
                            ctx.at(call))
            continue
        index = _tuple_for_tensor(ctx, ext, func.attr, call)
        if index is not None:
            yield CannotRun(ext.name, "unbindable-call",
                            f"`{func.attr}` is called with a tuple as argument {index + 1} (a cupy-style "
                            "`fn((grid,), (block,), (args))` launch) where its C++ definition takes a tensor: "
                            "pybind11 raises TypeError on every call", ctx.at(call))


def _tuple_for_tensor(ctx: ScanContext, ext: Extension, name: str, call: ast.Call) -> int | None:
    """The index of a tuple literal passed where the bound C++ function takes a tensor (torch's
    caster accepts only tensors there); None when there is none or the definition is not known."""
    if not any(isinstance(a, ast.Tuple) for a in call.args):
        return None
    xf = ctx.cuda.extensions.get(ext.name)
    defs = [f for f in (xf.functions.get(name, []) if xf is not None else []) if f.kind == "host"]
    if len(defs) != 1 or defs[0].template:
        return None  # overloads or templates: which signature binds is not decided here
    params = defs[0].params
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Tuple) and i < len(params) and params[i].tensor:
            return i
    return None


_MISSING_LASTS = frozenset(n.rsplit(".", 1)[-1] for n in MISSING_APIS)


def never_runs(ctx: ScanContext, kernels: list) -> CannotRun | None:
    """The fact that stops any of these kernel calls (``python.facts.KernelCall``) from ever running:
    its extension cannot build or bind, or the call itself cannot succeed."""
    facts = cannot_run(ctx)
    if not facts:
        return None
    for k in kernels:
        for f in facts:
            if f.reason in ("undeclared", "duplicate-module", "cuda-as-cpp") and k.extension == f.extension:
                return f
            if f.reason == "unbindable-call" and f.pos.line == k.line and f.pos.unit is None:
                return f
    return None
