"""hackscan measure: recall, FP rate and stray findings against annotations, per rule and per class."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hackscan.annotations import parse_annotations
from hackscan.cli import app
from hackscan.measure.annotated import measure, render_measurement

ROOT = Path(__file__).resolve().parent.parent

UNRESOLVED = '''import base64
import torch
from torch.utils.cpp_extension import load_inline

src = base64.b64decode("I2luY2x1ZGUgPHRvcmNoL2V4dGVuc2lvbi5oPgo=").decode()
ext = load_inline(name="k", cpp_sources="", cuda_sources=src, functions=["f"]){ann}


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.f(x)
'''

RESOLVED = '''# legit-for: HS002
import torch
from torch.utils.cpp_extension import load_inline

src = "torch::Tensor f(torch::Tensor x) { return x; }"
ext = load_inline(name="k", cpp_sources=src, functions=["f"])


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return ext.f(x)
'''


def _corpus(tmp: Path) -> Path:
    (tmp / "hack_found.py").write_text(UNRESOLVED.format(ann="  # expect: HS002"))
    (tmp / "hack_todo.py").write_text(UNRESOLVED.format(ann="") + "# todo-expect: HS002\n")  # annotated on the wrong line
    (tmp / "ok_resolved.py").write_text(RESOLVED)
    # a legit look-alike that is flagged anyway
    (tmp / "ok_flagged.py").write_text("# legit-for: HS002\n" + UNRESOLVED.format(ann=""))
    return tmp


def test_recall_fp_rate_and_stray_per_rule(tmp_path: Path) -> None:
    m = measure([str(_corpus(tmp_path))])
    t = next(t for t in m.rules if t.key == "HS002")
    assert (t.positives, t.found) == (2, 1)  # the todo-expect site is a positive, and missed
    assert (t.legit_files, t.legit_flagged) == (2, 1)
    assert t.fp_rate == 0.5 and t.recall == 0.5
    # stray: fired in hack_todo.py on the load_inline line (not the annotated one) and in ok_flagged.py
    assert t.stray == 2 and t.precision == 1 / 3
    assert any("hack_todo.py" in m_ for m_ in t.missed)


def test_classes_add_up_their_rules(tmp_path: Path) -> None:
    m = measure([str(_corpus(tmp_path))])
    c19 = next(c for c in m.classes if c.key == "19")  # HS002's taxonomy is class 19, obfuscation
    assert (c19.positives, c19.found, c19.legit_files, c19.legit_flagged) == (2, 1, 2, 1)
    assert c19.label == "obfuscation"


def test_output_states_its_definitions(tmp_path: Path) -> None:
    m = measure([str(_corpus(tmp_path))])
    text = render_measurement(m)
    assert "FP rate = legit look-alike files" in text and "recall = annotated sites" in text
    assert "HS002" in text and "1/2 (50%)" in text
    md = render_measurement(m, "markdown")
    assert md.count("|---|") >= 2
    assert '"fp_rate": 0.5' in render_measurement(m, "json")


def test_fixture_tree_measure_agrees_with_the_fixture_test() -> None:
    """Misses and stray findings are exactly what the fixture test's comparison reports, file by file."""
    from hackscan.annotations import compare
    from hackscan.config import Config
    from hackscan.engine import StaticScanner
    from hackscan.inputs import Submission, discover
    from hackscan.model import Stage
    from hackscan.registry import load_registry

    static_ids = {r.id for r in load_registry() if r.stage is Stage.STATIC}
    m = measure([str(ROOT / "fixtures")])
    missed = stray = 0
    for sub in discover([str(ROOT / "fixtures")]):
        if not isinstance(sub, Submission):
            continue
        ann = parse_annotations(sub.code).restricted(static_ids)
        report = StaticScanner(Config(mode=ann.mode or "gate")).scan(sub)
        actual = {(f.rule, f.location.line) for f in report.findings if not f.suppressed and f.rule in static_ids}
        cmp = compare(sub.path, ann, actual)
        missed += len(cmp.missing) + len(cmp.known_missing)
        stray += len(cmp.unexpected) + len(cmp.known_spurious)
    assert sum(len(t.missed) for t in m.rules) == missed
    assert sum(t.stray for t in m.rules) == stray
    assert m.annotated_files == m.files


def test_measure_command(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["measure", str(_corpus(tmp_path)), "--show-misses"])
    assert res.exit_code == 0, res.output
    assert "hackscan measure: 4 files (4 annotated)" in res.output
    assert "missed      HS002" in res.output and "false alarm HS002" in res.output
    bad = CliRunner().invoke(app, ["measure", str(tmp_path / "nope")])
    assert bad.exit_code == 2
