"""The HTML audit report: self-contained, escaped, and showing the right things in a real browser."""

from __future__ import annotations

import importlib.util
import json
import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hackscan.model import Confidence, Finding, Location, Report, Severity, Verdict
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
    assert "4 submissions: 1 hack, 1 error, 1 suspicious, 1 clean" in page
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


def _longest_rule() -> tuple[str, str]:
    """The rule whose "ID name" label is the longest of all shipped rules: the one most likely to be cut."""
    rules = [tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted((ROOT / "rules").glob("HS*.toml"))]
    best = max(rules, key=lambda r: len(f"{r['id']} {r['name']}"))
    return best["id"], best["name"]


def _finding(rule: str, name: str, path: str, sev: Severity = Severity.ERROR) -> Finding:
    return Finding(rule, name, sev, Confidence.HIGH, "m", Location(path, 1, 1))


def _mixed_reports(tmp_path: Path) -> list[Report]:
    """sample_reports scrambled (clean first, error last), plus the longest rule label, a second hack
    after the first (to check the order within a verdict is kept), and a hack the performance stage did
    not time while others were timed."""
    hack, clean, broken, quiet = sample_reports(tmp_path)
    rid, rname = _longest_rule()
    long_hack = Report("long_label.py", Verdict.HACK, (_finding(rid, rname, "long_label.py"),),
                       performance={"measured": False, "reason": "failed correctness: output mismatch"})
    untimed_hack = Report("untimed.py", Verdict.HACK, (_finding("HS101", "value-guarded-shortcut", "untimed.py"),))
    return [clean, quiet, hack, long_hack, broken, untimed_hack]


def _verdicts_in(page: str, pattern: str) -> list[str]:
    return re.findall(pattern + r'[^>]*data-verdict="(\w+)"', page)


def test_results_are_listed_hack_error_suspicious_clean(tmp_path: Path) -> None:
    reports = _mixed_reports(tmp_path)
    page = render(reports, "html")
    order = ["hack", "hack", "hack", "error", "suspicious", "clean"]
    assert _verdicts_in(page, "<tr") == order
    # blocks only for submissions with something to show; the clean one has measured timings, so it has one
    assert _verdicts_in(page, '<details class="sub"') == order
    # stable within a verdict: the hacks keep the order they were given in
    hacks = [m for m in re.findall(r'<tr data-verdict="hack"><td><a href="#[^"]+">([^<]+)</a>', page)]
    assert [h.rsplit("/", 1)[-1] for h in hacks] == ["relu_hack.py", "long_label.py", "untimed.py"]
    cards = re.findall(r'<div class="k">(\w+)</div>', page)
    assert cards == ["hack", "error", "suspicious", "clean"]


def test_performance_note_only_where_true(tmp_path: Path) -> None:
    # some timed, some not: no global "did not run" note; each untimed one says so itself, with its reason
    page = render(_mixed_reports(tmp_path), "html")
    assert "did not run" not in page
    blocks = dict(re.findall(r'<details class="sub" id="s\d+-([^"]+)"[^>]*>(.*?)</details>', page, re.S))
    untimed = {k for k, body in blocks.items() if "not timed" in body}
    # every block of an untimed submission says so (the error and the suspicious one were not timed either),
    # and no block of a timed one does
    assert untimed == {"long-label-py", "untimed-py", "broken-py", "noperf-py"}, untimed
    assert "not timed: failed correctness: output mismatch" in blocks["long-label-py"]
    assert "measured speedup" in blocks[next(k for k in blocks if k.endswith("relu-hack-py"))]
    assert page.count(">not timed</span>") == 4  # the table's measured cell of each of those four
    # the timed ones have no claimed-versus-verified gap to explain: both claims have a measurement
    assert 'id="perf-note"' not in page

    # nothing timed anywhere: one note, and no per-candidate marks repeating it
    bare = [Report("a.py", Verdict.HACK, (_finding("HS101", "value-guarded-shortcut", "a.py"),)),
            Report("b.py", Verdict.CLEAN, ())]
    page = render(bare, "html")
    assert page.count('id="perf-note"') == 1 and "No candidate was timed" in page
    assert "perf-untimed" not in page and ">not timed<" not in page and "measured speedup:" not in page

    # timed but nothing claimed: the note says why the scatter is absent, not that the stage did not run
    timed = [Report("c.py", Verdict.CLEAN, (), performance={"speedups": {"eager_tf32": 1.1}})]
    page = render(timed, "html")
    assert "did not run" not in page and "none states a claimed speedup" in page


# run inside the browser on a copy of the page (the report itself forbids scripts): measures what the
# reader sees and writes it as JSON into the DOM, which --dump-dom then carries out
_PROBE = """<script>
(function () {
  const out = {labels: [], svgText: [], order: [], rows: [], untimed: [], note: null};
  const chart = document.getElementById('rule-chart');
  const box = chart.getBoundingClientRect();
  out.chart = {sw: chart.scrollWidth, cw: chart.clientWidth,
               outer_sw: chart.parentElement.scrollWidth, outer_cw: chart.parentElement.clientWidth};
  const page = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll('.chart')) {
    const r = el.getBoundingClientRect();
    out.boxes = (out.boxes || []).concat([{left: r.left, right: r.right, page: page}]);
  }
  for (const el of chart.querySelectorAll('.bl, .bv')) {
    const r = el.getBoundingClientRect();
    out.labels.push({text: el.textContent, sw: el.scrollWidth, cw: el.clientWidth,
                     inside: r.left >= box.left - 0.5 && r.right <= box.right + 0.5});
  }
  for (const svg of document.querySelectorAll('#charts svg')) {
    // screen boxes, not getBBox: a rotated axis title's local box lies outside the chart though it does not
    const s = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const b = t.getBoundingClientRect();
      out.svgText.push({text: t.textContent, x: b.left - s.left, right: b.right - s.left, width: s.width,
                        top: b.top - s.top, bottom: b.bottom - s.top, height: s.height});
    }
  }
  for (const d of document.querySelectorAll('details.sub')) out.order.push(d.dataset.verdict);
  for (const tr of document.querySelectorAll('#submissions tbody tr')) out.rows.push(tr.dataset.verdict);
  for (const u of document.querySelectorAll('.perf-untimed')) {
    const d = u.closest('details.sub');
    out.untimed.push(d ? d.id : null);
  }
  const note = document.getElementById('perf-note');
  if (note) out.note = {text: note.textContent,
                        beforeFindings: !!(note.compareDocumentPosition(document.getElementById('findings'))
                                           & Node.DOCUMENT_POSITION_FOLLOWING)};
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def _measure(rc, browser: str, page: str, tmp_path: Path, width: int) -> dict:
    probed = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page).replace("</body>", _PROBE + "</body>")
    f = tmp_path / f"probe-{width}.html"
    f.write_text(probed, encoding="utf-8")
    proc = rc._run(browser, [f"--window-size={width},900", "--dump-dom", f.resolve().as_uri()], 90.0)
    m = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"the probe did not run ({proc.returncode}): {proc.stderr[-1000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                      .replace("&amp;", "&"))


def test_html_layout_in_headless_chromium(tmp_path: Path) -> None:
    rc = _render_check()
    browser = rc.chromium()
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    reports = _mixed_reports(tmp_path)
    page = render(reports, "html")
    rid, rname = _longest_rule()
    for width in (1200, 520):  # a desktop window, and one narrow enough that the labels must wrap
        got = _measure(rc, browser, page, tmp_path, width)
        labels = {x["text"]: x for x in got["labels"]}
        longest = labels[f"{rid} {rname}"]  # shown whole, not cut to "…"
        assert longest["sw"] <= longest["cw"] and longest["inside"], (width, longest)
        assert all(x["sw"] <= x["cw"] and x["inside"] for x in got["labels"]), (width, got["labels"])
        assert got["chart"]["sw"] <= got["chart"]["cw"], (width, got["chart"])
        # and every chart's box lies within the window, so nothing in it is cut off at the page's edge
        assert all(b["left"] >= 0 and b["right"] <= b["page"] + 0.5 for b in got["boxes"]), (width, got["boxes"])
        # SVG text cannot wrap: every label lies inside its chart's drawing area
        cut = [t for t in got["svgText"] if t["x"] < -0.5 or t["right"] > t["width"] + 0.5
               or t["top"] < -0.5 or t["bottom"] > t["height"] + 0.5]
        assert not cut, (width, cut)
        order = ["hack", "hack", "hack", "error", "suspicious", "clean"]
        assert got["order"] == order and got["rows"] == order
        # the untimed marks sit in the blocks of the untimed hacks, and no global note claims the stage did not run
        assert [u.split("-", 1)[1] for u in got["untimed"]] == ["long-label-py", "untimed-py", "broken-py",
                                                                  "noperf-py"], got["untimed"]
        assert got["note"] is None
    shot = rc.screenshot(tmp_path / "probe-1200.html", tmp_path / "layout.png", browser, size="1200,1400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


def test_static_only_results_are_marked_and_the_overview_comes_first() -> None:
    # a CUDA candidate whose dynamic stage could not run on this host: clean on the static rules
    # alone, which the page must say; the look-alike, a candidate whose dynamic stage ran, is not marked
    why = "dynamic stage not run: the candidate needs CUDA and this host has no GPU"
    seen = Report(path="k/cuda_relu.py", verdict=Verdict.CLEAN, dynamic={"ran": False, "reason": why})
    ran = Report(path="k/cpp_relu.py", verdict=Verdict.CLEAN, dynamic={"ran": True, "probes": []})
    page = render([seen, ran], "html")
    rows = dict(re.findall(r'<tr data-verdict="clean"><td>(?:<a [^>]*>)?([^<]+)(?:</a>)?</td>(.*?)</tr>', page))
    assert "static stage only" in rows["k/cuda_relu.py"] and "not run" in rows["k/cuda_relu.py"]
    assert "static stage only" not in rows["k/cpp_relu.py"]
    assert 'id="static-only">1 of 2 submission(s)' in page
    assert "the candidate needs CUDA and this host has no GPU" in page
    assert "dynamic stage not run: dynamic stage not run" not in page
    # the overview before the charts and the findings; no claimed-versus-verified table without a claim
    assert page.index('id="submissions"') < page.index('id="charts"') < page.index('id="findings"')
    assert 'id="claimed-vs-verified"' not in page
    assert "hackscan explain HSxxx" in page
