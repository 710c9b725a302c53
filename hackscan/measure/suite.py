"""The whole mutation suite of a seed: the plain mutators (``mutators.py``) and the evasive ones
(``evasive.py``, written on top of the plain helpers), in one list for the adequacy run."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .evasive import EVASIVE
from .mutators import MUTATORS, Mutant
from .seeds import Seed


def mutants_of(seed: Seed, classes: tuple[int, ...] = (), evasive: bool = True) -> list[Mutant]:
    """Every variant of every class that applies to ``seed`` and still parses as Python.

    The plain variants come first, then (``evasive``) the same classes through the evasion families
    of ``evasive.py``.
    """


    f = seed.facts
    out: list[Mutant] = []
    if f.forward is None:
        return out

    def variants(klass: int) -> Iterator[tuple[str, str, str | None, bool]]:
        for variant, code, needs_cuda in MUTATORS[klass][1](f):
            yield variant, "plain", code, needs_cuda
        if evasive and klass in EVASIVE:
            yield from EVASIVE[klass](f)

    for klass in MUTATORS:
        if classes and klass not in classes:
            continue
        seen: set[str] = set()
        for variant, family, code, needs_cuda in variants(klass):
            if code is None or code == seed.code or code in seen:
                continue
            try:
                ast.parse(code)
            except SyntaxError:
                continue
            seen.add(code)
            out.append(Mutant(seed.name, klass, variant, code, seed.reference, seed.reference_path,
                              needs_cuda or f.uses_cuda, family))
    return out
