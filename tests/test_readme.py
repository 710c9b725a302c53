"""The README is the front door: it names the main job, the tests and the gate; the rule table in
docs/rules.md matches the registry."""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_rule_table_is_current() -> None:
    proc = subprocess.run([sys.executable, "scripts/gen_rule_table.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_readme_names_the_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text and "python -m pytest" in text and "hackscan kernels/" in text
    assert "hackscan.scan_source(" in text and "docs/usage.md" in text


def test_readme_stays_a_front_door() -> None:
    """The reference and the measurement log live under docs/; the README stays short enough to read."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_readme_links_resolve() -> None:
    """Every relative link of the README and docs/ names a file that exists."""
    import re

    for doc in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        # code spans are not links: ``kernel[grid](...)`` reads like one
        text = re.sub(r"`[^`\n]*`", "", doc.read_text())
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"
