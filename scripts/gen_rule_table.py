#!/usr/bin/env python3
"""Regenerate the rule table of docs/rules.md from the registry (between the rules markers).

    python scripts/gen_rule_table.py          # rewrite docs/rules.md in place
    python scripts/gen_rule_table.py --check  # exit 1 if docs/rules.md is out of date (used by a test)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hackscan.registry import load_registry  # noqa: E402

START, END = "<!-- rules:start -->", "<!-- rules:end -->"


def table() -> str:
    rows = ["| id | name | severity | confidence | stage | languages | class | verdict class | summary |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in load_registry():
        classes = ", ".join(str(t) for t in r.taxonomy if t) or "meta"
        summary = r.summary.replace("|", "\\|")
        rows.append(f"| {r.id} | `{r.name}` | {r.severity.value} | {r.confidence.value} | {r.stage.value} | "
                    f"{', '.join(r.languages)} | {classes} | {r.verdict_class} | {summary} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    block = f"{START}\n{table()}\n{END}"
    return re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: block, readme, flags=re.S)


def main() -> int:
    path = ROOT / "docs" / "rules.md"
    current = path.read_text(encoding="utf-8")
    new = render(current)
    if "--check" in sys.argv:
        if new != current:
            print("docs/rules.md rule table is out of date: run python scripts/gen_rule_table.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
