"""HS201: CUDA/C++ units that tree-sitter cannot parse cleanly."""

from __future__ import annotations

from collections.abc import Iterator

from ...context import Hit, ScanContext


def cuda_parse_error(ctx: ScanContext) -> Iterator[Hit]:
    seen: set[str] = set()
    for err in ctx.cuda.parse_errors:
        if err.unit_id in seen:  # the first error per unit; the rest usually follow from it
            continue
        seen.add(err.unit_id)
        snippet = " ".join(err.snippet.split())[:40]
        yield ctx.hit(err.pos, args={"unit": err.unit_id, "snippet": snippet},
                      evidence={"unit": err.unit_id, "snippet": snippet})
