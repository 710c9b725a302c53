"""Parent side: findings of both stages about the same cause point at each other (``Finding.related``).

Two findings are about the same cause when their rules share a taxonomy class, or when the
dynamic finding comes from a probe that a static finding asked for (steering).  The link is
written both ways, so a reader of either finding sees the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model import Finding, Stage
from ..registry import Registry


def _classes(registry: Registry, rule_id: str) -> set[int]:
    try:
        return {c for c in registry.get(rule_id).taxonomy if c}
    except KeyError:
        return set()


def link_findings(static: list[Finding], dynamic: list[Finding], registry: Registry,
                  probe_rows: Iterable[dict[str, Any]]) -> tuple[list[Finding], list[Finding]]:
    steered = {row["id"]: set(row.get("steered_by") or []) for row in probe_rows}
    static_keys = {f.key: f for f in static if f.stage is Stage.STATIC and not f.suppressed}
    back: dict[str, set[str]] = {}
    out_dyn: list[Finding] = []
    for d in dynamic:
        classes = _classes(registry, d.rule)
        rel: set[str] = set(d.related)
        for key, s in static_keys.items():
            if classes & _classes(registry, s.rule):
                rel.add(key)
        probe = d.evidence.get("probe") if hasattr(d.evidence, "get") else None
        for key in steered.get(str(probe), set()):
            if key in static_keys:
                rel.add(key)
        for key in rel:
            back.setdefault(key, set()).add(d.key)
        out_dyn.append(d.with_(related=tuple(sorted(rel))) if rel else d)
    out_static = [s.with_(related=tuple(sorted(set(s.related) | back[s.key]))) if s.key in back else s
                  for s in static]
    return out_static, out_dyn
