"""HS119: custom code that provably cannot build, bind or be called (class 3, no custom kernel).

The facts are in ``hackscan.cuda.buildability``: each is a certainty about how torch's
``cpp_extension`` builds an extension (an undeclared ``functions=`` name, a second module definition,
CUDA launch syntax compiled as C++, keyword arguments to an unnamed binding, an API torch does not
have).  The fallback rules (HS107, HS108, HS118) read the same facts to say that the torch path is
what runs; this rule carries the cause, once per reason and extension, at the line that causes it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...cuda.buildability import cannot_run


def custom_code_cannot_run(ctx: ScanContext) -> Iterator[Hit]:
    """HS119 custom-code-cannot-run: an extension that cannot build or bind, a call that cannot succeed."""
    seen: set[tuple[str, str]] = set()
    for fact in cannot_run(ctx):
        key = (fact.extension, fact.reason)
        if key in seen:
            continue  # one finding per cause: the second undeclared name adds nothing to the verdict
        seen.add(key)
        what = f"what `{fact.extension}(...)` should build" if fact.reason == "missing-api" \
            else f"the custom code of extension '{fact.extension}'"
        yield ctx.hit(fact.pos, args={"what": what, "detail": fact.detail},
                      evidence={"extension": fact.extension, "reason": fact.reason})
