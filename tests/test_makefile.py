"""`make demo` shows the report and succeeds on the demo set's hacks (exit 1 is what hackscan
should say there), and says what the exit code would mean in CI; a real failure still fails it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None or not Path("/bin/bash").exists(),
                                reason="needs make and bash")


def _demo(tmp_path: Path, rc: int) -> subprocess.CompletedProcess[str]:
    # a stand-in hackscan in a throwaway venv: the recipe, not the scan, is under test here;
    # -o install: take the install as done
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "hackscan"
    exe.write_text(f"#!/bin/sh\necho \"REPORT $@\"\nexit {rc}\n")
    exe.chmod(0o755)
    return subprocess.run(["make", "--no-print-directory", "-o", "install", "demo", f"VENV={venv}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, MAKEFLAGS=""))


@pytest.mark.parametrize("rc", [0, 1])
def test_demo_succeeds_and_states_the_exit_code(tmp_path: Path, rc: int) -> None:
    out = _demo(tmp_path, rc)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "REPORT kernels/"
    assert lines[-1].startswith(f"hackscan: exit code {rc}:") and "CI" in lines[-1]
    assert "Error" not in out.stderr


def test_demo_fails_when_the_run_itself_fails(tmp_path: Path) -> None:
    out = _demo(tmp_path, 2)
    assert out.returncode != 0
    assert "exit code 2" in out.stderr


def test_pip_filter_keeps_other_lines_and_the_exit_status(tmp_path: Path) -> None:
    mk = tmp_path / "Mk"
    mk.write_text(f"include {ROOT / 'Makefile'}\n"
                  "ok:\n\t@printf \"WARNING: Location 'file:///x/simple/a/' is ignored: it is neither a file nor a "
                  "directory.\\nERROR: real\\n\" $(QUIET_PIP)\n"
                  "bad:\n\t@false $(QUIET_PIP)\n")
    ok = subprocess.run(["make", "-s", "-f", str(mk), "ok"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout == "ERROR: real\n"
    bad = subprocess.run(["make", "-s", "-f", str(mk), "bad"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
