"""Checks about extraction itself rather than any one hack."""

from __future__ import annotations

from collections.abc import Iterator

from ..context import Hit, ScanContext


def unresolved_sources(ctx: ScanContext) -> Iterator[Hit]:
    """HS002: a source handed to the compiler that cannot be resolved statically."""
    if ctx.host is None:
        return
    for p in ctx.host.problems:
        yield Hit(line=p.line, column=p.column,
                  args={"argument": p.argument, "extension": p.extension, "reason": p.reason},
                  evidence={"argument": p.argument, "reason": p.reason})
