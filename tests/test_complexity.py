"""McCabe complexity of the static side: no function in hackscan/python, cuda, triton or checks above 30.

A function past that many paths does several things under one name; the value flow and the CUDA
rules were carved into helpers that each do one named thing, and this keeps them so.  The dynamic
side is not held to it here (its own carving is under way); once it is, ``C90`` with
``max-complexity = 30`` belongs in pyproject's ruff selection and this test can go.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATIC = ("hackscan/python", "hackscan/cuda", "hackscan/triton", "hackscan/checks")
MAX = 30


def _complex_functions(paths: list[str], cwd: Path) -> list[str]:
    """ruff's C901 findings above ``MAX`` for ``paths``, one line each."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "C901",
         "--config", f"lint.mccabe.max-complexity={MAX}", "--output-format", "concise", *paths],
        capture_output=True, text=True, cwd=cwd, timeout=120)
    if proc.returncode not in (0, 1) or "No module named ruff" in proc.stderr:
        pytest.fail(f"ruff did not run (exit {proc.returncode}): {proc.stderr.strip()[:500]}")
    return [line for line in proc.stdout.splitlines() if "C901" in line]


def test_static_side_has_no_function_above_the_limit() -> None:
    found = _complex_functions(list(STATIC), ROOT)
    assert not found, "split these into helpers that each do one named thing:\n" + "\n".join(found)


def test_the_check_sees_a_complex_function(tmp_path: Path) -> None:
    # a function with 31 branches: the same call must report it, or the test above proves nothing
    body = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(MAX + 1))
    (tmp_path / "branchy.py").write_text(f"def branchy(x):\n{body}\n    return -1\n", encoding="utf-8")
    found = _complex_functions(["branchy.py"], tmp_path)
    assert len(found) == 1 and "branchy" in found[0]
