"""Facts about the CUDA / C++ units of a submission, built once per submission (``ctx.cuda``).

``CudaFacts`` holds every record of ``records.py`` for one submission (``builder.build_cuda_facts``
fills it from one tree-sitter parse and one walk per unit) and answers the lookups rules share:
kernels, launches, exports, callees, what an entry point reaches.  The analyses over these facts
(what a kernel stores to, where a launch argument comes from: ``flow.py``; the call graph:
``graph.py``) are built beside them by the scan context, on first use (``ctx.cuda_flow``,
``ctx.cuda_graph``): they read the facts, the facts never reach them.

Units that share ``unit.extension`` belong to one extension: the exported declarations are
usually in the ``cpp_sources`` unit and the definitions in the ``cuda_sources`` unit, so functions
are looked up per extension, never per unit.
"""

from __future__ import annotations

import tree_sitter as ts

from ..units import Unit
from ..util.lazy import cached_property
from .records import Call, Constant, Export, ExtensionFacts, Function, Launch, Macro, ParseError, Variable


class CudaFacts:
    """Everything the C++ rules read about one submission's CUDA / C++ units."""

    def __init__(self, units: list[Unit]):
        self.units = units
        self.extensions: dict[str, ExtensionFacts] = {}
        self.functions: list[Function] = []
        self.parse_errors: list[ParseError] = []
        self.trees: dict[str, ts.Tree] = {}
        self._callees: dict[int, list[Function]] = {}
        # ``branches.value_reads`` per (function, depth): several rules ask it of the same functions
        self._value_reads: dict[tuple[int, int], list] = {}

    # --------------------------------------------------------------- lookups
    def ext(self, name: str) -> ExtensionFacts:
        return self.extensions[name]

    @property
    def kernels(self) -> list[Function]:
        return [f for f in self.functions if f.kind == "kernel"]

    @property
    def host_functions(self) -> list[Function]:
        return [f for f in self.functions if f.kind == "host"]

    @property
    def launches(self) -> list[Launch]:
        return [lc for f in self.functions for lc in f.launches]

    @property
    def calls(self) -> list[Call]:
        return [c for f in self.functions for c in f.calls]

    @property
    def exports(self) -> list[Export]:
        return [e for x in self.extensions.values() for e in x.exports]

    @property
    def globals(self) -> list[Variable]:
        return [g for x in self.extensions.values() for g in x.globals]

    @property
    def static_locals(self) -> list[Variable]:
        return [v for f in self.functions for v in f.static_locals]

    @property
    def constants(self) -> list[Constant]:
        """File-scope and function-local named constants of every extension."""
        out = [c for x in self.extensions.values() for c in x.constants.values()]
        out += [c for x in self.extensions.values() for t in x.local_constants.values() for c in t.values()]
        return out

    @property
    def macros(self) -> list[Macro]:
        return [m for x in self.extensions.values() for m in x.macros.values()]

    def unit(self, unit_id: str) -> Unit | None:
        for u in self.units:
            if u.id == unit_id:
                return u
        return None

    def kernel_for(self, launch: Launch) -> Function | None:
        return self.extensions[launch.ext].kernel(launch.kernel)

    def export_targets(self, ext: ExtensionFacts) -> list[Function]:
        out: list[Function] = []
        for e in ext.exports:
            out.extend(ext.lookup(e.target, "host", "kernel"))
        return out

    def exported_functions(self) -> list[tuple[Export, Function]]:
        """(export, function it binds) pairs.  Several rules ask; the list is worked out once the
        facts are built and shared by every caller: read it, do not change it."""
        got = self.__dict__.get("_exported")
        if got is None:
            got = self._exported = self._find_exported_functions()
        return got

    def exported_host_functions(self) -> list[tuple[Export, Function]]:
        """``exported_functions`` cut to host functions, each once (the first export that binds
        it): the rules that follow an export's body to its launches and returns."""
        got = self.__dict__.get("_exported_host")
        if got is None:
            seen: set[int] = set()
            got = []
            for export, fn in self.exported_functions():
                if fn.kind == "host" and id(fn) not in seen:
                    seen.add(id(fn))
                    got.append((export, fn))
            self._exported_host = got
        return got

    def _find_exported_functions(self) -> list[tuple[Export, Function]]:
        out = []
        for x in self.extensions.values():
            for e in x.exports:
                for fn in x.lookup(e.target, "host", "kernel"):
                    out.append((e, fn))
        return out

    def callees(self, fn: Function) -> list[Function]:
        """Functions of the same extension that ``fn`` calls or launches (by name); the list is
        shared by every caller (the call graph is fixed once the facts are built)."""
        got = self._callees.get(id(fn))
        if got is None:
            got = self._callees[id(fn)] = self._find_callees(fn)
        return got

    def _find_callees(self, fn: Function) -> list[Function]:
        x = self.extensions[fn.ext]
        out: list[Function] = []
        seen: set[int] = set()
        for c in fn.calls:
            if c.is_method:
                continue
            for g in x.lookup(c.name):
                if id(g) not in seen and g is not fn:
                    seen.add(id(g))
                    out.append(g)
        for lc in fn.launches:
            k = x.kernel(lc.kernel)
            if k is not None and id(k) not in seen:
                seen.add(id(k))
                out.append(k)
        return out

    @cached_property
    def reachable(self) -> set[Function]:
        """Functions reachable from an exported entry point.

        An extension whose entry points are unknown (a ``.cu`` file with neither ``functions=`` nor a
        PYBIND11 module) counts every host function as an entry point.
        """
        roots: list[Function] = []
        for x in self.extensions.values():
            targets = self.export_targets(x)
            if targets:
                roots.extend(targets)
            else:
                roots.extend(f for f in x.all_functions if f.kind in ("host", "kernel"))
        seen: set[Function] = set()
        stack = list(roots)
        while stack:
            f = stack.pop()
            if f in seen:
                continue
            seen.add(f)
            stack.extend(self.callees(f))
        return seen

    def callers(self, fn: Function) -> list[tuple[Function, Call]]:
        """Host call sites of ``fn`` within its extension."""
        out = []
        for g in self.extensions[fn.ext].all_functions:
            for c in g.calls:
                if not c.is_method and c.base == fn.name:
                    out.append((g, c))
        return out

    def is_exported(self, fn: Function) -> bool:
        # a list, not an early-exited any(generator): a suspended generator is closed by throwing
        # GeneratorExit into it, which costs more than testing the few exports left
        name = fn.name
        return bool([e for e in self.extensions[fn.ext].exports if e.target == name])

    # --------------------------------------------------------------- end of scan
    def release(self) -> None:
        """Break the cycles these facts hold, so that reference counting frees them when the scan
        ends: each function's calls, launches and static locals point back at it.  Left alone, every CUDA fact of the scan
        (functions, calls, parameters, units) waits for the collector, which walks them all before
        it frees them.  The lists are replaced, not emptied: whatever else still holds one keeps
        what it holds."""
        for fn in self.functions:
            fn.calls = []
            fn.launches = []
            fn.static_locals = []
