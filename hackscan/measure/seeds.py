"""Clean kernels to inject hacks into, and what a mutator needs to know about each.

A seed is a candidate that does its job (the bundled ``seeds/*/candidate.py``, the ``ok_*.py``
fixtures, the demo ``kernels/**/clean_*.py``) with its reference problem.  ``SeedFacts`` reads
both once: ``ModelNew`` and its ``forward``, the extension calls there, the kernel source literals
(positions in the host text, so C++ edits keep the file's own formatting), the reference's forward
(to write a torch fallback the way a model would) and the task's input shapes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..inputs import REFERENCE_NAMES, Submission, discover
from ..python.program import forward_of, model_class

SEEDS_DIR = Path(__file__).resolve().parent / "seeds"
_REPO = Path(__file__).resolve().parents[2]


def default_seed_paths() -> list[str]:
    """The bundled seeds plus, in a source checkout, the clean fixtures and demo kernels."""
    out = [str(p) for p in sorted(SEEDS_DIR.glob("*/candidate.py"))]
    for pattern in ("fixtures/**/ok_*.py", "kernels/**/clean_*.py"):
        out += [str(p) for p in sorted(_REPO.glob(pattern))]
    return out


@dataclass(frozen=True)
class Seed:
    name: str
    path: str
    code: str
    reference: str
    reference_path: str

    @cached_property
    def facts(self) -> SeedFacts:
        return SeedFacts(self)


def load_seeds(paths: list[str]) -> list[Seed]:
    """Seeds from files or folders; a candidate without a reference (folder or own ``Model``) is skipped."""
    seeds = []
    seen: set[str] = set()
    for raw in paths:
        p = Path(raw)
        subs = list(discover([raw]))
        for sub in subs:
            if not isinstance(sub, Submission) or sub.language != "python":
                continue
            if not sub.reference:
                # a file named on its own still pairs with its folder's reference, as in a folder scan
                sibling = next((Path(sub.path).parent / n for n in REFERENCE_NAMES
                                if (Path(sub.path).parent / n).is_file()), None)
                if sibling is None or sibling == Path(sub.path):
                    continue
                sub = Submission(sub.path, sub.code, file=sub.file, reference=sibling.read_text(encoding="utf-8"),
                                 reference_path=str(sibling))
            if p.is_dir() and "/seeds/" in sub.path and not sub.path.endswith("candidate.py"):
                continue
            if sub.path in seen:
                continue
            seen.add(sub.path)
            rel = Path(sub.path)
            name = f"{rel.parent.name}/{rel.stem}"
            seeds.append(Seed(name, sub.path, sub.code, sub.reference, sub.reference_path or ""))
    return seeds


@dataclass
class Literal:
    """A CUDA / C++ source string in the host file: host offsets of its body (quotes excluded)."""

    start: int
    end: int
    language: str  # cuda | cpp


@dataclass
class SeedFacts:
    seed: Seed
    tree: ast.Module = field(init=False)
    model: ast.ClassDef | None = field(init=False, default=None)
    init: ast.FunctionDef | None = field(init=False, default=None)
    forward: ast.FunctionDef | None = field(init=False, default=None)
    line_starts: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        code = self.seed.code
        self.tree = ast.parse(code)
        self.line_starts = [0]
        for m in re.finditer("\n", code):
            self.line_starts.append(m.end())
        self.model = model_class(self.tree)  # the one rule; seeds edit their own parse of the text
        forward = forward_of(self.model)
        self.forward = forward if isinstance(forward, ast.FunctionDef) else None
        if self.model is not None:
            for item in self.model.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    self.init = item

    # ---------------------------------------------------------------- positions
    def offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def text(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.seed.code[a:b]

    def line_indent(self, line: int) -> str:
        start = self.line_starts[line - 1]
        text = self.seed.code[start:]
        return text[: len(text) - len(text.lstrip(" \t"))]

    # ---------------------------------------------------------------- forward
    @property
    def args(self) -> list[str]:
        if self.forward is None:
            return []
        return [a.arg for a in self.forward.args.args[1:]]

    @property
    def x(self) -> str:
        return self.args[0] if self.args else "x"

    @property
    def body(self) -> list[ast.stmt]:
        """Forward's statements without its docstring."""
        if self.forward is None:
            return []
        body = list(self.forward.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        return body

    @property
    def body_indent(self) -> str:
        return self.line_indent(self.body[0].lineno) if self.body else "        "

    @property
    def returns(self) -> list[ast.Return]:
        if self.forward is None:
            return []
        return [n for n in ast.walk(self.forward) if isinstance(n, ast.Return) and n.value is not None]

    @cached_property
    def extension_names(self) -> set[str]:
        """Module names bound to a compiled extension (``ext = load_inline(...)``) or a Triton kernel."""
        names: set[str] = set()
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                fn = node.value.func
                fname = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
                if fname in ("load_inline", "load"):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    @cached_property
    def triton_kernels(self) -> set[str]:
        out = set()
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
                out.add(node.name)
        return out

    @cached_property
    def kernel_calls(self) -> list[ast.Call]:
        """Calls in forward (or methods it reaches through ``self.``) that run the custom kernel."""
        out = []
        if self.model is None:
            return out
        for node in ast.walk(self.model):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in self.extension_names:
                out.append(node)
            elif isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id in self.triton_kernels:
                out.append(node)
        return out

    @cached_property
    def direct_kernel_call(self) -> ast.Call | None:
        """An extension call in forward's own return statement (``return ext.fn(x, ...)``)."""
        for ret in self.returns:
            if isinstance(ret.value, ast.Call) and ret.value in self.kernel_calls:
                return ret.value
        return None

    @cached_property
    def literals(self) -> list[Literal]:
        out = []
        code = self.seed.code
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    "torch::Tensor" in node.value or "__global__" in node.value):
                a, b = self.span(node)
                raw = code[a:b]
                m = re.match(r"[rRbBuUfF]*('''|\"\"\"|'|\")", raw)
                if not m:
                    continue
                q = m.group(1)
                lang = "cuda" if "__global__" in node.value else "cpp"
                out.append(Literal(a + m.end(), b - len(q), lang))
        return out

    @property
    def uses_cuda(self) -> bool:
        code = self.seed.code
        return bool(self.triton_kernels) or "cuda_sources" in code or ".cuda()" in code or "__global__" in code

    @property
    def import_end(self) -> int:
        """Host offset just after the last top-level import (where module-level code goes)."""
        last = None
        for node in self.tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                last = node
            elif last is not None:
                break
        if last is None:
            return 0
        return self.line_starts[last.end_lineno] if last.end_lineno < len(self.line_starts) else len(self.seed.code)  # type: ignore[operator]

    # ---------------------------------------------------------------- reference
    @cached_property
    def ref_tree(self) -> ast.Module | None:
        try:
            return ast.parse(self.seed.reference)
        except SyntaxError:
            return None

    @cached_property
    def ref_model(self) -> ast.ClassDef | None:
        if self.ref_tree is None:
            return None
        return next((n for n in self.ref_tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)

    @cached_property
    def ref_forward(self) -> ast.FunctionDef | None:
        if self.ref_model is None:
            return None
        return next((n for n in self.ref_model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)

    @cached_property
    def self_attrs(self) -> set[str]:
        """Attributes ModelNew assigns in ``__init__`` (``self.scale = ...``)."""
        out: set[str] = set()
        if self.init is None:
            return out
        for node in ast.walk(self.init):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                    and isinstance(node.ctx, ast.Store):
                out.add(node.attr)
        return out

    @cached_property
    def reference_expr(self) -> str | None:
        """The reference's forward as one expression over the candidate's argument names, when it is one.

        ``return torch.softmax(x, dim=1)`` -> ``torch.softmax(x, dim=1)``; ``self.attr`` reads are kept
        when ModelNew holds the same attribute.  None when forward is more than a return, or
        reads attributes the candidate does not have.
        """
        fwd = self.ref_forward
        if fwd is None:
            return None
        body = [s for s in fwd.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return None
        ref_args = [a.arg for a in fwd.args.args[1:]]
        if len(ref_args) != len(self.args):
            return None
        rename = dict(zip(ref_args, self.args, strict=True))
        expr = body[0].value
        for node in ast.walk(expr):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                if node.attr not in self.self_attrs:
                    return None

        class Rename(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                if node.id in rename:
                    return ast.copy_location(ast.Name(rename[node.id], node.ctx), node)
                return node

        return ast.unparse(Rename().visit(ast.parse(ast.unparse(expr), mode="eval")).body)

    @cached_property
    def reference_ops(self) -> set[str]:
        """Dotted names called in the reference forward (``torch.softmax``, ``torch.sum``)."""
        out = set()
        if self.ref_forward is None:
            return out
        for node in ast.walk(self.ref_forward):
            if isinstance(node, ast.Call):
                try:
                    out.add(ast.unparse(node.func))
                except Exception:  # pragma: no cover - unparse of odd nodes
                    continue
        return out

    @cached_property
    def reference_source(self) -> str:
        """The reference's ``Model`` class as written, to paste into a candidate."""
        if self.ref_model is None or self.ref_tree is None:
            return ""
        lines = self.seed.reference.splitlines()
        start = min([self.ref_model.lineno] + [d.lineno for d in self.ref_model.decorator_list])
        return "\n".join(lines[start - 1: self.ref_model.end_lineno]) + "\n"  # type: ignore[operator]

    @cached_property
    def reference_module_tail(self) -> str:
        """The reference's module-level code after ``Model``: dims, ``get_inputs``, ``get_init_inputs``."""
        if self.ref_tree is None:
            return ""
        lines = self.seed.reference.splitlines()
        keep = []
        for node in self.ref_tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)) or node is self.ref_model:
                continue
            keep.append("\n".join(lines[node.lineno - 1: node.end_lineno]))  # type: ignore[operator]
        return "\n\n".join(keep) + "\n" if keep else ""

    @cached_property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the reference's tensor inputs, from ReferenceFacts (constant folding of dims)."""
        from ..python.module import HostModule
        from ..python.reference import build_reference_facts

        try:
            facts = build_reference_facts(HostModule.parse(self.seed.reference, self.seed.reference_path or "<ref>"))
        except (SyntaxError, ValueError):
            return []
        out = []
        for spec in facts.inputs:
            if spec.shape and all(isinstance(d, int) for d in spec.shape):
                out.append(tuple(int(d) for d in spec.shape))  # type: ignore[arg-type]
        return out

    @cached_property
    def reference_dtype(self) -> str:
        from ..python.module import HostModule
        from ..python.reference import build_reference_facts

        try:
            return build_reference_facts(HostModule.parse(self.seed.reference, "<ref>")).dtype
        except (SyntaxError, ValueError):
            return "float32"

    @property
    def reference_mutates_input(self) -> bool:
        """The reference works in place (``inplace=True``, ``x.relu_()``): the same in a candidate is no hack."""
        if self.ref_model is None:
            return False
        text = ast.unparse(self.ref_model)
        return bool(re.search(r"inplace\s*=\s*True|\.[a-z][a-z0-9_]*[a-z0-9]_\(", text))

    @property
    def is_reduction(self) -> bool:
        ops = " ".join(self.reference_ops)
        return any(k in ops for k in ("sum", "mean", "norm", "amax", "max", "logsumexp"))
