"""A one-update ``__init__`` for the frozen dataclasses the analyses create by the dozen per file.

A frozen dataclass sets each field through ``object.__setattr__`` (the class's own ``__setattr__``
refuses), one call per field.  ``quick_init`` replaces the generated ``__init__`` with one that
fills the instance ``__dict__`` in one update, in field order, with the same signature and defaults
(``default_factory`` included): the objects are the same in every observable way (fields, ``repr``,
equality, hash, immutability afterwards; ``tests/test_records.py``).
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar

T = TypeVar("T")

_FACTORY = object()  # marks a parameter whose default comes from a default_factory


def quick_init(cls: type[T]) -> type[T]:
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    if len(fields) != len(dataclasses.fields(cls)) or hasattr(cls, "__post_init__") or any(  # type: ignore[arg-type]
            f.kw_only for f in fields):
        return cls  # outside what the generated code below reproduces: keep the dataclass __init__
    params, lines = [], []
    env: dict[str, object] = {"_FACTORY": _FACTORY}
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            lines.append(f"    if {f.name} is _FACTORY: {f.name} = _f_{f.name}()")
        else:
            params.append(f.name)
    items = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    lines.append(f"    self.__dict__.update({{{items}}})")
    src = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines) + "\n"
    exec(compile(src, f"<quick_init {cls.__name__}>", "exec"), env)  # noqa: S102 - generated from field names
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    init.__doc__ = cls.__init__.__doc__  # type: ignore[misc]
    cls.__init__ = init  # type: ignore[misc]
    return cls
