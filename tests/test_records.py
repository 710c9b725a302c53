"""``quick_init``: the fast constructor of the analyses' frozen records builds the same objects."""

from __future__ import annotations

import dataclasses

import pytest

from hackscan.python.facts import Arm, TorchOp
from hackscan.util.quick_init import quick_init


@quick_init
@dataclasses.dataclass(frozen=True)
class _Quick:
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()
    d: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Plain:
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()
    d: dict = dataclasses.field(default_factory=dict)


def test_same_fields_defaults_and_order() -> None:
    for args, kw in (((1,), {}), ((1, "y"), {}), ((1,), {"c": (2,), "d": {"k": 1}}), ((), {"a": 3, "b": "z"})):
        q, p = _Quick(*args, **kw), _Plain(*args, **kw)
        assert list(vars(q).items()) == list(vars(p).items())
        assert repr(q).replace("_Quick", "_Plain") == repr(p)
    assert _Quick(1) == _Quick(1) and _Quick(1) != _Quick(2)
    assert _Quick(1).d is not _Quick(1).d  # a fresh default per instance, as default_factory gives


def test_still_frozen_and_checked() -> None:
    q = _Quick(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Quick(1, nope=2)  # type: ignore[call-arg]


def test_fact_records_use_it() -> None:
    assert Arm.__init__.__code__.co_filename.startswith("<quick_init")
    arm = Arm("body", 1, 2)
    assert arm.kernels == () and arm.bindings == {} and arm.value is None and arm.empty is False
    op = TorchOp(0, "torch.add", None, "f", "call")  # type: ignore[arg-type]
    assert op.members == () and op.family == "add"
    assert hash(op) == hash(TorchOp(0, "torch.add", None, "f", "call", ()))  # type: ignore[arg-type]
