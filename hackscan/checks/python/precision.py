"""Precision downgrade on the Python side (TAXONOMY class 14).

When the reference computes in float32, a candidate that casts to float16 / bfloat16, runs under
autocast, or flips the TF32 switches computes something less precise and gets speed for it.  On
``torch.rand`` inputs the error usually stays under the harness's tolerance, so the only honest
place to catch it is here (and in the dynamic stage's fp64 error budget).  When the reference
itself is half precision (or uses the same switches), none of this is a downgrade.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.indirection import lookup, namespace_writes, table_elements
from ...python.module import subtree
from ...python.patterns import MiscFacts
from ...python.resolve import dotted_name
from ...python.workshare import REAL_SHARE, heavy_share

HALF_DTYPES = {
    "torch.float16": "float16", "torch.half": "float16", "torch.bfloat16": "bfloat16",
    "torch.float8_e4m3fn": "float8", "torch.float8_e5m2": "float8", "torch.float8_e4m3fnuz": "float8",
    "torch.float8_e5m2fnuz": "float8", "torch.cuda.HalfTensor": "float16", "torch.HalfTensor": "float16",
    "torch.cuda.BFloat16Tensor": "bfloat16", "torch.BFloat16Tensor": "bfloat16",
    # the same rounding done by numpy on a zero-copy view (``x.numpy().astype(np.float16)``)
    "numpy.float16": "float16", "numpy.half": "float16",
}
_HALF_STRINGS = {"float16": "float16", "torch.float16": "float16", "half": "float16", "bfloat16": "bfloat16",
                 "torch.bfloat16": "bfloat16", "torch.cuda.HalfTensor": "float16", "torch.HalfTensor": "float16"}
HALF_METHODS = {"half": "float16", "bfloat16": "bfloat16"}
_HALF_NEEDLES = tuple({n.rsplit(".", 1)[-1] for n in HALF_DTYPES} | set(HALF_METHODS))
AUTOCAST = {
    "torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast",
    "torch.amp.autocast_mode.autocast", "torch.cuda.amp.autocast_mode.autocast", "torch.set_autocast_enabled",
    "torch.set_autocast_gpu_dtype", "torch.set_autocast_dtype",
}
# ops whose float32 math TF32 changes, by flag
TF32_MATMUL_OPS = (
    "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.baddbmm", "torch.addbmm", "torch.einsum",
    "torch.tensordot", "torch.chain_matmul", "torch.linalg.multi_dot", "torch.cdist", "torch.nn.functional.linear",
    "torch.nn.functional.bilinear", "torch.nn.functional.scaled_dot_product_attention", "torch.nn.Linear",
    "torch.nn.Bilinear", "torch.nn.LSTM", "torch.nn.GRU", "torch.nn.RNN", "torch.nn.LSTMCell", "torch.nn.GRUCell",
    "torch.nn.RNNCell", "torch.nn.MultiheadAttention", "torch.nn.Transformer", "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer", "Tensor.matmul", "Tensor.mm", "Tensor.bmm", "Tensor.addmm",
    "torch.nn.functional.multi_head_attention_forward", "torch.linalg.matmul", "torch.inner", "torch.outer",
    "torch.mv", "torch.dot", "torch.vdot", "torch.addmv", "Tensor.mv",
)
TF32_CONV_OPS = (
    "torch.nn.Conv1d", "torch.nn.Conv2d", "torch.nn.Conv3d", "torch.nn.ConvTranspose1d", "torch.nn.ConvTranspose2d",
    "torch.nn.ConvTranspose3d", "torch.nn.functional.conv1d", "torch.nn.functional.conv2d",
    "torch.nn.functional.conv3d", "torch.nn.functional.conv_transpose1d", "torch.nn.functional.conv_transpose2d",
    "torch.nn.functional.conv_transpose3d", "torch.conv1d", "torch.conv2d", "torch.conv3d", "torch.nn.LSTM",
    "torch.nn.GRU", "torch.nn.RNN",
)
# flag -> (kind, PyTorch's default for it)
TF32_FLAGS = {
    "torch.backends.cuda.matmul.allow_tf32": ("matmul", False),
    "torch.backends.cudnn.allow_tf32": ("conv", True),
    "torch.backends.cuda.matmul.fp32_precision": ("matmul", "ieee"),
    "torch.backends.cudnn.conv.fp32_precision": ("conv", "ieee"),
    "torch.backends.cudnn.rnn.fp32_precision": ("conv", "ieee"),
    "torch.backends.cudnn.fp32_precision": ("conv", "ieee"),
    "torch.backends.fp32_precision": ("matmul", "ieee"),
}
MATMUL_PRECISION = "torch.set_float32_matmul_precision"
_AUTOCAST_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in AUTOCAST)


def reference_uses_low_precision(ctx: ScanContext) -> bool:
    """The reference computes in half / bfloat16 itself, or casts or autocasts to them."""
    if ctx.host is None:
        return _reference_uses_low_precision(ctx)
    # HS170, HS171, HS172 and the Triton rules all ask: answer once per scan
    key = ("reference_uses_low_precision", id(ctx.reference), id(ctx.reference_module))
    return bool(ctx.patterns.shared(key, lambda: _reference_uses_low_precision(ctx)))


def _reference_uses_low_precision(ctx: ScanContext) -> bool:
    ref = ctx.reference
    if ref is None:
        return False
    if ref.dtype in ("float16", "bfloat16"):
        return True
    mod = ctx.reference_module
    if mod is None:
        return False
    if mod is ctx.host:
        # a self-contained file: only the reference's own class counts
        model = mod.classes().get("Model")
        nodes = list(ast.walk(model)) if model is not None else []
        return _uses_half(mod, [n for n in nodes if isinstance(n, ast.Attribute)],
                          [n for n in nodes if isinstance(n, ast.Call)])
    # every match below names one of ``_REF_NEEDLES``: a matching attribute or method by its own
    # ``.attr``, a canonical name by its last part (a conventional name maps to no half dtype or
    # autocast name)
    if _never_spelled(mod, _REF_NEEDLES):
        return False
    return _uses_half(mod, mod.of_type(ast.Attribute), mod.of_type(ast.Call))


def _never_spelled(mod, needles: tuple[str, ...]) -> bool:
    """Whether the reference's source spells none of ``needles`` (identifiers), so that no node of
    it can match them: a question about the reference then needs neither its index (every node by
    type, and the parent map, built for these questions alone on most files) nor a resolution.

    An attribute or method matches by its own ``.attr``; a canonical name by its last part, which
    is an ``.attr`` or an identifier of an import statement (``ImportMap``).  In an ASCII source
    identifiers are spelled as the tree holds them (no NFKC folding); any other source is not
    judged by its text."""
    text = mod.source.text
    return text.isascii() and not any(n in text for n in needles)


def _uses_half(mod, attributes: list, calls: list) -> bool:
    # an attribute's canonical name ends with its own ``.attr`` (or is ''), so only attributes named
    # like the last part of a half dtype / autocast name need resolving (same answers, most skipped)
    if any(node.attr in _HALF_DTYPE_ATTRS and mod.canonical(node) in HALF_DTYPES for node in attributes):
        return True
    for call in calls:
        f = call.func
        if type(f) is ast.Attribute:
            if f.attr in HALF_METHODS and not call.args:
                return True
            if f.attr in _AUTOCAST_ATTRS and mod.canonical(f) in AUTOCAST:
                return True
        elif mod.canonical(f) in AUTOCAST:
            return True
    return False


_HALF_DTYPE_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in HALF_DTYPES)
# what ``_uses_half`` can match, by name: see ``_reference_uses_low_precision``
_REF_NEEDLES = tuple(sorted(_HALF_DTYPE_ATTRS | set(HALF_METHODS) | _AUTOCAST_ATTRS))


def _half_expr(host, expr: ast.AST | None, dtype_vars: dict[str, str]) -> str | None:
    """The half-precision dtype an expression denotes, or None."""
    if expr is None:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return _HALF_STRINGS.get(expr.value)
    if isinstance(expr, ast.IfExp):
        a, b = _half_expr(host, expr.body, dtype_vars), _half_expr(host, expr.orelse, dtype_vars)
        return a if a and b else None
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, (ast.Tuple, ast.List)):
        # ``(torch.float32, torch.bfloat16)[int(x.numel() > 1024)]``: a tuple of dtypes indexed by a
        # value computed at run time may give any of them (a branch that tests a condition would be
        # an IfExp, which needs both arms half)
        elements = table_elements(expr) or []
        return next((got for got in (_half_expr(host, el, dtype_vars) for el in elements) if got), None)
    if isinstance(expr, (ast.Call, ast.Subscript)):
        direct = lookup(expr, host.canonical)  # ``getattr(torch, "float" + "16")``
        return _half_expr(host, direct, dtype_vars) if direct is not None else None
    name = host.canonical(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else ""
    if name in HALF_DTYPES:
        return HALF_DTYPES[name]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in HALF_METHODS:
        return None
    return dtype_vars.get(dotted_name(expr)) if isinstance(expr, (ast.Name, ast.Attribute)) else None


def _dtype_vars(facts: MiscFacts) -> dict[str, str]:
    """Names and ``self.`` attributes that are assigned a half dtype (``self.compute_dtype = torch.half``).

    Shared by HS170 and HS171 (read only)."""
    return facts.shared("half_dtype_vars", lambda: _find_dtype_vars(facts.host))  # type: ignore[return-value]


def _find_dtype_vars(host) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in host.of_type(ast.Assign):
        got = _half_expr(host, node.value, {})
        if got:
            for t in node.targets:
                name = dotted_name(t)
                if name:
                    out[name] = got
    return out


# the method names ``_cast_of`` reads a call without keywords by
_CAST_ATTRS = frozenset(HALF_METHODS) | {"to", "type", "astype"}


def _cast_of(host, call: ast.Call, dtype_vars: dict[str, str]) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute):
        if f.attr in HALF_METHODS and not call.args and not call.keywords:
            return HALF_METHODS[f.attr]
        if f.attr in ("to", "type", "astype"):
            for a in call.args:
                got = _half_expr(host, a, dtype_vars)
                if got:
                    return got
    for k in call.keywords:
        if k.arg == "dtype":
            if "autocast" in getattr(f, "attr", getattr(f, "id", "")):
                return None  # HS171's business
            return _half_expr(host, k.value, dtype_vars)
    return None


def _dtype_dispatch(host, node: ast.AST, dtype_vars: dict[str, str], facts=None, depth: int = 0,
                    tested: dict[ast.AST, bool] | None = None,
                    callers: dict[ast.AST | None, list[ast.Call]] | None = None) -> bool:
    """Inside a branch that tests for a half dtype: the cast only runs on half inputs.

    Also when the enclosing helper (``_forward_half``) is called only from such branches.
    ``tested`` memoises, per ``if`` node, whether its test names a half dtype (casts of one
    function share their enclosing branches; the answer depends only on the test).
    """
    fn = None
    for anc in host.ancestors(node):
        if isinstance(anc, (ast.If, ast.IfExp)):
            half = tested.get(anc) if tested is not None else None
            if half is None:
                half = any(isinstance(sub, (ast.Attribute, ast.Name, ast.Constant)) and _half_expr(host, sub, dtype_vars)
                           for sub in subtree(anc.test))
                if tested is not None:
                    tested[anc] = half
            if half:
                return True
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = anc
            break
    if fn is None or facts is None or depth >= 2 or fn is facts.forward:
        return False
    if callers is None:
        sites = [c for g in facts.runs for c in facts.nodes_by_owner(ast.Call).get(g, ()) if fn in facts.call_targets(c)]
    else:
        sites = _callers_of(facts, callers).get(fn, [])
    return bool(sites) and all(_dtype_dispatch(host, c, dtype_vars, facts, depth + 1, tested, callers) for c in sites)


def _callers_of(facts, memo: dict[ast.AST | None, list[ast.Call]]) -> dict[ast.AST | None, list[ast.Call]]:
    """The call sites in running code of each function, in the order ``_dtype_dispatch``'s plain
    filter lists them (the functions that run, then their calls): built into ``memo`` on its first
    use, one pass instead of one over every running call per cast."""
    if not memo:
        memo[None] = []  # built (no function is None): an index with no entry is not built again
        for g in facts.runs:
            for c in facts.nodes_by_owner(ast.Call).get(g, ()):
                for t in dict.fromkeys(facts.call_targets(c)):  # each target once, as ``fn in`` tests
                    memo.setdefault(t, []).append(c)
    return memo


def half_precision_cast(ctx: ScanContext) -> Iterator[Hit]:
    """HS170: float16 / bfloat16 casts and allocations when the reference computes in float32."""
    host = ctx.host
    if host is None or not ctx.patterns.uses(*_HALF_NEEDLES):
        return
    if ctx.reference is None or not ctx.reference.is_fp32:
        return
    facts = ctx.patterns
    dtype_vars = _dtype_vars(ctx.patterns)
    by_owner: dict[ast.AST | None, list[tuple[ast.Call, str]]] = {}
    tested: dict[ast.AST, bool] = {}
    callers: dict[ast.AST | None, list[ast.Call]] = {}
    attr_type, cast_attrs = ast.Attribute, _CAST_ATTRS
    for call in host.of_type(ast.Call):
        # ``_cast_of`` finds a cast only through a keyword or a method named in ``_CAST_ATTRS``: the
        # other calls, most of them, are passed over without calling it
        if not call.keywords:
            f = call.func
            if type(f) is not attr_type or f.attr not in cast_attrs:  # type: ignore[attr-defined]
                continue
        got = _cast_of(host, call, dtype_vars)
        if not got or _dtype_dispatch(host, call, dtype_vars, facts, tested=tested, callers=callers) or facts.is_main_guarded(call) or \
                facts.in_input_factory(call):
            continue
        by_owner.setdefault(facts.owner(call), []).append((call, got))
    if not by_owner or reference_uses_low_precision(ctx):
        return  # no cast: what runs (reachability) and the reference's own precision are not needed
    runs = facts.runs
    for owner, sites in by_owner.items():
        sites.sort(key=lambda s: (s[0].lineno, s[0].col_offset))
        call, dtype = sites[0]
        where = f"in {owner.name}()" if owner is not None else "at module level"
        more = f" (and {len(sites) - 1} more in the same function)" if len(sites) > 1 else ""
        live = owner in runs
        yield ctx.hit(ctx.at(call), args={"dtype": dtype, "where": where, "more": more,
                                          "ref": ctx.reference.dtype},
                      severity=None if live else Severity.WARNING,
                      confidence=None if live else Confidence.LOW,
                      evidence={"dtype": dtype, "lines": [c.lineno for c, _ in sites], "reachable": live})


def _enabled(call: ast.Call) -> bool:
    for k in call.keywords:
        if k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False:
            return False
    if call.args and isinstance(call.args[-1], ast.Constant) and call.args[-1].value is False:
        return False
    return True


def autocast_region(ctx: ScanContext) -> Iterator[Hit]:
    """HS171: autocast (float16 / bfloat16) around the candidate's compute when the reference is float32."""
    host = ctx.host
    if host is None or not ctx.patterns.uses(*_AUTOCAST_ATTRS):
        return
    if ctx.reference is None or not ctx.reference.is_fp32:
        return
    facts = ctx.patterns
    calls = [call for call in facts.calls_named(*_AUTOCAST_ATTRS) if facts.cname(call) in AUTOCAST and
             _enabled(call) and not facts.is_main_guarded(call) and not facts.in_input_factory(call)]
    # the autocast calls first: when there is none, the reference's own precision is not needed
    if not calls or reference_uses_low_precision(ctx):
        return
    dtype_vars = _dtype_vars(ctx.patterns)
    for call in calls:
        name = facts.cname(call)
        dtype_node = next((k.value for k in call.keywords if k.arg == "dtype"), None)
        if dtype_node is None and name in ("torch.set_autocast_gpu_dtype", "torch.set_autocast_dtype") and call.args:
            dtype_node = call.args[-1]
        if dtype_node is not None and host.canonical(dtype_node) in ("torch.float32", "torch.float", "torch.float64"):
            continue
        dtype = _half_expr(host, dtype_node, dtype_vars) if dtype_node is not None else None
        device = next((k.value for k in call.keywords if k.arg == "device_type"), call.args[0] if call.args else None)
        cpu = name.startswith("torch.cpu.") or (isinstance(device, ast.Constant) and device.value == "cpu")
        if dtype is None:
            dtype = "bfloat16" if cpu else "float16"
        owner = facts.owner(call)
        live = owner in facts.runs
        where = f"{owner.name}()" if owner is not None else "module-level code"
        yield ctx.hit(ctx.at(call), args={"dtype": dtype, "where": where},
                      severity=Severity.WARNING if (cpu or not live) else None,
                      confidence=Confidence.LOW if not live else None,
                      evidence={"dtype": dtype, "device": "cpu" if cpu else "cuda", "reachable": live})


def _flag_value(host, node: ast.AST) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    return ...


def _reference_sets(ctx: ScanContext, flag: str) -> bool:
    mod = ctx.reference_module
    if mod is None or mod is ctx.host:
        return False
    if _never_spelled(mod, (flag.rsplit(".", 1)[-1],)):  # no assignment can name the flag
        return False
    for node in mod.of_type(ast.Assign):
        if any(mod.canonical(t) == flag for t in node.targets):
            return True
    if flag == MATMUL_PRECISION:
        return any(mod.canonical(c.func) == MATMUL_PRECISION for c in mod.of_type(ast.Call))
    return False


def _reference_affected(ctx: ScanContext, kind: str) -> bool:
    ops = ctx.reference.forward_ops if ctx.reference is not None else ()
    wanted = TF32_MATMUL_OPS if kind == "matmul" else TF32_CONV_OPS
    return any(op in wanted for op in ops)


def _real_share(ctx: ScanContext, kind: str) -> tuple[bool, str]:
    """Whether the ops TF32 touches are a real share of the reference's work, with the estimate's account
    (``workshare``); an unknown share counts as real (the switch is still a downgrade)."""
    assert ctx.reference is not None
    share, account = heavy_share(ctx.reference, kind)
    if share is None:
        return True, ""
    return share >= REAL_SHARE, account


# the identifiers one of which every namespace write that can name a TF32 flag spells (``tf32_enabled``)
_NAMESPACE_WORDS = ("setattr", "__setattr__", "__dict__", "vars")


def tf32_enabled(ctx: ScanContext) -> Iterator[Hit]:
    """HS172: TF32 switches (allow_tf32, fp32_precision, set_float32_matmul_precision) turned on."""
    host = ctx.host
    if host is None or not ctx.patterns.uses("allow_tf32", "fp32_precision", "set_float32_matmul_precision",
                                                 "setattr", "__setattr__", "__dict__", "vars"):
        return
    ref = ctx.reference
    if ref is not None and not ref.is_fp32:
        return
    facts = ctx.patterns
    events: list[tuple[ast.AST, str, str, object]] = []  # node, flag, kind, value
    for node in host.of_type(ast.Assign, ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if not (isinstance(t, ast.Attribute) and t.attr in ("allow_tf32", "fp32_precision")):
                continue
            flag = host.canonical(t)
            if flag in TF32_FLAGS:
                events.append((t, flag, TF32_FLAGS[flag][0], _flag_value(host, node.value)))
    # the same switches written as ``setattr(torch.backends.cuda.matmul, "allow_tf32", True)``,
    # ``torch.backends.cudnn.__setattr__("allow_tf32", True)``, ``vars(torch.backends.cudnn)[...] = ...``.
    # A namespace write that can name a flag spells one of these four (``namespace_writes``: a
    # ``setattr`` / ``__setattr__`` call, or ``vars(X)`` / ``X.__dict__`` as the namespace; the module's
    # own, ``globals()``, holds no ``torch.backends`` flag): the files that only assign the flags skip it
    if facts.uses(*_NAMESPACE_WORDS):
        for node in host.of_type(ast.Expr, ast.Assign):
            if type(node) is ast.Assign and not any(type(t) is ast.Subscript for t in node.targets):
                continue
            for t, value in namespace_writes(node, host.canonical):
                if isinstance(t, ast.Attribute) and t.attr in ("allow_tf32", "fp32_precision"):
                    flag = host.canonical(t)
                    if flag in TF32_FLAGS:
                        events.append((node, flag, TF32_FLAGS[flag][0], _flag_value(host, value)))
    for call in facts.calls_named("set_float32_matmul_precision"):
        if facts.cname(call) == MATMUL_PRECISION and call.args:
            events.append((call, MATMUL_PRECISION, "matmul", _flag_value(host, call.args[0])))
    # the switches first: most files that name one never write it, and then the reference's own
    # precision (its module indexed and its names resolved) is not needed
    if not events or (ref is not None and reference_uses_low_precision(ctx)):
        return
    for node, flag, kind, value in events:
        if facts.is_main_guarded(node):
            continue
        if value is False or value in ("ieee", "highest"):
            continue  # strictness is never a downgrade
        if _reference_sets(ctx, flag):
            continue
        default = TF32_FLAGS.get(flag, ("matmul", "highest"))[1]
        shown = f"{flag}({value!r})" if flag == MATMUL_PRECISION else f"{flag} = {value!r}"
        if value is ...:
            shown = f"{flag} to a value computed at run time"
        op_word = "matmuls" if kind == "matmul" else "convolutions and RNNs"
        if ref is None:
            sev, conf, why = Severity.WARNING, Confidence.MEDIUM, "no reference was given to tell whether it matters"
        elif value == default:
            sev, conf = Severity.WARNING, Confidence.MEDIUM
            why = (f"this is PyTorch's default, so the reference may already run {op_word} in TF32, but it overrides "
                   "a harness that asks for strict float32")
        elif value is ...:
            sev, conf, why = Severity.WARNING, Confidence.LOW, "the value is not known statically"
        elif _reference_affected(ctx, kind) and _real_share(ctx, kind)[0]:
            sev, conf = Severity.ERROR, Confidence.HIGH
            why = (f"the reference's float32 {op_word} then run in TF32 (10-bit mantissa) for the candidate; the write "
                   "also changes the baseline the harness measures against")
            account = _real_share(ctx, kind)[1]
            if account:
                why += f"; {account}"
        elif _reference_affected(ctx, kind):
            # the stakes decide: TF32 on a GEMM that is a sliver of the work changes little
            sev, conf = Severity.WARNING, Confidence.MEDIUM
            why = (f"the reference's float32 {op_word} then run in TF32, but {_real_share(ctx, kind)[1]}: the "
                   "downgrade touches little of the result")
        else:
            sev, conf = Severity.WARNING, Confidence.MEDIUM
            why = f"the reference has no {op_word}, but the write changes global state the harness shares"
        yield ctx.hit(ctx.at(node), args={"shown": shown, "why": why}, severity=sev, confidence=conf,
                      evidence={"flag": flag, "value": None if value is ... else value, "kind": kind})
