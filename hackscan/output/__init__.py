"""Views over reports: text (default), JSON, SARIF 2.1.0, Markdown and HTML."""

from __future__ import annotations

from collections.abc import Sequence

from ..model import Report

FORMATS = ("text", "json", "sarif", "markdown", "html")


def render(reports: Sequence[Report], fmt: str, *, color: bool = False, **kw: object) -> str:
    if fmt == "text":
        from .text import render_text

        return render_text(reports, color=color, perf_stats=bool(kw.get("perf_stats")))
    if fmt == "json":
        from .jsonout import render_json

        return render_json(reports)
    if fmt == "sarif":
        from .sarif import render_sarif

        return render_sarif(reports)
    if fmt == "markdown":
        from .markdown import render_markdown

        return render_markdown(reports, **_without(kw, "perf_stats"))
    if fmt == "html":
        from .html import render_html

        return render_html(reports, **_without(kw, "perf_stats"))
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _without(kw: dict, *names: str) -> dict:
    return {k: v for k, v in kw.items() if k not in names}
