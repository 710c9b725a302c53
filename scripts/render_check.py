"""Render a hackscan HTML report in headless Chromium and check what a person would see.

    python scripts/render_check.py [PATH...] [--html FILE] [--screenshot OUT.png]

Scans PATH... statically (default: the fixtures/ tree), writes the HTML report, loads it in Debian's
``chromium`` with networking and extensions off, and checks the rendered DOM: the summary cards, the
charts (SVG present and sized), the per-rule table and one block per flagged submission.  Exit 0 when
every check passes, 1 when one fails, 77 when chromium is absent (the convention for "skipped").
The screenshot is left for a person to look at.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(browser: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="hackscan-chromium-") as profile:
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def dump_dom(html_file: Path, browser: str | None = None, timeout: float = 90.0) -> str:
    """The DOM after Chromium parsed and laid out the page (what a browser would show)."""
    browser = browser or chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed")
    proc = _run(browser, ["--dump-dom", html_file.resolve().as_uri()], timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError(f"chromium --dump-dom failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def screenshot(html_file: Path, out_png: Path, browser: str | None = None, size: str = "1280,1800",
               timeout: float = 90.0) -> Path:
    browser = browser or chromium()
    if browser is None:
        raise FileNotFoundError("chromium is not installed")
    out_png.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(browser, [f"--screenshot={out_png.resolve()}", f"--window-size={size}",
                          html_file.resolve().as_uri()], timeout)
    if not out_png.is_file() or out_png.stat().st_size < 1000:
        raise RuntimeError(f"chromium --screenshot wrote nothing ({proc.returncode}): {proc.stderr[-2000:]}")
    return out_png


def check_dom(dom: str, *, submissions: int, flagged: int, rules: list[str]) -> list[str]:
    """Problems found in the rendered DOM; empty when the page shows what it should."""
    problems = []
    if f"{submissions} submission" not in dom:
        problems.append(f"summary line does not say {submissions} submission(s)")
    if dom.count('class="card"') != 4:
        problems.append("expected four verdict cards")
    if "<svg" not in dom or 'aria-label="findings per rule"' not in dom:
        problems.append("the findings-per-rule chart is missing")
    for rule in rules:
        if f'data-rule="{rule}"' not in dom:
            problems.append(f"no finding block for {rule}")
    blocks = len(re.findall(r'<details class="sub"', dom))
    if blocks != flagged:
        problems.append(f"{blocks} submission blocks, expected {flagged}")
    if re.search(r"<script", dom, re.I):
        problems.append("the page contains a script element")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["fixtures"])
    ap.add_argument("--html", type=Path, default=None, help="where to write the report (default: a temp file)")
    ap.add_argument("--screenshot", type=Path, default=Path("render_check.png"))
    args = ap.parse_args(argv)
    browser = chromium()
    if browser is None:
        print("render_check: chromium is not installed; skipped", file=sys.stderr)
        return 77
    from hackscan import scan_paths
    from hackscan.output import render

    reports = scan_paths(args.paths)
    html_file = args.html or Path(tempfile.mkdtemp(prefix="hackscan-render-")) / "report.html"
    html_file.write_text(render(reports, "html"), encoding="utf-8")
    dom = dump_dom(html_file, browser)
    flagged = sum(1 for r in reports if r.findings or r.error or r.performance)
    rules = sorted({f.rule for r in reports for f in r.findings})
    problems = check_dom(dom, submissions=len(reports), flagged=flagged, rules=rules)
    png = screenshot(html_file, args.screenshot, browser)
    print(f"report: {html_file}\nscreenshot: {png}\nrendered DOM: {len(dom)} characters, "
          f"{len(reports)} submissions, {flagged} with findings, rules {', '.join(rules) or '-'}")
    for p in problems:
        print(f"FAIL: {p}")
    print("render check " + ("failed" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
