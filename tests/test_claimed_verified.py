"""The claimed-versus-verified summary (KernelBench-Verified's table): geometric-mean claimed vs
verified speedups per baseline, verdict shares, the share needing more memory than the reference;
``--claimed-field`` picks which JSONL field is the claim."""

from __future__ import annotations

import json
import math

import pytest

from hackscan.model import Report, Verdict
from hackscan.output import render
from hackscan.output.verified import claimed_vs_verified, verified_speedup


def _r(path: str, verdict: Verdict, claim: float | None, speedup: dict | None, memory: float | None = None,
       valid: bool = True) -> Report:
    perf = None
    if speedup is not None:
        perf = {"measured": True, "speedup": speedup, "valid": valid}
        if memory is not None:
            perf["memory"] = {"ratio": memory}
    meta = {"claimed": {"score_default": claim}} if claim is not None else {}
    return Report(path=path, verdict=verdict, meta=meta, dynamic={"ran": True}, performance=perf)


GPU_RUN = [
    _r("a", Verdict.CLEAN, 2.0, {"eager_fp32": 4.0, "eager_tf32": 2.0, "compile": 1.0}, memory=0.5),
    _r("b", Verdict.SUSPICIOUS, 8.0, {"eager_fp32": 1.0, "eager_tf32": 0.5, "compile": 0.25}, memory=2.0),
    # a hack claims 10x and was timed at 5x: it is credited the reference's own speed
    _r("c", Verdict.HACK, 10.0, {"eager_fp32": 5.0, "eager_tf32": 5.0, "compile": 5.0}),
    # clean, but a timing the stage does not trust: no speedup credited either
    _r("d", Verdict.CLEAN, 4.0, {"eager_fp32": 9.0, "eager_tf32": 9.0, "compile": 9.0}, valid=False),
]


def test_the_table_credits_only_what_was_earned() -> None:
    t = claimed_vs_verified(GPU_RUN)
    rows = {r["baseline"]: r for r in t["speedup_geomean"]}
    assert rows["eager_fp32"]["n"] == 4
    assert rows["eager_fp32"]["verified"] == pytest.approx(math.prod([4.0, 1.0, 1.0, 1.0]) ** 0.25, rel=1e-3)
    assert rows["eager_tf32"]["verified"] == pytest.approx(math.prod([2.0, 0.5, 1.0, 1.0]) ** 0.25, rel=1e-3)
    assert rows["eager_fp32"]["claimed"] == pytest.approx((2 * 8 * 10 * 4) ** 0.25, rel=1e-3)
    assert t["claimed"] == {"n": 4, "fields": ["score_default"], "geomean": rows["eager_fp32"]["claimed"]}
    assert t["verdict_share"] == {"hack": 0.25, "suspicious": 0.25, "clean": 0.5, "error": 0.0}
    assert t["more_memory_than_reference"] == {"n": 2, "share": 0.5}


def test_a_cpu_run_invents_no_tf32_or_compile_column() -> None:
    cpu = [_r("a", Verdict.CLEAN, 2.0, {"eager_fp32": 3.0}), _r("c", Verdict.HACK, 9.0, None)]
    rows = {r["baseline"]: r for r in claimed_vs_verified(cpu)["speedup_geomean"]}
    assert rows["eager_fp32"]["n"] == 2 and rows["eager_fp32"]["verified"] == pytest.approx(3.0 ** 0.5, rel=1e-3)
    assert rows["eager_tf32"] == {"baseline": "eager_tf32", "label": "TF32", "n": 0, "verified": None, "claimed": None}
    # static only: nothing verified, so a hack is not credited 1.0x either
    static = Report(path="s", verdict=Verdict.HACK, meta={"claimed": {"score_default": 3.0}})
    assert verified_speedup(static, "eager_fp32") is None


def test_rejected_records_left_untimed_by_quick_mode_still_count_as_the_reference() -> None:
    """--perf quick does not time a candidate already rejected; the run still times the GPU
    baselines (``baselines_wanted``), so each such record is credited 1.0x against them."""
    skipped = {"measured": False, "reason": "already rejected (HS105)",
               "baselines_wanted": ["eager_fp32", "eager_tf32", "compile"]}
    run = [Report(path=p, verdict=Verdict.HACK, meta={"claimed": {"score_default": c}}, dynamic={"ran": True},
                  performance=dict(skipped)) for p, c in (("x", 2.0), ("y", 8.0))]
    rows = {r["baseline"]: r for r in claimed_vs_verified(run)["speedup_geomean"]}
    for key in ("eager_fp32", "eager_tf32", "compile"):
        assert rows[key]["n"] == 2 and rows[key]["verified"] == 1.0 and rows[key]["claimed"] == pytest.approx(4.0)
    # a CPU run's skipped records name strict fp32 only: no TF32 column is made up
    cpu = [Report(path="x", verdict=Verdict.HACK, dynamic={"ran": True},
                  performance=dict(skipped, baselines_wanted=["eager_fp32"]))]
    rows = {r["baseline"]: r for r in claimed_vs_verified(cpu)["speedup_geomean"]}
    assert rows["eager_fp32"]["n"] == 1 and rows["eager_tf32"]["n"] == 0


def test_every_view_shows_the_table_and_json_only_gains_a_field() -> None:
    doc = json.loads(render(GPU_RUN, "json"))
    assert set(doc["summary"]) >= {"submissions", "verdicts", "findings_by_rule", "findings_by_severity",
                                   "claimed_vs_verified"}
    text = render(GPU_RUN, "text")
    assert "claimed vs verified (geometric mean; 4 of 4 with a claim in score_default" in text
    assert "torch.compile" in text and "more memory than the reference: 50% of 2 measured" in text
    md = render(GPU_RUN, "markdown")
    assert "### Claimed versus verified (geometric mean)" in md and "| strict fp32 | 5.03x | 1.41x | 4 |" in md
    html = render(GPU_RUN, "html")
    assert 'id="claimed-vs-verified"' in html and "1.41x" in html
    # a run with no claim and no timing has nothing to put in it
    assert "claimed vs verified" not in render([Report(path="x", verdict=Verdict.CLEAN)], "text")


def test_claimed_field_names_the_claim_that_counts(tmp_path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    data = tmp_path / "runs.jsonl"
    data.write_text(json.dumps({"custom_code": "x = 1\n", "score_default": 3.0, "claimed_x": 7.5}) + "\n")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["scan", str(data), "--static", "--claimed-field", "claimed_x", "-f", "json",
                                   "-o", str(out), "--fail-on", "never", "--no-progress"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["results"][0]["meta"]["claimed_field"] == "claimed_x"
    assert doc["summary"]["claimed_vs_verified"]["claimed"] == {"n": 1, "fields": ["claimed_x"], "geomean": 7.5}
    res = CliRunner().invoke(app, ["scan", str(data), "--static", "-f", "json", "--fail-on", "never"])
    assert json.loads(res.stdout)["summary"]["claimed_vs_verified"]["claimed"]["fields"] == ["score_default"]
    res = CliRunner().invoke(app, ["scan", str(data), "--static", "--claimed-field", " "])
    assert res.exit_code == 2 and "--claimed-field needs a field name" in res.output


@pytest.mark.parametrize("args,said", [
    (["--claimed-field", "nosuchfield"], "no record of 2 has that field"),
    (["--claimed-field", "level_id"], "every record holds a whole number"),
    (["--claimed-field", "note"], "holds 'fast', not a positive number"),
    (["--claimed-field", "neg"], "holds -1.5, not a positive number"),
    (["--claimed-field", "claimed_x", "--claimed-field", "level_id"], "given 2 times"),
])
def test_a_claimed_field_that_cannot_be_a_speedup_is_refused(tmp_path, args, said) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    data = tmp_path / "runs.jsonl"
    data.write_text("".join(json.dumps({"custom_code": "x = 1\n", "claimed_x": 1.5 + i, "level_id": i + 1,
                                        "note": "fast", "neg": -1.5}) + "\n" for i in range(2)))
    res = CliRunner().invoke(app, ["scan", str(data), "--static", "--no-progress", *args])
    assert res.exit_code == 2 and said in res.output, res.output
    # the look-alike: a float field every record holds is taken
    ok = CliRunner().invoke(app, ["scan", str(data), "--static", "--no-progress", "--fail-on", "never",
                                  "--claimed-field", "claimed_x"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize("make", ["folder", "jsonl", "candidate"])
def test_nothing_to_scan_is_exit_2_with_one_line(tmp_path, make) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    path = {"folder": tmp_path / "none", "jsonl": tmp_path / "e.jsonl", "candidate": tmp_path / "c.py"}[make]
    if make == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("no python here\n")
    else:
        path.write_text("\n")
    res = CliRunner().invoke(app, ["scan", str(path), "--static", "--no-progress"])
    assert res.exit_code == 2 and "nothing to scan" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
