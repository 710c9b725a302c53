"""The README is the front door: its rule table matches the registry."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_readme_rule_table_is_current() -> None:
    proc = subprocess.run([sys.executable, "scripts/gen_rule_table.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_readme_names_the_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "python -m pytest" in text and "hackscan kernels/" in text
