"""Import aliases: turn ``F.relu``, ``li(...)``, ``tl.load`` into canonical dotted names.

Every Python rule asks "is this call torch.matmul?" through ``ImportMap.canonical``, so aliases
(``import torch as T``, ``from torch.nn import functional as F``, ``from time import perf_counter
as pc``) never hide a call.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from operator import attrgetter

_LINENO = attrgetter("lineno")

# Names that are conventionally imported; used only when a file uses them without importing
# (snippets in datasets often omit imports).
CONVENTIONAL = {
    "torch": "torch",
    "nn": "torch.nn",
    "F": "torch.nn.functional",
    "triton": "triton",
    "tl": "triton.language",
    "np": "numpy",
    "load_inline": "torch.utils.cpp_extension.load_inline",
}


@dataclass
class ImportMap:
    aliases: dict[str, str] = field(default_factory=dict)
    # line of each import, for findings about imports themselves
    lines: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def of(tree: ast.AST) -> ImportMap:
        return ImportMap.of_nodes([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))])

    @staticmethod
    def of_nodes(nodes: list[ast.AST]) -> ImportMap:
        im = ImportMap()
        for node in sorted(nodes, key=_LINENO):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        im.aliases[a.asname] = a.name
                        im.lines[a.asname] = node.lineno
                    else:
                        top = a.name.split(".")[0]
                        im.aliases.setdefault(top, top)
                        im.lines.setdefault(top, node.lineno)
                        im.lines.setdefault(a.name, node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name == "*":
                        continue
                    local = a.asname or a.name
                    im.aliases[local] = f"{node.module}.{a.name}"
                    im.lines[local] = node.lineno
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                for a in node.names:
                    local = a.asname or a.name
                    mod = ("." * node.level) + (node.module or "")
                    im.aliases[local] = f"{mod}.{a.name}" if node.module else f"{mod}{a.name}"
                    im.lines[local] = node.lineno
        return im

    def resolve_name(self, name: str) -> str:
        if name in self.aliases:
            return self.aliases[name]
        return CONVENTIONAL.get(name, name)

    def canonical(self, expr: ast.AST) -> str:
        """Dotted canonical name of a Name/Attribute chain, '' for anything else.

        ``F.relu`` -> ``torch.nn.functional.relu``; ``x.relu`` -> ``x.relu`` (a local).
        """
        t = type(expr)
        if t is ast.Name:  # the common case: a bare name
            name = expr.id  # type: ignore[attr-defined]
            got = self.aliases.get(name)
            return got if got is not None else CONVENTIONAL.get(name, name)
        if t is not ast.Attribute:
            return ""
        e = expr.value  # type: ignore[attr-defined]
        te = type(e)
        if te is ast.Name:  # one level (``F.relu``, ``x.view``), the commonest chain: no parts list
            name = e.id  # type: ignore[attr-defined]
            got = self.aliases.get(name)
            if got is None:
                got = CONVENTIONAL.get(name, name)
            return got + "." + expr.attr  # type: ignore[attr-defined]
        if te is not ast.Attribute:
            return ""
        parts = [expr.attr]  # type: ignore[attr-defined]
        while te is ast.Attribute:
            parts.append(e.attr)  # type: ignore[attr-defined]
            e = e.value  # type: ignore[attr-defined]
            te = type(e)
        if te is not ast.Name:
            return ""
        parts.append(self.resolve_name(e.id))  # type: ignore[attr-defined]
        parts.reverse()
        return ".".join(parts)

    def imported(self, prefix: str) -> bool:
        """Whether any import brings in ``prefix`` or something under it."""
        return any(v == prefix or v.startswith(prefix + ".") for v in self.aliases.values())
