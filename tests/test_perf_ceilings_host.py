"""Device ceilings measured once per host, not once per candidate (dynamic/perf_run.HostCeilings).

A sandboxed reference worker's cache folder is private and empty, so every candidate's reference
measured the device's bandwidth and peak again (15-30 s, most of the performance stage).  The
parent now keeps what a reference measured and hands it to the next ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from hackscan.dynamic.perf_run import HostCeilings

ENTRY = {"version": 1, "bandwidth_Bps": 2.0e10, "peak_flops": 5.0e10}


def _raw(source: str = "measured", changed: bool = False, **entry: object) -> dict:
    return {"ceilings": {**ENTRY, **entry, "source": source, "key": "cpu|x"}, "timers": {"changed": changed}}


def test_kept_and_handed_back(tmp_path: Path) -> None:
    host = HostCeilings(str(tmp_path))
    assert host.load() == {}
    host.remember(_raw(), trusted=True)
    assert host.load() == {"cpu|x": ENTRY}


@pytest.mark.parametrize("raw, trusted", [
    (_raw(), False),                      # the reference is the candidate's own file
    (_raw(changed=True), True),           # a timer was replaced while it measured
    (_raw(source="cache"), True),         # nothing new
    (_raw(bandwidth_Bps=1e20), True),     # outside any plausible device
    (None, True),
])
def test_untrusted_measurements_are_not_kept(tmp_path: Path, raw: object, trusted: bool) -> None:
    host = HostCeilings(str(tmp_path))
    host.remember(raw, trusted=trusted)
    assert host.load() == {}


def test_worker_uses_the_parents_entry_instead_of_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from hackscan.perf.worker import bounds

    def never(*a: object, **k: object) -> dict:
        raise AssertionError("measured although the parent gave the ceilings")

    monkeypatch.setattr(bounds, "measure_ceilings", never)
    key = bounds.device_key(torch.device("cpu"))
    got = bounds.ceilings(torch.device("cpu"), directory=tmp_path, known={key: ENTRY})
    assert got["bandwidth_Bps"] == ENTRY["bandwidth_Bps"] and got["source"] == "cache"
    # a poisoned entry is not taken: the worker measures (here: the stub says so)
    with pytest.raises(AssertionError):
        bounds.ceilings(torch.device("cpu"), directory=tmp_path, known={key: dict(ENTRY, peak_flops=1e30)})
