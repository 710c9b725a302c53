"""Suppression comments: ``# hackscan: ignore[HS101] reason`` and ``// hackscan: ignore[HS203] reason``.

A suppression names its codes and should carry a reason.  It applies to findings on its own line,
or, when the comment stands alone on its line, to the next line.  Suppressions are honoured only in
audit mode; in gate mode (the RL reward gate, the API's default) they are ignored and their
presence is itself a finding, because the model under training writes the code and could learn to
write the comment too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SUPPRESS = re.compile(
    r"(?:#|//)\s*hackscan:\s*ignore(?:\[(?P<codes>[A-Za-z0-9_,\s-]*)\])?(?P<reason>[^\n]*)"
)


@dataclass(frozen=True)
class Suppression:
    line: int  # line of the comment
    column: int
    applies_to: tuple[int, ...]  # lines whose findings it covers
    codes: tuple[str, ...]  # empty: every code (discouraged)
    reason: str

    def covers(self, rule: str, name: str, line: int) -> bool:
        if line not in self.applies_to:
            return False
        return not self.codes or rule in self.codes or name in self.codes


def find_suppressions(text: str) -> list[Suppression]:
    if "hackscan:" not in text:
        return []
    out: list[Suppression] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = _SUPPRESS.search(line)
        if not m:
            continue
        codes = tuple(c.strip().upper() if c.strip().upper().startswith("HS") else c.strip()
                      for c in (m.group("codes") or "").split(",") if c.strip())
        standalone = not line[: m.start()].strip()
        applies = (lineno, lineno + 1) if standalone else (lineno,)
        reason = m.group("reason").strip().strip("\"'").strip()
        # a reason ends where a closing string quote of the CUDA literal begins
        reason = reason.rstrip('"\'').strip()
        out.append(Suppression(lineno, m.start() + 1, applies, codes, reason))
    return out
