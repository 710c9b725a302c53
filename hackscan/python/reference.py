"""Facts about the reference problem: its shapes, dtypes, ops and parameters.

Rules use the reference to tell a hardcoded test shape from a block size (a literal equal to one
of the task's dims), a torch fallback from an allocation (the candidate computes the reference's
own op), a precision downgrade from mixed precision (the reference's dtype), and a parameter blind
spot (the reference has parameters the candidate never reads).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..units import MappedText
from ..util.lazy import cached_property
from ..util.quick_init import quick_init
from .module import HostModule, statements, subtree
from .resolve import Unresolved

TENSOR_FACTORIES = {
    "torch.rand": "rand", "torch.randn": "randn", "torch.randint": "randint", "torch.ones": "ones",
    "torch.zeros": "zeros", "torch.empty": "empty", "torch.full": "full", "torch.arange": "arange",
    "torch.tensor": "tensor", "torch.randperm": "randperm", "torch.rand_like": "rand", "torch.randn_like": "randn",
    "torch.linspace": "linspace", "torch.eye": "eye", "torch.bernoulli": "bernoulli",
}
_DTYPES = {
    "torch.float32": "float32", "torch.float": "float32", "torch.float16": "float16", "torch.half": "float16",
    "torch.bfloat16": "bfloat16", "torch.float64": "float64", "torch.double": "float64", "torch.int32": "int32",
    "torch.int64": "int64", "torch.long": "int64", "torch.int": "int32", "torch.bool": "bool", "torch.int8": "int8",
    "torch.uint8": "uint8",
}
_CAST_METHODS = {"half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16", "long": "int64",
                 "int": "int32", "bool": "bool"}
# nn modules that hold learnable parameters (with their default-initialised names)
PARAM_MODULES = {
    "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "Embedding", "EmbeddingBag", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell",
    "MultiheadAttention", "PReLU", "RMSNorm", "TransformerEncoderLayer", "TransformerDecoderLayer", "Transformer",
}


@quick_init
@dataclass(frozen=True)
class InputSpec:
    """One value returned by ``get_inputs()``."""

    kind: str  # rand / randn / randint / ones / ... / scalar / unknown
    shape: tuple[int | None, ...] | None  # None when not a tensor or not resolvable
    dtype: str = "float32"
    value: Any = None  # for scalars
    line: int = 0


@quick_init
@dataclass(frozen=True)
class ReferenceFacts:
    module: HostModule
    has_model: bool
    # module-level numeric constants by name (batch_size = 16, dim = 16384)
    constants: Mapping[str, int | float] = field(default_factory=dict)
    inputs: tuple[InputSpec, ...] = ()
    init_inputs: tuple[Any, ...] = ()
    # canonical torch ops called in Model.forward (``torch.matmul``, ``torch.nn.functional.relu``,
    # ``Tensor.sum`` for methods) plus ``torch.nn.Conv2d`` for submodules called there
    forward_ops: tuple[str, ...] = ()
    # self attributes assigned an nn module in __init__: attr -> ``torch.nn.Conv2d``
    submodules: Mapping[str, str] = field(default_factory=dict)
    # self attributes that are (or hold) learnable parameters or buffers
    parameters: tuple[str, ...] = ()
    dtype: str = "float32"

    # ``dims`` and ``distinctive_dims`` are cached: rules read them several times per scan, and
    # what they derive from (``inputs``, ``init_inputs``) never changes once built
    @cached_property
    def dims(self) -> frozenset[int]:
        """Every integer that is a dimension of a reference input, or an init argument."""
        out: set[int] = set()
        for spec in self.inputs:
            if spec.shape:
                out.update(d for d in spec.shape if isinstance(d, int))
        for v in self.init_inputs:
            if isinstance(v, int) and not isinstance(v, bool):
                out.add(v)
            elif isinstance(v, (list, tuple)):
                out.update(x for x in v if isinstance(x, int) and not isinstance(x, bool))
        return frozenset(out)

    @cached_property
    def distinctive_dims(self) -> frozenset[int]:
        """Dims that are unlikely to be a block/tile/warp size by coincidence.

        Small values and powers of two up to 1024 are what legitimate kernels use as tile and block
        sizes; a literal equal to one of those proves little.  Rules treat matches against
        ``distinctive_dims`` as strong evidence and the others as weak.
        """
        return frozenset(d for d in self.dims if d > 1024 or (d > 8 and d & (d - 1)))

    def dim_names(self) -> dict[int, str]:
        """Constant name for each dim value where the reference names it (``dim`` for 16384)."""
        return {v: k for k, v in self.constants.items() if isinstance(v, int)}

    @property
    def is_fp32(self) -> bool:
        return self.dtype == "float32"

    @cached_property
    def families(self) -> frozenset[str]:
        """One name per operation of ``forward_ops`` (``F.relu``, ``nn.ReLU``, ``x.relu()`` -> ``relu``)."""
        from .catalog import op_family

        return frozenset(op_family(o) for o in self.forward_ops) - {"sequential", "modulelist"}


def build_reference_facts(mod: HostModule) -> ReferenceFacts:
    constants, model, get_inputs, get_init_inputs = _top_level(mod)
    forward_ops: list[str] = []
    submodules: dict[str, str] = {}
    parameters: list[str] = []
    if model is not None:
        walks = _Walks()
        submodules, parameters, members = _init_facts(mod, model, walks)
        forward_ops = _forward_ops(mod, model, submodules, members, walks)
    inputs = _get_inputs(mod, get_inputs)
    init_inputs = _get_init_inputs(mod, get_init_inputs)
    dtypes = [s.dtype for s in inputs if s.kind not in ("scalar", "unknown", "randint")]
    dtype = dtypes[0] if dtypes else "float32"
    return ReferenceFacts(
        module=mod, has_model=model is not None, constants=constants, inputs=tuple(inputs),
        init_inputs=tuple(init_inputs), forward_ops=tuple(forward_ops), submodules=submodules,
        parameters=tuple(parameters), dtype=dtype,
    )


def _top_level(mod: HostModule) -> tuple[dict[str, int | float], ast.ClassDef | None, ast.FunctionDef | None,
                                         ast.FunctionDef | None]:
    """What the facts read of the module body, in one pass over its statements: the numeric
    constants bound at module level, the ``Model`` class (the last one, as ``mod.classes()``
    keeps it) and the ``get_inputs`` / ``get_init_inputs`` functions (the first module-level def
    of each name)."""
    out: dict[str, int | float] = {}
    model: ast.ClassDef | None = None
    get_inputs: ast.FunctionDef | None = None
    get_init_inputs: ast.FunctionDef | None = None
    for stmt in mod.tree.body:
        t = type(stmt)  # parsed trees hold the concrete node classes only
        if t is ast.Assign:
            _constants_of(mod, stmt, stmt.targets, out)  # type: ignore[attr-defined]
        elif t is ast.AnnAssign:
            if stmt.value is not None:  # type: ignore[attr-defined]
                _constants_of(mod, stmt, [stmt.target], out)  # type: ignore[attr-defined]
        elif t is ast.FunctionDef:
            name = stmt.name  # type: ignore[attr-defined]
            if name == "get_inputs":
                if get_inputs is None:
                    get_inputs = stmt  # type: ignore[assignment]
            elif name == "get_init_inputs":
                if get_init_inputs is None:
                    get_init_inputs = stmt  # type: ignore[assignment]
        elif t is ast.ClassDef and stmt.name == "Model":  # type: ignore[attr-defined]
            model = stmt  # type: ignore[assignment]
    return out, model, get_inputs, get_init_inputs


def _constants_of(mod: HostModule, stmt: ast.AST, targets: list[ast.AST], out: dict[str, int | float]) -> None:
    """The numbers an assignment at module level binds to plain names (``dim = 16384``, ``a, b = 1, 2``)."""
    for t in targets:
        if isinstance(t, ast.Name):
            v = _number(mod, stmt.value, stmt.lineno + 1)  # type: ignore[attr-defined]
            if v is not None:
                out[t.id] = v
        elif isinstance(t, ast.Tuple) and isinstance(stmt.value, ast.Tuple):  # type: ignore[attr-defined]
            # not strict: ``a, b = 1, 2, 3`` parses (it fails only when run), and the pairs that exist are read
            for tt, vv in zip(t.elts, stmt.value.elts, strict=False):  # type: ignore[attr-defined]
                if isinstance(tt, ast.Name):
                    v = _number(mod, vv, stmt.lineno + 1)  # type: ignore[attr-defined]
                    if v is not None:
                        out[tt.id] = v


def _number(mod: HostModule, expr: ast.AST, line: int) -> int | float | None:
    """The int or float (not bool) ``expr`` folds to, else None.

    A literal is its own value: what ``Resolver.try_value`` would return for it, without its
    dispatch, and without decoding the source of a string literal whose value is dropped anyway.
    """
    if type(expr) is ast.Constant:
        v = expr.value  # type: ignore[attr-defined]
    else:
        v = mod.resolver.try_value(expr, mod.module_scope, line)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v
    return None


class _Walks(dict):
    """Each function's nodes in ``ast.walk`` order, walked once per reference (``__init__`` is
    read by two of the fact builders)."""

    def __missing__(self, fn: ast.AST) -> list[ast.AST]:
        got = self[fn] = subtree(fn)
        return got

    def init(self, mod: HostModule, fn: ast.AST) -> list[ast.AST]:
        """What ``_init_facts`` reads of ``__init__``: its
        assignments and its ``register_buffer`` / ``register_parameter`` calls, in walk order.

        Assignments are statements; a call can sit anywhere, but one of those two names cannot
        exist where the (ASCII: no identifier normalisation) text never spells it: the statement
        walk then gives the same nodes in the same order, without walking every expression.
        """
        key = ("init", fn)
        got = self.get(key)
        if got is None:
            text = mod.source.text
            if text.isascii() and "register_" not in text:
                got = statements(fn)[0]
            else:
                got = self[fn]
            self[key] = got
        return got


def _plain(v: Any) -> Any:
    if isinstance(v, MappedText):
        return v.text
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _tensor_spec(mod: HostModule, expr: ast.AST, fn_scope: Any, local_defs: dict[str, ast.AST], depth: int = 0) -> InputSpec:
    line = getattr(expr, "lineno", 0)
    if depth > 8:
        return InputSpec("unknown", None, line=line)
    if isinstance(expr, ast.Name) and expr.id in local_defs:
        return _tensor_spec(mod, local_defs[expr.id], fn_scope, local_defs, depth + 1)
    # method chains: torch.randn(...).cuda().half(), x.to(dtype)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        attr = expr.func.attr
        base_name = mod.canonical(expr.func)
        if base_name not in TENSOR_FACTORIES and attr in ("cuda", "cpu", "contiguous", "to", "requires_grad_",
                                                           *_CAST_METHODS):
            inner = _tensor_spec(mod, expr.func.value, fn_scope, local_defs, depth + 1)
            dtype = inner.dtype
            if attr in _CAST_METHODS:
                dtype = _CAST_METHODS[attr]
            elif attr == "to":
                for a in list(expr.args) + [k.value for k in expr.keywords if k.arg == "dtype"]:
                    dtype = _DTYPES.get(mod.canonical(a), dtype)
            return InputSpec(inner.kind, inner.shape, dtype, inner.value, line)
    if isinstance(expr, ast.Call):
        name = mod.canonical(expr.func)
        kind = TENSOR_FACTORIES.get(name)
        if kind is not None:
            dtype = "int64" if kind in ("randint", "randperm", "arange") else "float32"
            for k in expr.keywords:
                if k.arg == "dtype":
                    dtype = _DTYPES.get(mod.canonical(k.value), dtype)
            args = list(expr.args)
            if kind == "randint":
                # randint(low?, high, size): the size is the tuple argument
                args = [a for a in args if isinstance(a, (ast.Tuple, ast.List))] or [
                    k.value for k in expr.keywords if k.arg == "size"]
            elif kind in ("full",):
                args = args[:1]
            elif kind in ("tensor", "arange", "linspace", "rand_like", "randn_like"):
                return InputSpec(kind, None, dtype, line=line)
            else:
                size_kw = [k.value for k in expr.keywords if k.arg == "size"]
                args = args or size_kw
            shape = _shape(mod, args, fn_scope, expr.lineno)
            return InputSpec(kind, shape, dtype, line=line)
    v = mod.resolver.try_value(expr, fn_scope, line + 1)
    if v is not Unresolved and isinstance(v, (int, float, bool)):
        return InputSpec("scalar", None, "scalar", v, line)
    return InputSpec("unknown", None, line=line)


def _shape(mod: HostModule, args: list[ast.AST], scope: Any, line: int) -> tuple[int | None, ...] | None:
    dims: list[int | None] = []
    for a in args:
        if isinstance(a, ast.Starred):
            v = mod.resolver.try_value(a.value, scope, line + 1)
            if isinstance(v, list):
                dims.extend(x if isinstance(x, int) else None for x in v)
            else:
                return None
            continue
        v = mod.resolver.try_value(a, scope, line + 1)
        if isinstance(v, list):
            dims.extend(x if isinstance(x, int) and not isinstance(x, bool) else None for x in v)
        elif isinstance(v, int) and not isinstance(v, bool):
            dims.append(v)
        else:
            dims.append(None)
    return tuple(dims)


def _get_inputs(mod: HostModule, fn: ast.FunctionDef | None) -> list[InputSpec]:
    if fn is None:
        return []
    # assignments and returns are statements: the statement walk finds them in the same order
    stmts, parents = statements(fn)
    scope = mod.scope_of(fn.body[0], parents) if fn.body else mod.module_scope
    local_defs: dict[str, ast.AST] = {}
    ret: ast.AST | None = None
    for stmt in stmts:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            local_defs[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.Return):
            ret = stmt.value
    if ret is None:
        return []
    if isinstance(ret, ast.Name) and ret.id in local_defs:
        ret = local_defs[ret.id]
    if not isinstance(ret, (ast.List, ast.Tuple)):
        return [_tensor_spec(mod, ret, scope, local_defs)]
    return [_tensor_spec(mod, e, scope, local_defs) for e in ret.elts]


def _get_init_inputs(mod: HostModule, fn: ast.FunctionDef | None) -> list[Any]:
    if fn is None:
        return []
    stmts, parents = statements(fn)
    for stmt in stmts:
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            v = mod.resolver.try_value(stmt.value, mod.scope_of(stmt, parents), stmt.lineno + 1)
            if isinstance(v, list):
                return [_plain(x) for x in v]
            return []
    return []


def _init_facts(mod: HostModule, model: ast.ClassDef, walks: _Walks
                ) -> tuple[dict[str, str], list[str], dict[str, tuple[str, ...]]]:
    """What ``Model.__init__`` sets up, in one pass over its assignments and calls: the nn
    submodules by attribute (``self.conv = nn.Conv2d(...)`` -> {"conv": "torch.nn.Conv2d"}), the
    attributes holding learnable parameters or buffers, and the members of each container
    (``self.seq = nn.Sequential(nn.Conv2d(...), nn.ReLU())`` -> {"seq": ("torch.nn.Conv2d",
    "torch.nn.ReLU")})."""
    submodules: dict[str, str] = {}
    parameters: list[str] = []
    members: dict[str, tuple[str, ...]] = {}
    for fn in model.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
            continue
        for node in walks.init(mod, fn):
            nt = type(node)  # parsed trees hold the concrete node classes only
            if nt is ast.Assign:
                value = node.value
                if not isinstance(value, ast.Call):
                    continue  # neither a submodule, a parameter nor a container
                cls = mod.canonical(value.func)
                short = cls.rsplit(".", 1)[-1]
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        if cls.startswith("torch.nn.") and short[:1].isupper() and short != "Parameter":
                            submodules[t.attr] = cls
                            if short in PARAM_MODULES:
                                parameters.append(t.attr)
                        elif short == "Parameter":
                            parameters.append(t.attr)
                if cls in ("torch.nn.Sequential", "torch.nn.ModuleList"):
                    names = tuple(mod.canonical(a.func) for a in value.args if isinstance(a, ast.Call))
                    for t in node.targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            members[t.attr] = tuple(n for n in names if n.startswith("torch."))
            elif nt is ast.Call and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "register_buffer", "register_parameter") and node.args:
                v = node.args[0]
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    parameters.append(v.value)
    return submodules, parameters, members


_OPERATORS = {ast.Add: "torch.add", ast.Sub: "torch.sub", ast.Mult: "torch.mul", ast.Div: "torch.div",
              ast.Pow: "torch.pow", ast.FloorDiv: "torch.floor_divide", ast.Mod: "torch.remainder"}


def _forward_ops(mod: HostModule, model: ast.ClassDef, submodules: Mapping[str, str],
                 members: Mapping[str, tuple[str, ...]] | None, walks: _Walks) -> list[str]:
    ops: list[str] = []
    methods = {f.name: f for f in model.body if isinstance(f, ast.FunctionDef)}
    # forward, then the methods it calls on self (one level): ``return self._impl(x)``.  Each
    # method's walk is split into its calls and binary operations once; forward's calls, in walk
    # order, also name the methods reached.
    reached = [methods["forward"]] if "forward" in methods else []
    split: dict[ast.AST, tuple[list[ast.AST], list[ast.AST]]] = {}
    for fn in reached:  # grows while forward's calls are read
        calls: list[ast.AST] = []
        binops: list[ast.AST] = []
        for node in walks[fn]:
            t = type(node)  # parsed trees hold the concrete node classes only
            if t is ast.Call:
                calls.append(node)
            elif t is ast.BinOp:
                binops.append(node)
        split[fn] = calls, binops
        if fn is reached[0]:
            for node in calls:
                func = node.func  # type: ignore[attr-defined]
                if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
                    target = methods.get(func.attr)
                    if target is not None and func.attr != "forward" and target not in reached:
                        reached.append(target)
    for fn in reached:
        calls, binops = split[fn]
        for node in calls:
            func = node.func  # type: ignore[attr-defined]
            name = mod.canonical(func)
            if name.startswith("torch."):
                ops.append(name)
            elif type(func) is ast.Attribute:
                if type(func.value) is ast.Name and func.value.id == "self":
                    if func.attr in submodules:
                        ops.append(submodules[func.attr])
                        ops.extend((members or {}).get(func.attr, ()))
                    continue
                ops.append(f"Tensor.{func.attr}")
        # operators: a @ b, a * b (on tensors or not: the reference's arithmetic is its computation)
        for node in binops:
            if type(node.op) is ast.MatMult:  # type: ignore[attr-defined]
                ops.append("torch.matmul")
        for node in binops:
            op = _OPERATORS.get(type(node.op))  # type: ignore[attr-defined]
            if op is not None and not (type(node.left) is ast.Constant  # type: ignore[attr-defined]
                                       and type(node.right) is ast.Constant):  # type: ignore[attr-defined]
                ops.append(op)
    return list(dict.fromkeys(ops))  # first occurrences, in order
