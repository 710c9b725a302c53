"""The abstract value of the host data-flow analysis: where a Python value comes from (its provenance).

A ``Provenance`` is a may-analysis summary of one value in ``forward`` (or a function reachable from it):
which forward arguments' *values* reach it, which only reach it through metadata (shape, dtype),
which it may alias (same storage), and which custom kernel launches, torch compute ops and
allocations lie on its path.  Joins are unions, so a value produced on two paths carries the
union of both: rules that care about one path (a fallback arm) look at the arm, not the join.
"""

from __future__ import annotations

from typing import NamedTuple

_E: frozenset = frozenset()


class Provenance(NamedTuple):
    """Immutable; a ``NamedTuple`` because the analysis builds tens of thousands of them per file and a
    tuple is the cheapest immutable record Python constructs."""

    # forward arguments whose values reach this value (``x``, ``x.sum()``, ``x.item()``)
    inputs: frozenset[str] = _E
    # forward arguments whose metadata only reaches it (``x.shape[0]``, ``torch.empty_like(x)``)
    meta: frozenset[str] = _E
    # forward arguments this value may share storage with (``x``, ``x.view(-1)``, ``x.contiguous()``)
    alias: frozenset[str] = _E
    # ids of ``KernelCall`` records on its path (custom CUDA / C++ / Triton / torch.ops launches)
    kernels: frozenset[int] = _E
    # ids of ``TorchOp`` records on its path (torch compute: matmul, relu, nn modules, operators)
    ops: frozenset[int] = _E
    # ids of ``Alloc`` records on its path (empty, zeros, full, rand ...)
    allocs: frozenset[int] = _E
    # state read into it: parameters (``param:fc.weight``, held by an nn module / Parameter / buffer),
    # other attributes (``self.cache``), module globals (``global:cache``)
    state: frozenset[str] = _E
    # lines of calls the analysis could not classify (a library call, an unknown object's method)
    opaque: frozenset[int] = _E
    # ids of ``Slice`` records (strided or first-row slices) not yet consumed
    slices: frozenset[int] = _E
    # ids of ``PartialUse`` records: a strided slice reduced, or a first row broadcast
    partial: frozenset[int] = _E
    # helper functions whose return value is part of this value (``ModelNew._impl``)
    via: frozenset[str] = _E

    # ------------------------------------------------------------------ combination
    def join(self, other: Provenance) -> Provenance:
        if other is self or other is EMPTY:
            return self
        if self is EMPTY:
            return other
        # most fields are empty: skip the unions that cannot change anything.  Unrolled over the
        # eleven fields: this is the analysis's innermost operation, and a loop costs twice as much
        a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10 = self
        b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10 = other
        return _new(Provenance, (
            (a0 | b0 if a0 else b0) if b0 and a0 is not b0 else a0,
            (a1 | b1 if a1 else b1) if b1 and a1 is not b1 else a1,
            (a2 | b2 if a2 else b2) if b2 and a2 is not b2 else a2,
            (a3 | b3 if a3 else b3) if b3 and a3 is not b3 else a3,
            (a4 | b4 if a4 else b4) if b4 and a4 is not b4 else a4,
            (a5 | b5 if a5 else b5) if b5 and a5 is not b5 else a5,
            (a6 | b6 if a6 else b6) if b6 and a6 is not b6 else a6,
            (a7 | b7 if a7 else b7) if b7 and a7 is not b7 else a7,
            (a8 | b8 if a8 else b8) if b8 and a8 is not b8 else a8,
            (a9 | b9 if a9 else b9) if b9 and a9 is not b9 else a9,
            (a10 | b10 if a10 else b10) if b10 and a10 is not b10 else a10,
        ))

    @staticmethod
    def join_all(flows: list[Provenance] | tuple[Provenance, ...]) -> Provenance:
        out = EMPTY
        for f in flows:
            out = out.join(f)
        return out

    def fresh(self) -> Provenance:
        """The same dependencies in new storage (the result of a computation)."""
        if not self[2]:
            return self
        # ``tuple.__new__`` on the fields: the generated keyword constructor costs several times more
        vals = list(self)
        vals[2] = _E
        return _new(Provenance, vals)

    def metadata(self) -> Provenance:
        """Only the shape/dtype of this value: its value dependencies become metadata dependencies."""
        inputs, meta, alias = self[0], self[1], self[2]
        if inputs:
            meta = meta | inputs if meta else inputs
        if alias:
            meta = meta | alias if meta else alias
        if not meta:
            return EMPTY
        return _new(Provenance, (_E, meta, _E, _E, _E, _E, _E, _E, _E, _E, _E))

    def with_(self, **kw: frozenset) -> Provenance:
        """The same flow with ``kw``'s sets added to the named fields."""
        vals = list(self)
        for k, v in kw.items():
            i = _INDEX[k]
            vals[i] = vals[i] | v
        return _new(Provenance, vals)

    def plus(self, index: int, values: frozenset) -> Provenance:
        """The same flow with ``values`` added to field number ``index`` (``OPS``, ``OPAQUE`` ...):
        ``with_`` for one field without the keyword dictionary, the analysis's common case."""
        vals = list(self)
        cur = vals[index]
        vals[index] = cur | values if cur else values
        return _new(Provenance, vals)

    # ------------------------------------------------------------------ predicates used by rules
    @property
    def tensorish(self) -> bool:
        """Holds (or may hold) a tensor rather than a shape, a flag or a constant."""
        return bool(self.inputs or self.alias or self.kernels or self.ops or self.allocs or self.state)

    @property
    def understood(self) -> bool:
        """No unknown call and no state but parameters on the path: the other predicates are trustworthy."""
        return not self.opaque and all(s.startswith("param:") for s in self.state)

    @property
    def passthrough(self) -> bool:
        """Only an input (or a view / cast / copy of one): no kernel, no compute, nothing unknown."""
        return bool(self.inputs) and not self.kernels and not self.ops and self.understood

    @property
    def constant(self) -> bool:
        """Independent of input values: a literal or an allocation shaped like an input, nothing else."""
        return not self.inputs and not self.kernels and not self.ops and self.understood


EMPTY = Provenance()
_new = tuple.__new__
_INDEX = {name: i for i, name in enumerate(Provenance._fields)}
# field numbers for ``Provenance.plus``
INPUTS, META, ALIAS, KERNELS, OPS, ALLOCS, STATE, OPAQUE, SLICES, PARTIAL, VIA = range(11)
assert Provenance._fields[OPS] == "ops" and Provenance._fields[OPAQUE] == "opaque" and Provenance._fields[VIA] == "via"
