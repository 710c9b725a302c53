"""Candidates run in a private working directory: nothing they write lands in the user's folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import Submission  # noqa: E402
from hackscan.pipeline import RunOptions  # noqa: E402

REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2.0

def get_inputs():
    return [torch.rand(8, 16)]

def get_init_inputs():
    return []
"""

LITTERING = """
import os
import torch
import torch.nn as nn

os.makedirs("generated_src", exist_ok=True)
with open(os.path.join("generated_src", "notes.txt"), "w") as fh:
    fh.write("written at import")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "next_to_me.txt"), "w") as fh:
    fh.write("written next to __file__")

class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2.0
"""


def test_candidate_writes_stay_out_of_cwd_and_source_folder(tmp_path: Path, monkeypatch) -> None:
    from hackscan.dynamic import run_dynamic_stage

    src_dir = tmp_path / "src"
    src_dir.mkdir()
    cand = src_dir / "cand.py"
    cand.write_text(LITTERING)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    sub = Submission(path=str(cand), code=LITTERING, file=str(cand), reference=REFERENCE, reference_path="ref.py")
    report = StaticScanner(Config()).scan(sub)
    report = run_dynamic_stage(sub, report, RunOptions(device="cpu", perf=False), Config())
    assert report.dynamic and report.dynamic.get("ran") is not False, report.dynamic
    assert sorted(os.listdir(cwd)) == []
    assert sorted(os.listdir(src_dir)) == ["cand.py"]
