"""`hackscan PATH --ref REF` runs the dynamic stage after the static one; `--static` skips it;
findings carry replayable evidence in the same JSON contract, with ``"stage": "dynamic"``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("numpy")

from .conftest import FIXTURES  # noqa: E402

ROWSUM = FIXTURES / "dynamic" / "rowsum"


def _hackscan(*args: str) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "hackscan.cli", *args, "-f", "json", "--no-progress"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    return out.returncode, json.loads(out.stdout)


@pytest.mark.slow
def test_the_command_runs_the_dynamic_stage_and_replays_with_seed() -> None:
    args = (str(ROWSUM / "hack_clipped_inputs.py"), "--ref", str(ROWSUM / "reference.py"), "--seed", "3", "--no-perf")
    code, doc = _hackscan(*args)
    assert code == 1
    result = doc["results"][0]
    assert result["verdict"] == "hack"
    dyn = [f for f in result["findings"] if f["stage"] == "dynamic"]
    hs402 = next(f for f in dyn if f["rule"] == "HS402")
    assert hs402["line"] == 11  # ModelNew.forward
    ev = hs402["evidence"]
    assert {"probe", "input", "seed", "max_abs_error", "max_rel_error", "error_ratio", "first_mismatch"} <= set(ev)
    assert ev["seed"] == 3
    section = result["dynamic"]
    assert section["ran"] is True and section["seed"] == 3 and section["device"] == "cpu"
    assert section["probes"] and all("status" in p for p in section["probes"])
    assert "timings" in section
    # the same seed gives the same probes and the same findings
    _, again = _hackscan(*args)
    again_dyn = [(f["rule"], f["evidence"].get("probe")) for f in again["results"][0]["findings"]
                 if f["stage"] == "dynamic"]
    assert again_dyn == [(f["rule"], f["evidence"].get("probe")) for f in dyn]
    assert [p["probe_seed"] for p in again["results"][0]["dynamic"]["probes"]] == \
        [p["probe_seed"] for p in section["probes"]]


@pytest.mark.slow
def test_static_skips_it_and_an_unavailable_device_is_a_stated_reason() -> None:
    code, doc = _hackscan(str(ROWSUM / "legit.py"), "--ref", str(ROWSUM / "reference.py"), "--static")
    assert "dynamic" not in doc["results"][0]
    assert all(f["stage"] == "static" for f in doc["results"][0]["findings"])
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    _, doc = _hackscan(str(ROWSUM / "legit.py"), "--ref", str(ROWSUM / "reference.py"), "--device", "cuda",
                       "--no-perf")
    dyn = doc["results"][0]["dynamic"]
    assert dyn["ran"] is False and "CUDA" in dyn["reason"]
