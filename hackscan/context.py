"""What a check function sees: one submission, its units, and facts computed on first use.

A check is ``def check(ctx: ScanContext) -> Iterable[Hit]``.  Facts (Python data flow, CUDA
launches, the reference's shapes, the call graph) are ``cached_property``s, so a fact is built once
per submission and only if some selected rule asks for it; a context is never shared between
submissions or threads.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Mapping

from .model import Confidence, Location, Severity
from .units import Unit

if TYPE_CHECKING:  # imported lazily at run time: listing rules must not pay for analysis imports
    import networkx as nx

    from .cuda.facts import CudaFacts
    from .inputs import Submission
    from .python.facts import PythonFacts
    from .python.module import HostModule
    from .python.reference import ReferenceFacts
    from .triton.facts import TritonFacts


@dataclass(frozen=True)
class Hit:
    """What a check reports; the engine turns it into a ``Finding`` with the rule's metadata.

    ``line`` / ``column`` are host positions (1-based); use ``ScanContext.at`` / ``at_unit`` to get
    them from an ``ast`` node or a unit offset.  ``message`` replaces the rule's message; ``args``
    fill the rule's message template instead.  ``severity`` / ``confidence`` override the rule's
    defaults when the evidence is weaker (or stronger) than usual for this rule.
    """

    line: int
    column: int = 1
    message: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    evidence: Mapping[str, Any] = field(default_factory=dict)
    severity: Severity | None = None
    confidence: Confidence | None = None
    end_line: int | None = None
    end_column: int | None = None
    unit: str | None = None
    path: str | None = None  # for units read from another file (``load(sources=[...])``)


@dataclass(frozen=True)
class Pos:
    line: int
    column: int
    unit: str | None = None
    path: str | None = None


class ScanContext:
    def __init__(self, submission: "Submission", host: "HostModule | None", units: list[Unit],
                 options: Mapping[str, Mapping[str, Any]] | None = None, mode: str = "gate"):
        self.submission = submission
        self.host = host
        self.units = units
        self.mode = mode
        self._options = options or {}
        # the rule being run; set by the engine so ``options`` needs no argument
        self.rule_id: str = ""
        self.rule_defaults: Mapping[str, Any] = {}

    # ------------------------------------------------------------------ options
    @property
    def options(self) -> dict[str, Any]:
        merged = dict(self.rule_defaults)
        merged.update(self._options.get(self.rule_id, {}))
        return merged

    # ------------------------------------------------------------------ units
    def units_of(self, *languages: str) -> list[Unit]:
        return [u for u in self.units if u.language in languages]

    @cached_property
    def languages(self) -> frozenset[str]:
        langs = {u.language for u in self.units}
        if self.host is not None:
            langs.add("python")
        return frozenset(langs)

    # ------------------------------------------------------------------ positions
    def at(self, node: ast.AST) -> Pos:
        """Host position of an ``ast`` node of the candidate."""
        assert self.host is not None
        line, col = self.host.position(node)
        return Pos(line, col)

    def at_unit(self, unit: Unit, byte_offset: int) -> Pos:
        """Host position of a byte offset in a unit (tree-sitter offsets are bytes)."""
        line, col = unit.byte_position(byte_offset)
        return Pos(line, col + 1, unit.id, unit.attrs.get("file"))  # type: ignore[arg-type]

    def hit(self, pos: Pos, message: str | None = None, **kw: Any) -> Hit:
        return Hit(line=pos.line, column=pos.column, message=message, unit=pos.unit, path=pos.path, **kw)

    # ------------------------------------------------------------------ facts (lazy)
    @cached_property
    def python(self) -> "PythonFacts | None":
        if self.host is None:
            return None
        from .python.facts import build_python_facts

        return build_python_facts(self.host)

    @cached_property
    def cuda(self) -> "CudaFacts":
        from .cuda.facts import build_cuda_facts

        return build_cuda_facts([u for u in self.units if u.language in ("cuda", "cpp")])

    @cached_property
    def triton(self) -> "TritonFacts | None":
        if self.host is None or not self.host.triton_kernels:
            return None
        from .triton.facts import build_triton_facts

        return build_triton_facts(self.host)

    @cached_property
    def reference_module(self) -> "HostModule | None":
        """The reference parsed like a host file; None when absent or unparsable."""
        code = self.submission.reference
        if not code:
            return None
        if self.submission.self_reference and self.host is not None:
            return self.host
        from .python.module import HostModule

        try:
            return HostModule.parse(code, self.submission.reference_path or "<reference>")
        except (SyntaxError, ValueError):
            return None

    @cached_property
    def reference(self) -> "ReferenceFacts | None":
        module = self.reference_module
        if module is None:
            return None
        from .python.reference import build_reference_facts

        return build_reference_facts(module)

    @cached_property
    def reference_python(self) -> "PythonFacts | None":
        """The reference's ``Model`` analysed like a candidate: its ops, holders and in-place writes."""
        module = self.reference_module
        if module is None:
            return None
        from .python.facts import build_python_facts

        return build_python_facts(module, "Model")

    @cached_property
    def graph(self) -> "nx.DiGraph":
        from .graph import build_graph

        return build_graph(self)

    # ------------------------------------------------------------------ end of scan
    def release(self) -> None:
        """Drop the facts built for this scan.

        Some facts point back at the host that caches them (``patterns.misc_facts``): left alone,
        the whole tree of every scanned file would wait for a full garbage collection, and each
        younger collection would walk it again.  Breaking the links lets reference counting free
        a scan's objects as soon as it ends.
        """
        for module in (self.host, self.__dict__.get("reference_module")):
            if module is not None:
                module.__dict__.pop("_misc_facts", None)
                module.__dict__.pop("_object_names", None)
        self.__dict__.clear()


def location_for(ctx: ScanContext, hit: Hit) -> Location:
    sub = ctx.submission
    return Location(
        path=hit.path or sub.file or sub.path,
        line=hit.line,
        column=hit.column,
        end_line=hit.end_line,
        end_column=hit.end_column,
        record=sub.record if hit.path is None else None,
        unit=hit.unit,
    )
