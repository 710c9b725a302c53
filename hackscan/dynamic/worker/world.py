"""Worker side: a snapshot of everything a candidate could change that would reach other code sharing
its process, taken before the untrusted import and compared after the import, construction and calls.

A harness that runs many candidates (or the reference) in one process inherits whatever a candidate
leaves behind: a replaced ``torch.nn.functional.softmax`` or ``Tensor.sum``, a Python kernel
registered over an ATen operator, a global module hook or an active dispatch mode, a rewritten
function of an already imported library, a narrowed CPU affinity, a lowered resource limit, a
signal handler, a trace function.  Each of these alters another model run after it, whatever the
candidate's own results are; an honest kernel changes none of them (adding operators in a namespace
of its own, importing modules and building extensions are not changes to what was there).

The snapshot runs in the candidate's process, so a candidate can defeat it; it can only add
findings (the parent never clears anything on its word).  Names watched by ``guard.GlobalState``
(timers, comparison functions) are left to it.
"""

from __future__ import annotations

import sys
from typing import Any

# top-level packages whose already-loaded modules are watched (functions and classes, by identity)
WATCHED_PACKAGES = ("torch", "numpy", "math", "time", "builtins", "functools", "operator", "os", "gc",
                    "random", "itertools", "copy", "threading", "contextlib", "inspect", "importlib")

# nn.Module's process-wide hook registries (a hook there runs on every module's call)
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks", "_global_forward_hooks_always_called",
                 "_global_module_registration_hooks", "_global_parameter_registration_hooks",
                 "_global_buffer_registration_hooks")


def _ident(value: Any) -> str:
    inner = getattr(value, "__func__", value)
    return f"{type(inner).__name__}@{id(inner):x}"


def _public(module: str) -> bool:
    """A module whose classes are watched: no private part in its name, or the two that hold
    ``Tensor``'s methods (private modules' classes are patched by torch itself on lazy imports)."""
    return module in ("torch._tensor", "torch._C") or not any(p.startswith("_") for p in module.split("."))


def _torch_file(path: str) -> bool:
    import os

    torch = sys.modules.get("torch")
    root = os.path.dirname(getattr(torch, "__file__", "") or "") if torch is not None else ""
    return bool(root) and os.path.abspath(path).startswith(root + os.sep)


def _is_own_wrapper(new: Any, old: Any) -> bool:
    """torch wraps some of its own functions when a submodule loads lazily (``torch._dynamo`` wraps
    ``torch.manual_seed``, ``nn.Module.__init__``, optimizers' methods): a wrapper whose code is
    torch's and that reaches the very object that was there (through ``__wrapped__`` or a closure
    cell, every layer on the way torch's code too) is not a replacement.  A candidate's wrapper has
    code of its own, and the walk stops at it."""
    targets = set()
    x = old
    for _ in range(4):
        if x is None:
            break
        targets.add(id(x))
        targets.add(id(getattr(x, "__func__", x)))
        x = getattr(x, "__wrapped__", None)
    frontier, steps = [new], 0
    while frontier and steps < 16:
        x = frontier.pop()
        steps += 1
        x = getattr(x, "__func__", x)
        if steps > 1 and id(x) in targets:
            return True
        code = getattr(x, "__code__", None)
        if code is None or not _torch_file(code.co_filename):
            continue  # only torch's own layers are walked through
        nxt = getattr(x, "__wrapped__", None)
        if nxt is not None:
            frontier.append(nxt)
        for cell in getattr(x, "__closure__", None) or ():
            try:
                c = cell.cell_contents
            except ValueError:
                continue
            if callable(c):
                frontier.append(c)
    return False


def _watched(value: Any) -> bool:
    """Functions, builtins, classes, descriptors: what code calls (data attributes change legitimately:
    caches, counters, lazily filled tables)."""
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


class World:
    """The snapshot, taken at construction with functions captured then."""

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        import builtins

        self._skip = skip
        self._id = id
        self._vars = vars
        self._callable = callable
        self._isinstance = isinstance
        self._type = type
        self._sorted = sorted
        self._modules, self._classes = self._code()
        self._builtins = dict(vars(builtins))
        self._process = self._process_state()
        names = getattr(getattr(sys.modules.get("torch"), "_C", None), "_dispatch_get_all_op_names", None)
        self._ops = frozenset(names()) if names is not None else None
        self._runtime = self._torch_runtime(self._ops)
        self._dispatch: dict[str, str] | None = None

    # ----------------------------------------------------------------------------- taking it
    def _code(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """Every watched attribute of every loaded module of the watched packages, and of every class
        defined in their public modules (methods replaced on ``Tensor``, ``nn.Module``,
        ``nn.Linear``...).  Objects are kept (not only their ids) to tell torch's own lazy wrapping
        of a function (``_is_own_wrapper``) from a replacement."""
        modules: dict[str, dict[str, Any]] = {}
        classes: dict[str, dict[str, Any]] = {}
        for name, mod in list(sys.modules.items()):
            if mod is None or name.split(".")[0] not in WATCHED_PACKAGES:
                continue
            try:
                items = list(vars(mod).items())
            except TypeError:
                continue
            attrs = {}
            with_classes = _public(name)
            for k, v in items:
                if k.startswith("__") or isinstance(v, type(sys)) or not _watched(v):
                    continue
                attrs[k] = v
                if with_classes and isinstance(v, type) and getattr(v, "__module__", None) == name:
                    try:
                        classes[f"{name}.{v.__qualname__}"] = {
                            m: x for m, x in list(vars(v).items())
                            if (not m.startswith("__") or m in _DUNDERS) and _watched(x)}
                    except TypeError:
                        pass
            modules[name] = attrs
        return modules, classes

    @staticmethod
    def _process_state() -> dict[str, str]:
        import gc
        import os
        import signal

        out: dict[str, str] = {}
        try:
            out["os.sched_getaffinity(0)"] = repr(sorted(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            pass
        try:
            import resource

            for name in dir(resource):
                if name.startswith("RLIMIT_"):
                    try:
                        out[f"resource.getrlimit({name})"] = repr(resource.getrlimit(getattr(resource, name)))
                    except (OSError, ValueError):
                        pass
        except ImportError:
            pass
        for sig in signal.valid_signals():
            try:
                out[f"signal handler {signal.Signals(sig).name}"] = _ident(signal.getsignal(sig))
            except (ValueError, OSError):
                pass
        try:
            out["os.getpriority"] = repr(os.getpriority(os.PRIO_PROCESS, 0))
        except (AttributeError, OSError):
            pass
        out["sys.gettrace()"] = _ident(sys.gettrace())
        out["sys.getprofile()"] = _ident(sys.getprofile())
        out["sys.getswitchinterval()"] = repr(sys.getswitchinterval())
        out["sys.getrecursionlimit()"] = repr(sys.getrecursionlimit())
        out["gc.isenabled()"] = repr(gc.isenabled())
        out["gc.get_threshold()"] = repr(gc.get_threshold())
        out["sys.meta_path"] = repr([_ident(f) for f in sys.meta_path])
        out["sys.excepthook"] = _ident(sys.excepthook)
        return out

    @staticmethod
    def _torch_runtime(existing: frozenset[str] | None = None) -> dict[str, str]:
        """What the torch runtime applies to every later call: modes, global hooks, Python kernels."""
        out: dict[str, str] = {}
        torch = sys.modules.get("torch")
        if torch is None:
            return out
        c = torch._C
        for name in ("_len_torch_function_stack", "_len_torch_dispatch_stack"):
            fn = getattr(c, name, None)
            if fn is not None:
                out[f"torch._C.{name}()"] = repr(fn())
        for name in ("_is_torch_function_mode_enabled", "_is_torch_function_enabled"):
            fn = getattr(c, name, None)
            if fn is not None:
                out[f"torch._C.{name}()"] = repr(fn())
        mm = sys.modules.get("torch.nn.modules.module")
        for name in _GLOBAL_HOOKS:
            hooks = getattr(mm, name, None)
            if hooks is not None:
                out[f"torch.nn.modules.module.{name}"] = repr(len(hooks))
        # kernels registered from Python over existing operators (torch.library.impl / Library.impl)
        # (only over operators that existed at the snapshot, and only kernels that compute:
        # torch's own lazy imports define new prims and register Meta kernels)
        impls = getattr(sys.modules.get("torch.library"), "_impls", None)
        if isinstance(impls, set) and existing is not None:
            for key in impls:
                ns, _, rest = key.partition("/")
                op, _, dispatch_key = rest.rpartition("/")
                if ns in ("aten", "prims") and f"{ns}::{op}" in existing and dispatch_key.startswith(_COMPUTE_KEYS):
                    out[f"torch.library kernel {key}"] = "registered"
        # the ATen entry points themselves (torch.ops.aten.x.default is a cached OpOverload)
        return out

    @staticmethod
    def dispatch_tables() -> dict[str, str]:
        """Every ATen operator's dispatch table (where each kernel was registered): a kernel
        registered over an ATen operator from C++ (``TORCH_LIBRARY_IMPL(aten, ...)``) shows as a
        new registration site.  About 0.3 s, so it is taken at the import and the last check only."""
        torch = sys.modules.get("torch")
        if torch is None:
            return {}
        c = torch._C
        names = getattr(c, "_dispatch_get_all_op_names", None)
        dump = getattr(c, "_dispatch_dump_table", None)
        if names is None or dump is None:
            return {}
        out = {}
        for op in names():
            if op.startswith(("aten::", "prims::")):
                try:
                    out[op] = dump(op)
                except Exception as exc:  # noqa: BLE001 - a table that cannot be read is a change too
                    out[op] = f"<raises {type(exc).__name__}>"
        return out

    def has_dispatch(self) -> bool:
        return self._dispatch is not None

    def take_dispatch(self) -> None:
        self._dispatch = self.dispatch_tables()

    def _compare(self, prefix: str, then: dict[str, Any], now: Any, add: Any, cls: type | None) -> None:
        for k, old in then.items():
            v = now.get(k, _MISSING)
            # _ident unwraps staticmethod / classmethod: the same function put back bare is no change
            if v is old or (v is not _MISSING and (_ident(v) == _ident(old) or _is_own_wrapper(v, old))):
                continue
            add(prefix + k, _ident(old), "removed" if v is _MISSING else _ident(v))
        if cls is None:
            return
        # a new entry in a class's own dict that shadows what it inherited (Tensor.sum = ...)
        for k, v in list(now.items()):
            if k in then or not _watched(v) or (k.startswith("__") and k not in _DUNDERS):
                continue
            for base in cls.__mro__[1:]:
                inherited = self._vars(base).get(k, _MISSING)
                if inherited is not _MISSING:
                    if not _is_own_wrapper(v, inherited):
                        add(prefix + k, f"inherited from {base.__name__}", _ident(v))
                    break

    # ----------------------------------------------------------------------------- comparing
    def changes(self, dispatch: bool = False) -> list[dict[str, str]]:
        """What differs from the snapshot: replaced or removed functions and classes of modules that
        were loaded before (new names and new modules are not changes), new modes, hooks, kernels
        and process settings.  ``dispatch``: compare the ATen dispatch tables too."""
        import builtins

        out: list[dict[str, str]] = []

        def add(name: str, before: str, after: str) -> None:
            if name not in self._skip:
                out.append({"name": name, "kind": "world", "before": before, "after": after})

        for mod_name, attrs in self._modules.items():
            mod = sys.modules.get(mod_name)
            if mod is None:
                add(f"sys.modules[{mod_name!r}]", "loaded", "removed")
                continue
            self._compare(f"{mod_name}.", attrs, self._vars(mod), add, None)
        for cls_name, attrs in self._classes.items():
            mod_name, _, qual = cls_name.rpartition(".")
            mod = sys.modules.get(mod_name)
            cls = self._vars(mod).get(qual.split(".")[0]) if mod is not None else None
            if isinstance(cls, type):
                self._compare(f"{cls_name}.", attrs, self._vars(cls), add, cls)
        for k, v in self._vars(builtins).items():
            if self._builtins.get(k, _MISSING) is not v and k in self._builtins:
                add(f"builtins.{k}", _ident(self._builtins[k]), _ident(v))
        for group_now, group_then in ((self._process_state(), self._process),
                                      (self._torch_runtime(self._ops), self._runtime)):
            for k in set(group_now) | set(group_then):
                if group_now.get(k) != group_then.get(k):
                    add(k, group_then.get(k, "absent"), group_now.get(k, "absent"))
        if dispatch and self._dispatch is not None:
            now_tables = self.dispatch_tables()
            for op, table in self._dispatch.items():
                if now_tables.get(op, table) != table:
                    before = set(table.splitlines())
                    new = [line for line in now_tables[op].splitlines() if line not in before]
                    add(f"dispatch table of {op}", "as built", "; ".join(new)[:300] or "changed")
        return out


# dispatch keys whose kernel computes a result (Meta, Functionalize, BackendSelect... do not)
_COMPUTE_KEYS = ("CPU", "CUDA", "Composite", "Autograd", "Sparse", "Quantized", "XPU", "MPS", "PrivateUse")


class _Missing:
    pass


_MISSING = _Missing()

# special methods whose replacement on a torch class changes what every later expression computes
_DUNDERS = frozenset({"__add__", "__sub__", "__mul__", "__matmul__", "__truediv__", "__neg__", "__eq__",
                      "__lt__", "__gt__", "__le__", "__ge__", "__call__", "__getitem__", "__setitem__",
                      "__radd__", "__rmul__", "__rsub__", "__iadd__", "__imul__", "__torch_function__",
                      "__torch_dispatch__", "__init__", "__new__", "__pow__", "__abs__"})
