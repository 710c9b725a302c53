"""``cached_property`` without the lock Python 3.11 takes on every first access.

``functools.cached_property`` in 3.11 guards each computation with one lock per property, shared by
every instance in every thread (3.12 dropped it).  The facts of a scan are built lazily through
dozens of such properties per file, and a context or fact object belongs to one scan in one
thread, so the lock only costs time.  This descriptor computes the value once per instance and
stores it in the instance ``__dict__``, where attribute lookup finds it from then on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class cached_property(Generic[T]):  # noqa: N801 - a drop-in for functools.cached_property
    def __init__(self, func: Callable[[Any], T]):
        self.func = func
        self.attrname: str | None = None
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__

    def __set_name__(self, owner: type, name: str) -> None:
        if self.attrname is None:
            self.attrname = name
        elif name != self.attrname:
            raise TypeError(f"cannot assign the same cached_property to two names ({self.attrname!r} and {name!r})")

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_property[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if self.attrname is None:
            raise TypeError("cannot use cached_property instance without calling __set_name__ on it")
        value = self.func(instance)
        instance.__dict__[self.attrname] = value
        return value
