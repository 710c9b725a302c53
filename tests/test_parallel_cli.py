"""The command's --jobs and progress bar: same output as one job, and a bar only on a terminal."""

from __future__ import annotations

import io
from pathlib import Path

from typer.testing import CliRunner

from hackscan.cli import ProgressBar, app

ROOT = Path(__file__).resolve().parent.parent


def test_jobs_output_equals_serial_output(tmp_path: Path) -> None:
    runner = CliRunner()
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}.json"
        res = runner.invoke(app, [str(ROOT / "fixtures"), "--static", "--jobs", jobs, "-f", "json", "-o", str(out)])
        assert res.exit_code in (0, 1), res.output
        outs.append(out.read_text())
    assert outs[0] == outs[1]


def test_no_progress_bar_when_stderr_is_not_a_terminal() -> None:
    res = CliRunner().invoke(app, [str(ROOT / "fixtures"), "--static", "-j", "2", "-f", "json"])
    assert "\x1b[K" not in res.output and "[####" not in res.output


def test_progress_bar_draws_and_clears() -> None:
    buf = io.StringIO()
    bar = ProgressBar(buf, width=10, min_interval=0.0)
    for i in range(1, 5):
        bar(i, 4, f"data.jsonl:{i}")
    bar.close()
    text = buf.getvalue()
    assert "[##########] 4/4" in text and "data.jsonl:4" in text
    assert text.endswith("\r\x1b[K")


def test_progress_bar_throttles_redraws() -> None:
    buf = io.StringIO()
    bar = ProgressBar(buf, min_interval=3600)
    for i in range(1, 1001):
        bar(i, 1000, "x.py")
    assert bar.drawn == 2  # the first call and the last one


def test_html_and_markdown_formats_from_the_command(tmp_path: Path) -> None:
    for fmt in ("html", "markdown"):
        out = tmp_path / f"r.{fmt}"
        res = CliRunner().invoke(app, [str(ROOT / "fixtures"), "--static", "-f", fmt, "-o", str(out)])
        assert res.exit_code in (0, 1), res.output
        text = out.read_text()
        assert "Findings per rule" in text
