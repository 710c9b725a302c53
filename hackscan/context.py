"""What a check function sees: one submission, its units, and facts computed on first use.

A check is ``def check(ctx: ScanContext) -> Iterable[Hit]``.  Facts (the model's value flow, CUDA
launches, the reference's shapes, the program model and its call graph) are ``cached_property``s,
so a fact is built once per submission and only if some selected rule asks for it; a context is
never shared between submissions or threads.
"""

from __future__ import annotations

import ast
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .dynamic.shared.profiles import DEFAULT_HARNESS, HarnessProfile, get_profile
from .model import Confidence, Location, Severity
from .units import Pos, Unit
from .util.lazy import cached_property
from .util.quick_init import quick_init

if TYPE_CHECKING:  # imported lazily at run time: listing rules must not pay for analysis imports
    import networkx as nx

    from .cuda.facts import CudaFacts
    from .cuda.flow import CudaFlow
    from .inputs import Submission
    from .python.facts import Holder, ModelFlow
    from .python.module import HostModule
    from .python.patterns import MiscFacts
    from .python.program import Program
    from .python.reference import ReferenceFacts
    from .triton.facts import TritonFacts


@quick_init
@dataclass(frozen=True)
class Hit:
    """What a check reports; the engine turns it into a ``Finding`` with the rule's metadata.

    ``line`` / ``column`` are host positions (1-based): ``ScanContext.at`` gives them for an ``ast``
    node, ``cuda.records.pos_of`` for a node of a CUDA unit.  ``message`` replaces the rule's message; ``args``
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


_UNSET: Any = object()


class ReferenceEntry:
    """One reference parsed once, with its facts filled in by the first scan that asks for them.

    Shared by every scan of the same reference text, from any thread: the fields only ever go
    from unset to a value that any scan would compute the same way (two threads racing on one
    field both compute it, and either result is the same).
    """

    __slots__ = ("module", "facts", "flow", "holders")

    def __init__(self, module: HostModule | None):
        self.module = module
        self.facts: Any = _UNSET
        self.flow: Any = _UNSET
        self.holders: Any = _UNSET


class ReferenceCache:
    """Parsed references and their facts, most recently used kept (bounded, thread-safe).

    In a training loop many candidates are scanned against one reference: each of them would
    parse and analyse the same text again.  The cache is keyed by the reference text (and the path
    it came from, which decides where ``load(sources=...)`` files are read).  A small bound keeps
    memory, and the work of the garbage collector over the retained trees, negligible when every
    reference is different.
    """

    def __init__(self, size: int = 8):
        self.size = size
        self._entries: OrderedDict[tuple[str, str], ReferenceEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, code: str, path: str) -> ReferenceEntry:
        key = (code, path)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
        from .python.module import HostModule

        try:
            module: HostModule | None = HostModule.parse(code, path)
        except (SyntaxError, ValueError):
            module = None
        entry = ReferenceEntry(module)
        if self.size > 0:
            evicted: list[ReferenceEntry] = []
            with self._lock:
                entry = self._entries.setdefault(key, entry)  # a racing thread's entry wins
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    evicted.append(self._entries.popitem(last=False)[1])
            # freeing an evicted entry (its whole tree, cold in the memory caches by now) is
            # most of this method's time: done here, after the lock, other threads need not wait
            del evicted
        return entry

    def __len__(self) -> int:
        return len(self._entries)


class ScanContext:
    def __init__(self, submission: Submission, host: HostModule | None, units: list[Unit],
                 options: Mapping[str, Mapping[str, Any]] | None = None, mode: str = "gate",
                 references: ReferenceCache | None = None, harness: str = DEFAULT_HARNESS):
        self.submission = submission
        # the scoring harness the candidate was written for (``--harness``): rules whose premise is
        # what the harness does (training mode, ``.eval()``) read it through ``profile``
        self.harness = harness
        self.host = host
        self.units = units
        self.mode = mode
        self._options = options or {}
        self._references = references
        # the rule being run; set by the engine so ``options`` needs no argument
        self.rule_id: str = ""
        self.rule_defaults: Mapping[str, Any] = {}

    @property
    def profile(self) -> HarnessProfile:
        """The harness profile (``dynamic/shared/profiles.py``) the static premises come from."""
        return get_profile(self.harness)

    # ------------------------------------------------------------------ options
    @property
    def options(self) -> dict[str, Any]:
        merged = dict(self.rule_defaults)
        merged.update(self._options.get(self.rule_id, {}))
        return merged

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

    def hit(self, pos: Pos, message: str | None = None, **kw: Any) -> Hit:
        return Hit(line=pos.line, column=pos.column, message=message, unit=pos.unit, path=pos.path, **kw)

    # ------------------------------------------------------------------ facts (lazy)
    @cached_property
    def model_flow(self) -> ModelFlow | None:
        if self.host is None:
            return None
        from .python.valueflow import build_model_flow

        return build_model_flow(self.host)

    @cached_property
    def patterns(self) -> MiscFacts:
        """The host's def-use facts (``python/patterns.py``): the functions forward reaches, the names
        that carry forward's input values (taint) or alias its input tensors, the state that
        outlives a call.  Only for a submission with a Python host."""
        if self.host is None:
            raise ValueError("no Python host: the pattern facts need one")
        from .python.patterns import MiscFacts

        return MiscFacts(self.host)

    @cached_property
    def cuda(self) -> CudaFacts:
        from .cuda.builder import build_cuda_facts

        return build_cuda_facts([u for u in self.units if u.language in ("cuda", "cpp")])

    @cached_property
    def cuda_flow(self) -> CudaFlow:
        """The data flow over ``cuda`` (``cuda/flow.py``): what a kernel stores to, where a launch
        argument or a returned tensor comes from."""
        from .cuda.flow import CudaFlow

        return CudaFlow(self.cuda)

    @cached_property
    def cuda_graph(self) -> nx.DiGraph:
        """The C++ half of the program graph (``cuda/graph.py``), built from ``cuda``."""
        from .cuda.graph import cuda_graph  # here, so that a scan no rule asks for the graph of never loads networkx

        return cuda_graph(self.cuda)

    @cached_property
    def triton(self) -> TritonFacts | None:
        if self.host is None or not self.host.triton_kernels:
            return None
        from .triton.facts import build_triton_facts

        return build_triton_facts(self.host, self.patterns)

    @cached_property
    def _reference_entry(self) -> ReferenceEntry | None:
        """The shared entry of this submission's reference, when the scanner keeps a cache."""
        code = self.submission.reference
        if not code or self._references is None or (self.submission.self_reference and self.host is not None):
            return None
        return self._references.get(code, self.submission.reference_path or "<reference>")

    @cached_property
    def reference_module(self) -> HostModule | None:
        """The reference parsed like a host file; None when absent or unparsable."""
        code = self.submission.reference
        if not code:
            return None
        if self.submission.self_reference and self.host is not None:
            return self.host
        entry = self._reference_entry
        if entry is not None:
            return entry.module
        from .python.module import HostModule

        try:
            return HostModule.parse(code, self.submission.reference_path or "<reference>")
        except (SyntaxError, ValueError):
            return None

    def _reference_derived(self, slot: str, build: Any) -> Any:
        """``build(reference_module)``, taken from or stored in the shared cache entry's ``slot``."""
        entry = self._reference_entry
        if entry is not None:
            value = getattr(entry, slot)
            if value is not _UNSET:
                return value
        module = self.reference_module
        value = build(module) if module is not None else None
        if entry is not None:
            setattr(entry, slot, value)
        return value

    @cached_property
    def reference(self) -> ReferenceFacts | None:
        from .python.reference import build_reference_facts

        return self._reference_derived("facts", build_reference_facts)  # type: ignore[no-any-return]

    @cached_property
    def reference_flow(self) -> ModelFlow | None:
        """The reference's ``Model`` analysed like a candidate: its ops, holders and in-place writes."""
        from .python.valueflow import build_model_flow

        return self._reference_derived("flow", lambda m: build_model_flow(m, "Model"))  # type: ignore[no-any-return]

    @cached_property
    def reference_holders(self) -> dict[str, Holder] | None:
        """``reference_flow.holders`` (the reference ``Model``'s members), without the walk of its
        forward when no rule has asked for the whole flow yet: most files need the members alone."""
        flow = self.__dict__.get("reference_flow")
        if flow is not None:
            return flow.holders
        from .python.valueflow import build_model_holders

        return self._reference_derived("holders", lambda m: build_model_holders(m, "Model"))  # type: ignore[no-any-return]

    @cached_property
    def program(self) -> Program:
        """The program model: which class is the model, its forward, the call / launch graph."""
        from .python.program import Program

        return Program(self.host, lambda: self.model_flow, self._cuda_graph_if_any)

    def _cuda_graph_if_any(self) -> nx.DiGraph | None:
        """``cuda_graph`` when the submission has C++ units, for the program graph to join."""
        if not any(u.language in ("cuda", "cpp") for u in self.units):
            return None
        return self.cuda_graph

    @property
    def graph(self) -> nx.DiGraph:
        """The call / launch graph of ``program`` (forward down to the kernels)."""
        return self.program.graph

    # ------------------------------------------------------------------ end of scan
    def release(self) -> None:
        """Drop the facts built for this scan.

        Some facts point back at the host that caches them (``patterns.object_names``): left alone,
        the whole tree of every scanned file would wait for a full garbage collection, and each
        younger collection would walk it again.  Breaking the links lets reference counting free
        a scan's objects as soon as it ends.
        """
        d = self.__dict__
        shared = d.get("_reference_entry") is not None  # a cached reference outlives the scan
        for module in (self.host, None if shared else d.get("reference_module")):
            if module is not None:
                module.__dict__.pop("_object_names", None)
                module.__dict__.pop("_model_class", None)
        cuda = d.get("cuda")
        if cuda is not None:
            cuda.release()  # its own cycles (see ``CudaFacts.release``)
        references = self._references
        d.clear()
        self._references = references


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
