"""docs/architecture.md (how it is built) against the code: a module it names must exist, and every
top-level module or package of ``hackscan/`` must be named there (a newcomer reads the drawing to
find where a step lives, so a renamed or added module must show up in it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "hackscan"


def _section() -> str:
    return (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_module_the_drawing_names_exists() -> None:
    section = _section()
    # full paths (hackscan/a/b.py, hackscan/a/) and bare file names (graph.py)
    paths = {p.rstrip(".,)") for p in re.findall(r"hackscan/[\w/.]+", section)}
    missing = [p for p in sorted(paths) if not (ROOT / p).exists()]
    files = {p.name for p in PKG.rglob("*.py")} | {p.name for p in (ROOT / "tests").glob("*.py")}
    bare = set(re.findall(r"(?<![\w/])(\w+\.py)\b", section))
    missing += [n for n in sorted(bare) if n not in files]
    assert paths and bare and not missing, f"named in docs/architecture.md but not in the code: {missing}"


def test_every_top_level_module_is_named_in_the_drawing() -> None:
    section = _section()
    top = [p for p in PKG.iterdir() if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or p.is_dir())]
    unnamed = [p.name for p in sorted(top) if not re.search(rf"(?<![\w]){re.escape(p.stem)}(\.py|/)", section)]
    assert len(top) > 20 and not unnamed, f"top-level modules docs/architecture.md does not name: {unnamed}"
