"""Hiding what the extension calls: token-pasted API names (HS217) and run-time loading or process
execution (HS218)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...cuda import names

# fragments that, glued with ##, build a CUDA runtime / driver / profiler / loader name
_API_FRAGMENT = re.compile(
    r"^(cuda|cu|nvtx|cupti|cublas|cudnn|nvrtc|dl|__cuda)([A-Z]\w*)?$|"
    r"(Stream|Event|Synchronize|Elapsed|ElapsedTime|Launch|Kernel|Record|Memcpy|Malloc|Device|Graph|sym|open|"
    r"Create|Destroy|Query|WaitEvent)$")
_PASTE = re.compile(r"(\w*)\s*##\s*(\w*)")


def cuda_token_pasted_api(ctx: ScanContext) -> Iterator[Hit]:
    """HS217."""
    facts = ctx.cuda
    for m in facts.macros:
        if not m.pastes:
            continue
        params = set(m.params or ())
        fragments: list[str] = []
        for a, b in _PASTE.findall(m.body):
            fragments.extend(f for f in (a, b) if f and f not in params and f != "__VA_ARGS__")
        if any(_API_FRAGMENT.match(f) for f in fragments):
            body = " ".join(m.body.split())[:60]
            yield ctx.hit(m.pos, args={"macro": m.name, "body": body}, evidence={"fragments": fragments})
    if ctx.options.get("deep"):
        from ...cuda import clang

        if clang.available():
            for unit in facts.units:
                if "##" not in unit.text:
                    continue
                for name, pos in clang.pasted_api_calls(unit):
                    yield ctx.hit(pos, message=f"a macro expands to a call of `{name}`, a name that only exists "
                                               "after token pasting", evidence={"call": name, "deep": True})


_WHY = {
    "dlopen": "it loads a shared library the static stage never saw",
    "dlmopen": "it loads a shared library the static stage never saw",
    "dlsym": "it looks symbols up at run time (the usual first step of interposing an API)",
    "dlvsym": "it looks symbols up at run time (the usual first step of interposing an API)",
}


def cuda_dynamic_loading(ctx: ScanContext) -> Iterator[Hit]:
    """HS218."""
    facts = ctx.cuda
    for fn in facts.functions:
        for c in fn.calls:
            if c.is_method or c.namespace not in ("", "std"):
                continue
            base = c.base
            if base in names.DYNAMIC_LOAD:
                why = _WHY[base]
            elif base in names.PROCESS_CALLS or c.name in names.PROCESS_CALLS:
                why = "it runs another process from inside the harness"
            else:
                continue
            if fn.kind != "host" and base not in names.DYNAMIC_LOAD:
                continue
            yield ctx.hit(c.pos, args={"function": fn.name, "call": c.name, "why": why},
                          evidence={"call": c.name, "function": fn.key})


__all__ = ["cuda_token_pasted_api", "cuda_dynamic_loading"]
