"""Small inline SVG charts for the HTML report: no script, no fonts or files from elsewhere.

Every label is escaped (paths and messages come from untrusted candidates) and the output is a
pure function of the data, so two runs over the same reports give byte-identical files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape as _html_escape

from .escape import visible

VERDICT_COLORS = {"hack": "#c0392b", "suspicious": "#d68910", "clean": "#1e8449", "error": "#7d3c98"}
# a warning in yellow (dark text on its badges): the orange it had read as red beside an error
SEVERITY_COLORS = {"error": "#c0392b", "warning": "#f1c40f", "info": "#2e86c1"}
_FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif"'


def escape(text: object) -> str:
    """HTML-escaped, with control and bidi characters as visible escapes (labels are candidate paths)."""
    return _html_escape(visible(text), quote=True)


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def hbar(items: Sequence[tuple[str, float, str]], *, title: str, width: int = 640, bar_height: int = 18,
         label_width: int = 260, value_fmt: str = "{:g}", aria: str | None = None) -> str:
    """Horizontal bars: ``(label, value, colour)`` per row, longest first as given."""
    gap = 6
    top = 28
    # an SVG label cannot wrap, and text past x=0 is cut off: widen the label column (and the chart) to
    # the longest label, at 7.5 px a character, which is wider than a 12 px system-ui font's average
    shown = [label if len(label) <= 60 else label[:59] + "…" for label, _, _ in items]
    need = max((math.ceil(len(t) * 7.5) + 10 for t in shown), default=0)
    if need > label_width:
        width += need - label_width
        label_width = need
    height = top + len(items) * (bar_height + gap) + 8
    plot_w = width - label_width - 60
    vmax = max((v for _, v, _ in items), default=0) or 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" {_FONT} font-size="12" aria-label="{escape(aria or title)}">',
           f'<text x="0" y="16" font-size="14" font-weight="600">{escape(title)}</text>']
    if not items:
        out.append('<text x="0" y="44" fill="#666">nothing to show</text>')
    for i, ((label, value, color), short) in enumerate(zip(items, shown, strict=True)):
        y = top + i * (bar_height + gap)
        w = max(1.0, plot_w * value / vmax) if value > 0 else 0
        out.append(f'<text x="{label_width - 6}" y="{y + bar_height - 5}" text-anchor="end">{escape(short)}</text>')
        out.append(f'<rect x="{label_width}" y="{y}" width="{_num(w)}" height="{bar_height}" fill="{color}">'
                   f'<title>{escape(label)}: {escape(value_fmt.format(value))}</title></rect>')
        out.append(f'<text x="{_num(label_width + w + 4)}" y="{y + bar_height - 5}">'
                   f'{escape(value_fmt.format(value))}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            t = m * 10.0 ** e
            if lo <= t <= hi:
                ticks.append(t)
    return ticks


def _tick_label(t: float) -> str:
    return f"{t:g}×"


def speedup_scatter(points: Sequence[tuple[float, float, str, str]], *, title: str, width: int = 520,
                    height: int = 420) -> str:
    """Claimed (x) against verified (y) speedup on log axes, one dot per submission coloured by verdict.

    The diagonal is "verified as claimed"; dots under it lost speed once measured honestly, and the
    dashed line at 1× marks where a kernel stops being faster than the baseline at all.
    """
    left, right, top, bottom = 56, 16, 30, 44
    pw, ph = width - left - right, height - top - bottom
    values = [v for p in points for v in p[:2] if v > 0] or [0.5, 2.0]
    lo = min(min(values), 0.8) / 1.25
    hi = max(max(values), 1.25) * 1.25
    llo, lhi = math.log10(lo), math.log10(hi)

    def sx(v: float) -> float:
        return left + pw * (math.log10(v) - llo) / (lhi - llo)

    def sy(v: float) -> float:
        return top + ph - ph * (math.log10(v) - llo) / (lhi - llo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" {_FONT} font-size="11" aria-label="{escape(title)}">',
           f'<text x="0" y="16" font-size="14" font-weight="600">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>']
    for t in _log_ticks(lo, hi):
        x, y = sx(t), sy(t)
        out.append(f'<line x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<line x1="{left}" y1="{_num(y)}" x2="{left + pw}" y2="{_num(y)}" stroke="#eee"/>')
        out.append(f'<text x="{_num(x)}" y="{top + ph + 14}" text-anchor="middle">{_tick_label(t)}</text>')
        out.append(f'<text x="{left - 4}" y="{_num(y + 4)}" text-anchor="end">{_tick_label(t)}</text>')
    out.append(f'<line x1="{_num(sx(lo))}" y1="{_num(sy(lo))}" x2="{_num(sx(hi))}" y2="{_num(sy(hi))}" '
               'stroke="#888" stroke-width="1"><title>verified = claimed</title></line>')
    out.append(f'<line x1="{left}" y1="{_num(sy(1))}" x2="{left + pw}" y2="{_num(sy(1))}" stroke="#888" '
               'stroke-dasharray="4 3"><title>verified 1×: no faster than the baseline</title></line>')
    for claimed, verified, label, verdict in points:
        color = VERDICT_COLORS.get(verdict, "#555")
        out.append(f'<circle cx="{_num(sx(claimed))}" cy="{_num(sy(verified))}" r="4" fill="{color}" '
                   f'fill-opacity="0.8"><title>{escape(label)}: claimed {claimed:.2f}×, verified {verified:.2f}× '
                   f'({escape(verdict)})</title></circle>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle">claimed speedup (dataset)</text>')
    out.append(f'<text x="12" y="{top + ph / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 12 {top + ph / 2:.0f})">verified speedup (measured)</text>')
    out.append(_legend(left + 8, top + 8, sorted({p[3] for p in points})))
    out.append("</svg>")
    return "\n".join(out)


def claimed_strip(groups: Mapping[str, Sequence[float]], *, title: str, width: int = 640) -> str:
    """Claimed speedups on a log axis, one row per verdict: do the flagged ones claim the big wins?"""
    rows = [(k, v) for k, v in groups.items() if v]
    left, right, top, row_h = 90, 20, 30, 34
    height = top + row_h * max(len(rows), 1) + 30
    pw = width - left - right
    values = [x for _, v in rows for x in v if x > 0] or [0.5, 2.0]
    lo, hi = min(min(values), 0.8) / 1.25, max(max(values), 1.25) * 1.25
    llo, lhi = math.log10(lo), math.log10(hi)

    def sx(v: float) -> float:
        return left + pw * (math.log10(v) - llo) / (lhi - llo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" {_FONT} font-size="11" aria-label="{escape(title)}">',
           f'<text x="0" y="16" font-size="14" font-weight="600">{escape(title)}</text>']
    axis_y = top + row_h * max(len(rows), 1)
    for t in _log_ticks(lo, hi):
        out.append(f'<line x1="{_num(sx(t))}" y1="{top}" x2="{_num(sx(t))}" y2="{axis_y}" stroke="#eee"/>')
        out.append(f'<text x="{_num(sx(t))}" y="{axis_y + 14}" text-anchor="middle">{_tick_label(t)}</text>')
    for i, (verdict, vals) in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        color = VERDICT_COLORS.get(verdict, "#555")
        med = sorted(vals)[len(vals) // 2]
        out.append(f'<text x="{left - 8}" y="{cy + 4:.0f}" text-anchor="end">{escape(verdict)} ({len(vals)})</text>')
        for j, v in enumerate(sorted(vals)):
            jitter = ((j * 7) % 11 - 5) * 1.6  # deterministic spread so equal values stay visible
            out.append(f'<circle cx="{_num(sx(v))}" cy="{_num(cy + jitter)}" r="3" fill="{color}" '
                       f'fill-opacity="0.55"><title>{v:.2f}×</title></circle>')
        out.append(f'<line x1="{_num(sx(med))}" y1="{_num(cy - 12)}" x2="{_num(sx(med))}" y2="{_num(cy + 12)}" '
                   f'stroke="#222" stroke-width="2"><title>median {med:.2f}×</title></line>')
    out.append(f'<text x="{left + pw / 2:.0f}" y="{height - 4}" text-anchor="middle">'
               'claimed speedup (dataset), median marked</text>')
    out.append("</svg>")
    return "\n".join(out)


def _legend(x: float, y: float, verdicts: Sequence[str]) -> str:
    parts = []
    for i, v in enumerate(verdicts):
        parts.append(f'<circle cx="{_num(x + 4)}" cy="{_num(y + 14 * i)}" r="4" fill="{VERDICT_COLORS.get(v, "#555")}"/>'
                     f'<text x="{_num(x + 12)}" y="{_num(y + 14 * i + 4)}">{escape(v)}</text>')
    return "".join(parts)


def text_bars(items: Sequence[tuple[str, float]], width: int = 30) -> list[str]:
    """The same bars as text, for Markdown (GitHub strips inline SVG)."""
    vmax = max((v for _, v in items), default=0) or 1
    label_w = max((len(k) for k, _ in items), default=0)
    lines = []
    for label, value in items:
        n = value / vmax * width
        bar = "█" * int(n) + ("▌" if n - int(n) >= 0.5 else "")
        lines.append(f"{label:<{label_w}} {bar} {value:g}")
    return lines
