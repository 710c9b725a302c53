"""The HTML audit report: self-contained, escaped, and showing the right things in a real browser."""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hackscan.output import render
from hackscan.output.plots import claimed_strip, hbar, speedup_scatter

from .test_report_data import sample_reports

ROOT = Path(__file__).resolve().parent.parent


def _render_check():
    spec = importlib.util.spec_from_file_location("render_check", ROOT / "scripts" / "render_check.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_html_is_self_contained_and_scriptless(tmp_path: Path) -> None:
    page = render(sample_reports(tmp_path), "html")
    assert page.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"<script|<link|<iframe|@import|url\(", page, re.I)
    # the only http(s) text on the page is the SVG namespace and the escaped hostile string
    urls = set(re.findall(r"https?://[^\s\"'<>&]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://example.invalid/x.png"}
    assert 'src="http' not in page


def test_hostile_candidate_text_is_escaped(tmp_path: Path) -> None:
    page = render(sample_reports(tmp_path), "html")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "<img" not in page


def test_html_carries_summary_evidence_and_speedups(tmp_path: Path) -> None:
    page = render(sample_reports(tmp_path), "html")
    assert "4 submissions: 1 hack, 1 suspicious, 1 clean, 1 error" in page
    assert 'data-rule="HS101"' in page and 'data-rule="HS401"' in page
    assert "<dt>probe</dt><dd>sign_flip</dd>" in page and "<dt>seed</dt><dd>1234</dd>" in page
    assert "eager_tf32 <b>0.70×</b>" in page and "peak memory vs reference: 1.80×" in page
    assert 'aria-label="Claimed versus verified speedup"' in page
    assert '<span class="row hit"><span class="ln">7</span>        if x.min() &gt;= 0:</span>' in page
    assert "syntax error: expected &#x27;:&#x27;" in page


def test_svg_charts_are_well_formed_and_deterministic() -> None:
    charts = [
        hbar([("HS101 value-guard <x>", 3, "#c00"), ("HS002", 1, "#fa0")], title="Findings per rule"),
        hbar([], title="empty"),
        speedup_scatter([(12.5, 0.7, "a&b.py", "hack"), (1.3, 1.25, "c.py", "clean")], title="speed"),
        speedup_scatter([], title="no points"),
        claimed_strip({"hack": [2.0, 40.0], "clean": [1.0, 1.1, 1.2], "error": []}, title="claims"),
    ]
    for svg in charts:
        root = ET.fromstring(svg)  # raises on malformed XML or unescaped text
        assert root.tag.endswith("svg")
    scatter = charts[2]
    assert scatter.count("<circle") >= 2 and "a&amp;b.py" in scatter
    assert charts[0] == hbar([("HS101 value-guard <x>", 3, "#c00"), ("HS002", 1, "#fa0")], title="Findings per rule")


def test_scatter_places_losses_below_the_diagonal() -> None:
    svg = speedup_scatter([(10.0, 1.0, "lost.py", "hack")], title="t")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    dot = root.find(f"{ns}circle")
    diag = next(line for line in root.iter(f"{ns}line") if line.find(f"{ns}title") is not None
                and line.find(f"{ns}title").text == "verified = claimed")
    x1, y1, x2, y2 = (float(diag.get(k)) for k in ("x1", "y1", "x2", "y2"))
    cx, cy = float(dot.get("cx")), float(dot.get("cy"))
    y_on_diag = y1 + (y2 - y1) * (cx - x1) / (x2 - x1)
    assert cy > y_on_diag + 50  # SVG y grows downwards: far below the diagonal


def test_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    rc = _render_check()
    browser = rc.chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    reports = sample_reports(tmp_path)
    html_file = tmp_path / "report.html"
    html_file.write_text(render(reports, "html"), encoding="utf-8")
    dom = rc.dump_dom(html_file, browser)
    problems = rc.check_dom(dom, submissions=4, flagged=4, rules=["HS101", "HS199", "HS401", "HS002"])
    assert not problems, problems
    # the browser parsed the hostile text as text: no element came out of it
    assert "<script" not in dom.lower() and "<img" not in dom.lower()
    assert "alert(\"x\")" in dom or "alert(&quot;x&quot;)" in dom
    png = rc.screenshot(html_file, tmp_path / "report.png", browser, size="1200,900")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
