"""The value flow's vocabulary: the tables of names it classifies calls by, its frame record, and the
pure helpers on syntax that need no analyser state (``valueflow`` and its parts share them)."""

from __future__ import annotations

import ast
import builtins
import os
import re
from dataclasses import dataclass, field

from .catalog import (
    META_BUILTINS,
)
from .facts import (
    Arm,
)
from .provenance import Provenance
from .resolve import dotted_name

MAX_DEPTH = 6
# statements visited per file; beyond it the analysis stops inlining (a pathological file must not
# cost more than a normal one by orders of magnitude)
BUDGET = 6000

_OPERATOR_NAMES = {
    ast.Add: "torch.add", ast.Sub: "torch.sub", ast.Mult: "torch.mul", ast.Div: "torch.div",
    ast.FloorDiv: "torch.floor_divide", ast.Mod: "torch.remainder", ast.Pow: "torch.pow",
    ast.MatMult: "torch.matmul", ast.BitAnd: "torch.bitwise_and", ast.BitOr: "torch.bitwise_or",
    ast.BitXor: "torch.bitwise_xor", ast.LShift: "torch.bitwise_left_shift", ast.RShift: "torch.bitwise_right_shift",
}
_COMPARE_NAMES = {ast.Gt: "torch.gt", ast.GtE: "torch.ge", ast.Lt: "torch.lt", ast.LtE: "torch.le",
                  ast.Eq: "torch.eq", ast.NotEq: "torch.ne"}
_BROAD_EXCEPTIONS = frozenset({"", "Exception", "BaseException", "RuntimeError", "builtins.Exception",
                               "builtins.BaseException", "torch.cuda.OutOfMemoryError", "OSError", "ImportError",
                               "subprocess.CalledProcessError", "AssertionError", "ValueError", "TypeError"})
# ``range(n)`` is a shape use of ``n`` (a loop bound), as metadata-only as ``len``
_META_BUILTINS = META_BUILTINS | {"range"}
_UNION_BUILTINS = frozenset({"max", "min", "abs", "round", "sum", "tuple", "list", "zip", "enumerate", "sorted",
                             "reversed", "divmod", "pow", "iter", "next", "map", "filter", "dict", "set", "any", "all",
                             "str", "repr", "format", "complex"})
_HOST_BUILTINS = frozenset({"float", "int", "bool"})
_QUIET_BUILTINS = frozenset({"print", "setattr", "delattr", "globals", "locals", "vars", "open", "super", "object",
                             "NotImplementedError", "RuntimeError", "ValueError", "TypeError", "Exception",
                             "AssertionError", "warnings.warn", "logging.warning", "logging.info", "logging.debug"})
_ARITH_MODULES = ("math.", "triton.cdiv", "triton.next_power_of_2", "operator.", "functools.reduce", "numpy.prod",
                  "numpy.ceil", "numpy.floor", "numpy.log2", "builtins.")
_PY_METHODS = frozenset({"get", "items", "keys", "values", "pop", "format", "join", "split", "startswith", "endswith",
                         "strip", "lower", "upper", "copy", "index", "count", "popitem", "clear", "replace",
                         "encode", "decode", "setdefault", "update", "append", "extend", "insert"})
_LIST_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft"})
_ALIAS_VIEWS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "expand", "expand_as",
    "broadcast_to", "flatten", "unflatten", "squeeze", "unsqueeze", "narrow", "select", "detach", "movedim",
    "moveaxis", "swapaxes", "swapdims", "as_strided", "unfold", "split", "chunk", "unbind", "tensor_split", "diagonal",
    "real", "view_as_real", "view_as_complex", "requires_grad_", "squeeze_", "unsqueeze_", "t_", "transpose_",
    "as_strided_", "detach_",
})
_SHAPE_VIEWS = frozenset({"view", "reshape", "expand", "broadcast_to", "repeat", "tile", "new_empty", "new_zeros",
                          "new_ones", "unflatten"})
_TABLES = (ast.Tuple, ast.List, ast.Dict)  # literals a local table is bound to
_WRAPPERS = frozenset({"torch.compile", "torch.jit.script", "torch.jit.trace", "functools.partial",
                       "torch.cuda.make_graphed_callables", "torch._dynamo.optimize"})
# the last names of _WRAPPERS: an attribute call with another last name cannot canonicalise to one
_WRAPPER_LASTS = frozenset(w.rsplit(".", 1)[-1] for w in _WRAPPERS)


def _may_wrap(func: ast.AST) -> bool:
    """Cheap pre-check for ``canonical(func) in _WRAPPERS``: an attribute chain keeps its last name
    (``x.y.compile`` -> ``....compile``); a bare name may be an alias of anything."""
    return type(func) is not ast.Attribute or func.attr in _WRAPPER_LASTS  # type: ignore[attr-defined]


_PARAM_HOLDERS = frozenset({"module", "parameter", "buffer", "tensor", "container", "stateless"})
_DYNAMIC_SELF = frozenset({"parameters", "named_parameters", "state_dict", "modules", "named_modules", "children",
                           "named_children", "buffers", "named_buffers", "__dict__", "_modules", "_parameters",
                           "_buffers", "load_state_dict", "apply"})
REFERENCE_MODULES = frozenset({"reference", "ref", "problem", "model", "task", "baseline", "original"})


@dataclass
class _Frame:
    qualname: str
    cls: str | None
    prefix: str  # self attribute prefix for a submodule instance ("block.")
    depth: int
    self_name: str | None
    state: dict[str, Provenance] = field(default_factory=dict)
    # locals bound to something callable: a module held by self, a kernel, a torch function
    callables: dict[str, tuple[str, str]] = field(default_factory=dict)
    # locals that are views of other locals: a write through one reaches the base
    views: dict[str, str] = field(default_factory=dict)
    returns: list[Provenance] = field(default_factory=list)
    # names bound so far, in order (an arm's bindings are a slice of it)
    bound: list[str] = field(default_factory=list)
    # locals holding a raw pointer of a tensor: ``p = out.data_ptr()``, ``p = cp.asarray(out.data_ptr())``
    pointers: dict[str, list[ast.AST]] = field(default_factory=dict)
    # locals bound to a tuple, list or dict literal: a table a call may index (``_paths[i](x)``)
    tables: dict[str, ast.AST] = field(default_factory=dict)
    # locals bound to an ``arange`` call: an index ``index_select`` may be handed (``cols = torch.arange(0, n, 8)``)
    aranges: dict[str, ast.Call] = field(default_factory=dict)
    # locals bound to the tuple a split returns (``blocks = x.split(8)``): their truth is their length
    sequences: set[str] = field(default_factory=set)


def _out_keyword(keywords: list[ast.keyword]) -> ast.AST | None:
    """The value of a call's first ``out=`` keyword (a loop, not an early-exited next(generator))."""
    for k in keywords:
        if k.arg == "out":
            return k.value
    return None


def _inplace_keyword(keywords: list[ast.keyword]) -> bool:
    """``inplace=True`` among a call's keywords (a loop, not an early-exited any(generator): see
    ``HostModule.ancestors``)."""
    for k in keywords:
        if k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True:
            return True
    return False

_AUG = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@", ast.Pow: "**",
        ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|"}
_BUILTIN_NAMES = frozenset(dir(builtins))


def _mentions(lines: tuple[str, ...], start: int, end: int | None, words: set[str],
              spans: dict[tuple[int, int | None], str]) -> bool:
    """Whether some line of ``lines[start:end]`` contains one of ``words``.

    One substring search per word over the joined span rather than one per line and word.  A word
    with a non-printable character (every line break is one) could match across lines in the
    joined text, and the empty word matches any line but no empty span: those take the
    line-by-line path.
    """
    span = lines[start:end]
    if not span:
        return False
    if any(not w or not w.isprintable() for w in words):
        return any(w in line for line in span for w in words)
    text = spans.get((start, end))
    if text is None:
        text = spans[(start, end)] = "".join(span)
    return any(w in text for w in words)


def _uniq(items: list) -> list:
    """``items`` without repeats of one object, first occurrences in order."""
    if len(items) < 2:
        return items
    # a dict keeps each key where it was first inserted; a repeated id maps to the same object
    return list({id(it): it for it in items}.values())


def _with_lines(arm: Arm, node: ast.AST | None) -> Arm:
    if node is None:
        return arm
    return Arm(arm.label, node.lineno, node.end_lineno or node.lineno, arm.kernels, arm.ops, arm.allocs, arm.returns,
               arm.raises, arm.bindings, arm.value, arm.terminates)


def _module_level_defs(tree: ast.Module) -> list[ast.FunctionDef]:
    """Module-level functions, including those defined inside module-level ``if`` / ``try`` blocks."""
    out = []
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        n = stack.pop()
        t = type(n)  # exact types: a parsed tree has no subclasses
        if t is ast.FunctionDef or t is ast.AsyncFunctionDef:
            out.append(n)
        elif t is ast.If or t is ast.Try or t is ast.With:
            for name in ("finalbody", "orelse", "handlers", "body"):
                stack.extend(reversed(getattr(n, name, []) or []))
        elif t is ast.ExceptHandler:
            stack.extend(reversed(n.body))  # type: ignore[attr-defined]
    return out  # type: ignore[return-value]


def _broad(types: tuple[str, ...]) -> bool:
    """Whether a handler of these exception types (none: a bare ``except``) catches whatever a kernel raises."""
    return not types or any([t.rsplit(".", 1)[-1] in _BROAD_EXCEPTIONS for t in types])


# calls that may copy to another device or dtype: ``x.cpu().numpy()`` of a CUDA tensor is a copy
_COPYING = frozenset({"cpu", "cuda", "to", "float", "double", "half", "type", "clone", "contiguous"})


def _same_storage(e: ast.AST) -> bool:
    """Whether ``e.numpy()`` shares ``e``'s storage as written: a chain of views (``x.detach()``,
    ``x.view(-1)``) only.  ``.numpy()`` raises on a CUDA tensor, so a chain without ``.cpu()`` / ``.to()``
    is a CPU tensor whose array is a view; one with them may be a copy, and is not taken for a view."""
    while type(e) is ast.Call:
        f = e.func  # type: ignore[attr-defined]
        if type(f) is not ast.Attribute or f.attr in _COPYING or f.attr not in _ALIAS_VIEWS:
            return False
        e = f.value
    return True


def _names_arange(func: ast.AST) -> bool:
    """``torch.arange`` / ``arange`` spelled at a call: the callee's name alone (a bind asks it for every call)."""
    t = type(func)
    return t is ast.Attribute and func.attr == "arange" or t is ast.Name and func.id == "arange"  # type: ignore[attr-defined]


def _as_slice(node: ast.expr) -> ast.expr | None:
    """``slice(a, b, c)`` as the subscript syntax ``a:b:c`` (a ``Constant`` index stays one); None otherwise."""
    if type(node) is ast.Constant:
        return node
    if type(node) is not ast.Call or type(node.func) is not ast.Name or node.func.id != "slice" or node.keywords:
        return None
    a = [None if type(x) is ast.Constant and x.value is None else x for x in node.args]  # type: ignore[attr-defined]
    if len(a) == 1:
        return ast.Slice(lower=None, upper=a[0], step=None)
    if len(a) in (2, 3):
        return ast.Slice(lower=a[0], upper=a[1], step=a[2] if len(a) == 3 else None)
    return None


def _own_package(path: str) -> tuple[str | None, str | None]:
    """The top-level package a file on disk belongs to (the highest folder above it, unbroken, that
    holds an ``__init__.py``) and the folder that holds that package, or (None, None): a dataset
    record or a lone file has none.  Only a path naming a file on disk has one: a submission given as
    a string (``<string>``) or a dataset record (``data.jsonl:7``) would otherwise be placed in the
    folder the caller runs from (or the dataset's), and its verdict would depend on where that is."""
    if not path or not os.path.isfile(path):
        return None, None
    folder = os.path.dirname(os.path.abspath(path))
    top = root = None
    while folder and os.path.isfile(os.path.join(folder, "__init__.py")):
        top = os.path.basename(folder)
        parent = os.path.dirname(folder)
        root = parent
        if parent == folder:
            break
        folder = parent
    return top, root


_EXTENSION_NAME = re.compile(r"\b(?:CUDAExtension|CppExtension|Extension)\(\s*(?:name\s*=\s*)?[\"']([\w.]+)[\"']")


def _built_extensions(root: str | None) -> frozenset[str]:
    """Modules the package's build script compiles (``CUDAExtension(name="fused_ln_cuda", ...)`` in
    the ``setup.py`` beside the top package): importing one imports the package's own kernels."""
    if root is None:
        return frozenset()
    try:
        with open(os.path.join(root, "setup.py"), encoding="utf-8", errors="replace") as f:
            text = f.read(1_000_000)
    except OSError:
        return frozenset()
    return frozenset(n.rsplit(".", 1)[-1] for n in _EXTENSION_NAME.findall(text))


def _flag_params(fn: ast.FunctionDef) -> frozenset[str]:
    """Parameters that are Python flags: a ``bool`` or ``int`` default or annotation
    (``prenorm=False``, ``training: bool``, ``checkpoint_lvl: int = 0``).  Never tensors, whatever
    the harness passes: a branch on one picks a configuration, it does not read the data."""
    a = fn.args
    positional = list(a.posonlyargs) + list(a.args)
    defaults: dict[str, ast.expr] = dict(zip([p.arg for p in positional[len(positional) - len(a.defaults):]],
                                             a.defaults, strict=True))
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None})
    out = set()
    for p in positional + list(a.kwonlyargs):
        d = defaults.get(p.arg)
        if isinstance(d, ast.Constant) and isinstance(d.value, (bool, int)):
            out.add(p.arg)
        elif isinstance(p.annotation, ast.Name) and p.annotation.id in ("bool", "int"):
            out.add(p.arg)
    return frozenset(out)


def _pointer_bases(call: ast.Call) -> list[ast.AST]:
    """The tensors whose ``data_ptr()`` an expression wraps: ``cp.asarray(out.data_ptr())`` -> [out];
    ``from_dlpack(out)`` (a DLPack view of the same memory) -> [out]."""
    out = []
    stack: list[ast.AST] = [call]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Attribute) and n.func.attr == "data_ptr":
                out.append(n.func.value)
                continue
            fname = n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id if isinstance(n.func, ast.Name) else ""
            if fname == "from_dlpack" and n.args:
                # another framework's view of the tensor (CuTe, CuPy, JAX through DLPack): same memory
                out.append(n.args[0])
                continue
            if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Call):
                stack.append(n.func.value)  # ``from_dlpack(x).mark_layout_dynamic()``: a method of the view
            stack.extend(n.args)
            stack.extend(k.value for k in n.keywords)
    return out


def _dsl_name(name: str) -> bool:
    """CuTe DSL decorators (``cutlass.cute.jit`` / ``cute.kernel``): Python compiled to device code."""
    return name.endswith(("cute.jit", "cute.kernel"))


def _jit_name(name: str) -> bool:
    """``numba.cuda.jit`` and friends: device kernels compiled by a JIT other than Triton."""
    return name in ("numba.cuda.jit", "cuda.jit", "numba.cuda.jit.jit") or name.endswith(".cuda.jit")


def _is_static(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _literal(node: ast.AST) -> float | int | bool | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    return None


def _annotation_text(node: ast.AST) -> str:
    """``ast.unparse(node)``; a name or a dotted chain of names (``torch.Tensor``, the common
    annotations) is spelled directly, as unparse spells it, without building an unparser."""
    return dotted_name(node) or ast.unparse(node)


def _src(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse of odd nodes
        return "<expr>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
