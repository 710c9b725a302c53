"""The module index of the value flow: the tables the analyser looks names up in (nested defs by
position, module classes, kernel classes, module bindings), the model class and its methods along
local bases, and the reference-module uses of the model's class and ``__init__``."""

from __future__ import annotations

import ast

from ..util.lazy import cached_property
from .facts import (
    ReferenceUse,
)
from .flowtables import (
    REFERENCE_MODULES,
    _mentions,
)
from .indirection import lookup
from .program import host_model


class ModuleIndex:
    """Lookups on the module's definitions, mixed into ``valueflow._Analyser``."""

    # the tables below are read by few files (a callable naming a nested def, a container holding
    # unknown members); each depends on the module alone, so it is built on first use

    @cached_property
    def defs_by_pos(self) -> dict[str, ast.AST]:
        """Nested functions and lambdas by position, for callables that name them (``def:12:8``)."""
        out: dict[str, ast.AST] = {}
        for n in self.host.of_type(ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            out[f"{n.lineno}:{n.col_offset}"] = n
        return out

    @cached_property
    def module_classes(self) -> list[str]:
        """Classes defined here that are nn.Modules with a forward (possible members of containers)."""
        return [
            c.name for c in self.classes.values()
            if c.name not in self.autograd and c.name != "Model"
            and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in c.body)
            and any(self._canon(b).startswith("torch.nn.") or (isinstance(b, ast.Name) and b.id in self.classes)
                    for b in c.bases)]

    @cached_property
    def kernel_classes(self) -> list[str]:
        """Module classes whose source mentions a kernel: the only hidden members worth analysing."""
        host = self.host
        kernel_words = {b.split(".")[0] for e in host.extensions for b in e.bound_to} | \
            set(host.triton_kernels) | set(self.ext_functions) | {"load_inline", "get_function"}
        lines = host.source.lines
        spans: dict[tuple[int, int | None], str] = {}
        # module functions that mention a kernel count as kernel words too (``residual_relu(out, x)``)
        for _ in range(2):
            for name, defs in self.function_alts.items():
                if name not in kernel_words and any(
                        _mentions(lines, f.lineno - 1, f.end_lineno, kernel_words, spans) for f in defs):
                    kernel_words.add(name)
        return [c for c in self.module_classes
                if _mentions(lines, self.classes[c].lineno - 1, self.classes[c].end_lineno, kernel_words, spans)]

    # ================================================================== module-level knowledge
    def _module_bindings(self, out: dict[str, str]) -> dict[str, str]:
        """What each module-level name is: const, extension, function, class, triton, other.

        ``out`` holds the module-level defs and classes already (found by ``__init__``'s pass over the
        module's statements); the names extensions are bound to are added here."""
        for ext in self.host.extensions:
            for b in ext.bound_to:
                if "." not in b and not b.endswith("()"):
                    out[b] = "extension"
        return out

    def _find_model(self, class_name: str | None) -> ast.ClassDef | None:
        if class_name is not None:
            return self.classes.get(class_name)
        return host_model(self.host)  # the one rule (``program.model_class``)

    def _methods(self, cls_name: str) -> dict[str, tuple[ast.FunctionDef, str]]:
        """Methods of a class defined here, its local bases' included (read-only: shared by every caller)."""
        cached = self.methods_cache.get(cls_name)
        if cached is None:
            cached = self.methods_cache[cls_name] = self._collect_methods(cls_name)
        return cached

    def _collect_methods(self, cls_name: str) -> dict[str, tuple[ast.FunctionDef, str]]:
        out: dict[str, tuple[ast.FunctionDef, str]] = {}
        for name in reversed([cls_name, *self._all_bases(cls_name)]):
            cls = self.classes.get(name)
            if cls is None:
                continue
            for f in cls.body:
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f.name] = (f, name)
                elif type(f) is ast.Assign and len(f.targets) == 1 and type(f.targets[0]) is ast.Name:
                    # ``forward = Other.forward`` / ``forward = getattr(Other, "forward")`` in the class
                    # body: the method is Other's function, run with this class's ``self``
                    alias = self._method_alias(f.value, name)
                    if alias is not None:
                        out[f.targets[0].id] = alias
        return out

    def _method_alias(self, value: ast.AST, cls_name: str) -> tuple[ast.FunctionDef, str] | None:
        direct = lookup(value, self._canon) if type(value) in (ast.Call, ast.Subscript) else None
        value = direct if direct is not None else value
        if type(value) is not ast.Attribute or type(value.value) is not ast.Name:
            return None
        other = value.value.id
        if other == cls_name or other not in self.classes:
            return None
        return self._methods(other).get(value.attr)

    def _all_bases(self, cls_name: str, seen: set[str] | None = None) -> list[str]:
        seen = seen or {cls_name}
        out: list[str] = []
        for b in self.local_bases.get(cls_name, []):
            if b not in seen:
                seen.add(b)
                out.append(b)
                out.extend(self._all_bases(b, seen))
        return out

    @staticmethod
    def _params(fn: ast.FunctionDef, skip_self: bool) -> list[ast.arg]:
        a = fn.args
        params = list(a.posonlyargs) + list(a.args)
        if skip_self and params:
            params = params[1:]
        params += list(a.kwonlyargs)
        if a.vararg is not None:
            params.append(a.vararg)
        return params

    # ================================================================== reference reuse (class 12)
    def _reference_imports(self) -> None:
        for node in self.host.of_type(ast.ImportFrom):
            mod = (node.module or "").split(".")[-1]
            names = {a.name for a in node.names}
            if mod in REFERENCE_MODULES or ("Model" in names and mod not in ("torch", "nn")):
                self.facts.reference_uses.append(ReferenceUse(node, "import", f"from {'.' * node.level}{node.module or ''} import {', '.join(sorted(names))}", False))
        for node in self.host.of_type(ast.Import):
            for a in node.names:
                if a.name.split(".")[-1] in REFERENCE_MODULES:
                    self.facts.reference_uses.append(ReferenceUse(node, "import", f"import {a.name}", False))

    def _reference_inheritance(self, model: ast.ClassDef) -> None:
        for b in model.bases:
            name = self._canon(b)
            if name == "Model" or name.endswith(".Model"):
                self.facts.reference_uses.append(ReferenceUse(b, "inherits", f"class {model.name}({name})", True))

    def _init_reference_uses(self, init: ast.FunctionDef) -> None:
        for node in self.index.calls(init):
            func = node.func
            t = type(func)
            # an attribute chain's canonical name ends in its own last name: only ``x.Model`` can be one
            if t is ast.Name or t is ast.Attribute and func.attr == "Model":  # type: ignore[attr-defined]
                name = self._canon(func)
                if name == "Model" or name.endswith(".Model") and name.split(".")[0] in REFERENCE_MODULES:
                    self.facts.reference_uses.append(ReferenceUse(node, "instantiate", f"{name}(...)", False))
