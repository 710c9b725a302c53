"""The worker's in-process guard (worker/guard.py) reports harness code a candidate rewrote: a
function replaced in its module or class, and a function whose ``__code__`` was assigned in place
(the same object, so an identity check alone sees nothing).  It is evidence against the candidate
only: a candidate that also rewrites the guard's fingerprint is left to the parent's own checks
(tests/test_hostile.py, rewrite_in_place and forged_timing)."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("torch")

from hackscan.dynamic.worker.guard import GlobalState  # noqa: E402


@pytest.fixture()
def harness_module():
    mod = types.ModuleType("hsguardpkg.worker")

    def probe(x):
        return x

    class Worker:
        def call(self, x):
            return x

    probe.__module__ = Worker.__module__ = Worker.call.__module__ = mod.__name__
    mod.probe, mod.Worker = probe, Worker
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def _names(state: GlobalState) -> dict[str, str]:
    return {c["name"]: c["after"] for c in state.changes()}


def test_code_assigned_in_place_is_reported(harness_module) -> None:
    state = GlobalState()
    state.watch_harness("hsguardpkg")
    assert not [n for n in _names(state) if n.startswith("harness code")]

    def stand_in(x):
        return x * 0

    harness_module.probe.__code__ = stand_in.__code__
    harness_module.Worker.call.__code__ = (lambda self, x: x * 0).__code__
    seen = _names(state)
    assert seen["harness code hsguardpkg.worker.probe"] == "code rewritten in place"
    assert [v for k, v in seen.items() if k.endswith("Worker.call")] == ["code rewritten in place"]


def test_a_replaced_function_is_still_reported_as_replaced(harness_module) -> None:
    state = GlobalState()
    state.watch_harness("hsguardpkg")
    harness_module.probe = lambda x: x
    assert _names(state)["harness code hsguardpkg.worker.probe"] == "replaced"
