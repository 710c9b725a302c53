"""``hackscan new-rule``: scaffold into a copy of the checkout, then check what a contributor gets.

The copy's own ``hackscan`` package holds the new check, so loading and linting it runs in a child
interpreter with the copy first on ``sys.path``; writing and refusing run here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hackscan.annotations import parse_annotations
from hackscan.cli import app
from hackscan.scaffold import next_free_id

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("hackscan", "rules"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=ignore)
    # the one fixture folder the scaffold adds to (it has a reference.py); the others it creates
    shutil.copytree(ROOT / "fixtures" / "python" / "timing", tmp_path / "fixtures" / "python" / "timing")
    return tmp_path


def _run(root: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["new-rule", *args, "--root", str(root)])
    return res.exit_code, res.output


def _in_copy(root: Path, code: str) -> dict:
    """Run ``code`` in a child interpreter that imports the copy's hackscan; it prints one JSON line."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


LINT_AND_SCAN = """
    import json, hackscan
    from hackscan.annotations import compare, parse_annotations
    from hackscan.config import Config
    from hackscan.engine import StaticScanner
    from hackscan.inputs import Submission, discover
    from hackscan.registry import lint, load_registry
    assert hackscan.__file__.startswith({root!r}), hackscan.__file__
    reg = load_registry()
    out = {{"lint": {{i: lint(reg.get(i)) for i in {ids!r}}}, "scan": {{}}}}
    scanner = StaticScanner(Config(mode="gate"))
    for sub in discover([{fixtures!r}]):
        if isinstance(sub, Submission) and any(s in sub.path for s in {stems!r}):
            rep = scanner.scan(sub)
            actual = {{(f.rule, f.location.line) for f in rep.findings}}
            cmp = compare(sub.path, parse_annotations(sub.code), actual)
            out["scan"][sub.path.rsplit("/", 1)[1]] = [sorted(actual), cmp.ok]
    print(json.dumps(out))
"""


def test_scaffold_writes_a_rule_that_loads_lints_and_fails_its_fixture_until_the_check_is_written(checkout):
    code, out = _run(checkout, "pinned-memory-escape", "--language", "python", "--topic", "timing",
                     "--severity", "warning", "--class", "9")
    assert code == 0, out
    # the family's next free id: one past the highest, or the lowest gap once HS199 is taken
    m = re.search(r"wrote (HS1\d\d) pinned-memory-escape", out)
    assert m and "next:" in out, out
    new_id = m.group(1)
    assert new_id == next_free_id(ROOT, "python") and not (ROOT / "rules" / f"{new_id}.toml").exists()
    code, out = _run(checkout, "cuda-stale-texture", "-l", "cuda", "-t", "textures", "--id", "HS250", "--class", "7")
    assert code == 0, out
    code, out = _run(checkout, "triton-atomic-skip", "-l", "triton", "--class", "15")
    assert code == 0, out

    toml = (checkout / "rules" / f"{new_id}.toml").read_text()
    assert 'check = "hackscan.checks.python.timing:pinned_memory_escape"' in toml
    assert 'severity = "warning"' in toml and "taxonomy = [9]" in toml
    assert 'check = "hackscan.checks.cuda.textures:cuda_stale_texture"' in (checkout / "rules/HS250.toml").read_text()
    assert 'check = "hackscan.checks.triton:triton_atomic_skip"' in (checkout / "rules/HS308.toml").read_text()
    # appended to the existing topic module, which keeps its checks; a new topic gets a module of its own
    timing = (checkout / "hackscan/checks/python/timing.py").read_text()
    assert "def unjoined_side_stream(" in timing and timing.rstrip().endswith("yield from ()")
    assert (checkout / "fixtures/cuda/textures/reference.py").is_file()

    hack = checkout / "fixtures/python/timing/hack_pinned_memory_escape.py"
    ok = checkout / "fixtures/python/timing/ok_pinned_memory_escape.py"
    ann = parse_annotations(hack.read_text())
    (line,) = [ln for r, ln in ann.expected if r == new_id]
    assert ann.severities == {(new_id, line): "warning"}
    assert parse_annotations(ok.read_text()).legit_for == {new_id}
    cuda_hack = parse_annotations((checkout / "fixtures/cuda/textures/hack_stale_texture.py").read_text())
    assert {r for r, _ in cuda_hack.expected} == {"HS250"}

    stems = ["pinned_memory_escape", "stale_texture", "atomic_skip"]
    res = _in_copy(checkout, LINT_AND_SCAN.format(root=str(checkout), ids=[new_id, "HS250", "HS308"],
                                                  fixtures=str(checkout / "fixtures"), stems=stems))
    assert res["lint"] == {new_id: [], "HS250": [], "HS308": []}
    # the templates are clean candidates: nothing fires, so each hack fixture misses only its own rule
    assert all(found == [] for found, _ in res["scan"].values()), res["scan"]
    assert not res["scan"]["hack_pinned_memory_escape.py"][1] and res["scan"]["ok_pinned_memory_escape.py"][1]

    # fill the check in (here: flag the annotated line of any file that is not a look-alike) and it passes
    filled = timing.replace("    yield from ()", textwrap.indent(textwrap.dedent("""\
        code = ctx.submission.code
        if "legit-for" not in code:
            for n, text in enumerate(code.splitlines(), start=1):
                if "relu_ext.relu_out(x, out)" in text:
                    yield Hit(line=n)"""), "    "))
    (checkout / "hackscan/checks/python/timing.py").write_text(filled)
    res = _in_copy(checkout, LINT_AND_SCAN.format(root=str(checkout), ids=[new_id], fixtures=str(checkout / "fixtures"),
                                                  stems=["pinned_memory_escape"]))
    assert res["scan"]["hack_pinned_memory_escape.py"] == [[[new_id, line]], True]
    assert res["scan"]["ok_pinned_memory_escape.py"] == [[], True]


@pytest.mark.parametrize("args, message", [
    (["value-guarded-shortcut", "-l", "python", "-t", "guards"], "name 'value-guarded-shortcut' is already a rule's name"),
    (["some-new-guard", "-l", "python", "-t", "guards", "--id", "HS101"], "id HS101 is already taken"),
    (["some-new-guard", "-l", "python", "-t", "guards", "--id", "HS250"], "in the HS1xx family"),
    (["stale-texture", "-l", "cuda", "-t", "textures"], "a cuda rule's name starts with 'cuda-'"),
    (["triton-thing", "-l", "triton", "-t", "kernels"], "leave out --topic"),
    (["some-new-guard", "-l", "python"], "needs --topic"),
    (["some-new-guard", "-l", "python", "-t", "guards"], "needs --class N"),
    (["some-new-guard", "-l", "python", "-t", "common"], "topic 'common' must be"),
    (["Not_Kebab", "-l", "python", "-t", "guards"], "is not kebab-case"),
    (["some-new-guard", "-l", "rust", "-t", "guards"], "language 'rust'"),
    (["some-new-guard", "-l", "python", "-t", "guards", "-s", "fatal"], "severity 'fatal'"),
])
def test_refusals_are_one_line_and_write_nothing(checkout, args, message) -> None:
    before = sorted(p for p in checkout.rglob("*") if "__pycache__" not in p.parts)
    code, out = _run(checkout, *args)
    assert code == 2
    assert out.strip().splitlines() == [f"hackscan: error: {out.strip().split('error: ', 1)[1]}"]
    assert message in out
    assert sorted(p for p in checkout.rglob("*") if "__pycache__" not in p.parts) == before


def test_an_existing_fixture_or_function_is_refused(checkout) -> None:
    (checkout / "fixtures/python/timing/hack_some_new_guard.py").write_text("# taken\n")
    code, out = _run(checkout, "some-new-guard", "-l", "python", "-t", "timing", "--class", "9")
    assert code == 2 and "hack_some_new_guard.py already exists" in out
    assert sorted(p.name for p in (checkout / "rules").glob("HS*.toml")) == sorted(p.name for p in (ROOT / "rules").glob("HS*.toml"))
    with (checkout / "hackscan/checks/python/timing.py").open("a") as f:
        f.write("\n\ndef other_new_guard(ctx):\n    return iter(())\n")
    code, out = _run(checkout, "other-new-guard", "-l", "python", "-t", "timing", "--class", "9")
    assert code == 2 and "already defines other_new_guard()" in out


@pytest.mark.parametrize("taken, expected", [
    ([], "HS101"), (["HS101", "HS102"], "HS103"), (["HS101", "HS150"], "HS151"),
    # once HS199 is taken (the meta rule), the lowest gap
    (["HS101", "HS102", "HS104", "HS199"], "HS103"),
])
def test_next_free_id_is_one_past_the_highest_or_the_lowest_gap(tmp_path, taken, expected) -> None:
    (tmp_path / "rules").mkdir()
    for rid in taken:
        (tmp_path / "rules" / f"{rid}.toml").write_text(f'id = "{rid}"\nname = "n{rid}"\n')
    (tmp_path / "rules" / "HS201.toml").write_text('id = "HS201"\nname = "cuda-x"\n')
    assert next_free_id(tmp_path, "python") == expected


def test_outside_a_checkout_it_says_so(tmp_path) -> None:
    code, out = _run(tmp_path, "some-new-guard", "-l", "python", "-t", "guards")
    assert code == 2 and "not a hackscan source checkout" in out


# ----------------------------------------------------------------------------------- stage rules
STAGE_CHECK = """
    import json, importlib, pkgutil, hackscan
    from hackscan.annotations import compare, parse_annotations
    from hackscan.config import Config
    from hackscan.engine import StaticScanner
    from hackscan.inputs import Submission, discover
    from hackscan.registry import UNIT_HOMES, lint, load_registry
    assert hackscan.__file__.startswith({root!r}), hackscan.__file__
    reg = load_registry()
    units = {{}}
    for home in UNIT_HOMES.values():
        pkg = importlib.import_module(home.rstrip("."))
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(pkg.__name__ + "." + info.name)
            for name, obj in vars(mod).items():
                if callable(obj) and getattr(obj, "__module__", None) == mod.__name__ and hasattr(obj, "rule_id"):
                    units[obj.rule_id] = mod.__name__ + ":" + name
    staged = {{r.id: r.unit for r in reg if r.stage.value in UNIT_HOMES}}
    out = {{"lint": {{i: lint(reg.get(i)) for i in {ids!r}}}, "units_match": units == staged, "scan": {{}}}}
    static = {{r.id for r in reg if r.stage.value == "static"}}
    scanner = StaticScanner(Config(mode="gate"))
    for sub in discover([{fixtures!r}]):
        if isinstance(sub, Submission) and any(s in sub.path for s in {stems!r}):
            actual = {{(f.rule, f.location.line) for f in scanner.scan(sub).findings}}
            ann = parse_annotations(sub.code).restricted(static)
            out["scan"][sub.path.rsplit("/", 1)[1]] = compare(sub.path, ann, actual).ok
    print(json.dumps(out))
"""


def _pytest_in_copy(root: Path, *tests: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=root, env=env,
                         capture_output=True, text=True, timeout=120)
    return out.stdout


def test_stage_scaffold_writes_a_unit_its_toml_names_with_fixtures_and_a_test_that_fails_until_written(checkout):
    code, out = _run(checkout, "stale-scratch-output", "--stage", "dynamic", "-t", "integrity", "--id", "HS511",
                     "--class", "7")
    assert code == 0, out
    assert "wrote HS511 stale-scratch-output (dynamic)" in out and "report(self.make, j.findings" in out
    code, out = _run(checkout, "cache-warms-only-when-timed", "--stage", "perf", "-t", "caching", "--class", "8",
                     "-s", "warning")
    assert code == 0, out
    perf_id = re.search(r"wrote (HS6\d\d) cache-warms-only-when-timed", out).group(1)
    highest = max(int(p.stem[2:]) for p in (ROOT / "rules").glob("HS6*.toml"))
    assert perf_id == f"HS{highest + 1}"

    toml = (checkout / "rules/HS511.toml").read_text()
    assert 'unit = "hackscan.dynamic.rules.integrity:stale_scratch_output"' in toml
    assert 'stage = "dynamic"' in toml and 'emitted_by = "dynamic"' in toml and "taxonomy = [7]" in toml
    perf_toml = (checkout / "rules" / f"{perf_id}.toml").read_text()
    assert 'unit = "hackscan.perf.rules.caching:cache_warms_only_when_timed"' in perf_toml
    assert 'stage = "performance"' in perf_toml and 'severity = "warning"' in perf_toml
    # appended to the existing topic module, which keeps its units; a new topic gets a module of its own
    integrity = (checkout / "hackscan/dynamic/rules/integrity.py").read_text()
    assert "def reads_stale_memory(" in integrity and '@rule_unit("HS511")\ndef stale_scratch_output(' in integrity
    assert (checkout / "hackscan/perf/rules/caching.py").is_file()
    hack = checkout / "fixtures/dynamic/stale_scratch_output/hack_stale_scratch_output.py"
    ann = parse_annotations(hack.read_text())
    (line,) = [ln for r, ln in ann.expected if r == "HS511"]
    assert hack.read_text().splitlines()[line - 1].lstrip().startswith("def forward")
    ok = checkout / "fixtures/dynamic/stale_scratch_output/ok_stale_scratch_output.py"
    assert parse_annotations(ok.read_text()).legit_for == {"HS511"}
    assert (checkout / "fixtures/perf/cache_warms_only_when_timed/reference.py").is_file()

    stems = ["stale_scratch_output", "cache_warms_only_when_timed"]
    res = _in_copy(checkout, STAGE_CHECK.format(root=str(checkout), ids=["HS511", perf_id],
                                                fixtures=str(checkout / "fixtures"), stems=stems))
    # the registry lint and the naming test hold at once; the fixtures' static annotations are right
    assert res["lint"] == {"HS511": [], perf_id: []} and res["units_match"]
    assert all(res["scan"].values()) and len(res["scan"]) == 4, res["scan"]

    # the unit's test stub: the look-alike passes, the hack fails until the unit decides something
    tests = ["tests/test_rule_hs511.py", f"tests/test_rule_{perf_id.lower()}.py"]
    assert "2 failed, 2 passed" in _pytest_in_copy(checkout, *tests)
    filled = integrity.replace('''    # rule fires; a unit that returns None finds nothing, so the test stub fails until it does
    return None''', '''    # rule fires; a unit that returns None finds nothing, so the test stub fails until it does
    if facts.get("stale"):
        return Decision(message="stale", evidence={"seed": seed})
    return None''')
    (checkout / "hackscan/dynamic/rules/integrity.py").write_text(filled)
    test = checkout / "tests/test_rule_hs511.py"
    test.write_text(test.read_text().replace("HACK_FACTS: dict = {}", 'HACK_FACTS: dict = {"stale": True}'))
    assert "2 passed" in _pytest_in_copy(checkout, "tests/test_rule_hs511.py")


@pytest.mark.parametrize("args, message", [
    (["some-new-check", "--stage", "dynamic", "--class", "7"], "a dynamic rule needs --topic"),
    (["some-new-check", "--stage", "dynamic", "-t", "integrity"], "needs --class N"),
    (["some-new-check", "--stage", "dynamic", "-t", "integrity", "--class", "7", "--id", "HS699"],
     "in the HS4xx or HS5xx family"),
    (["some-new-check", "--stage", "perf", "-t", "timing", "--class", "9", "--id", "HS599"], "in the HS6xx family"),
    (["mutates-inputs", "--stage", "dynamic", "-t", "integrity", "--class", "7"], "already a rule's name"),
    (["some-new-check", "--stage", "dynamic", "-t", "integrity", "--class", "7", "--id", "HS503"], "already taken"),
    (["some-new-check", "--stage", "dynamic", "-t", "integrity", "-l", "python", "--class", "7"], "has no --language"),
    (["some-new-check", "--stage", "runtime", "-t", "integrity", "--class", "7"], "stage 'runtime'"),
    (["some-new-check", "-t", "guards", "--class", "1"], "a static rule needs --language"),
])
def test_stage_scaffold_refusals_are_one_line_and_write_nothing(checkout, args, message) -> None:
    test_refusals_are_one_line_and_write_nothing(checkout, args, message)


def test_stage_scaffold_refuses_an_existing_unit_or_test(checkout) -> None:
    code, out = _run(checkout, "output-ignores-new-input-values-2", "--stage", "dynamic", "-t", "integrity",
                     "--class", "7", "--id", "HS511")
    assert code == 0, out
    code, out = _run(checkout, "reads-stale-memory-again", "--stage", "dynamic", "-t", "integrity", "--class", "7",
                     "--id", "HS512")
    assert code == 0, out
    (checkout / "tests/test_rule_hs513.py").write_text("# taken\n")
    code, out = _run(checkout, "third-check", "--stage", "dynamic", "-t", "integrity", "--class", "7", "--id", "HS513")
    assert code == 2 and "tests/test_rule_hs513.py already exists" in out
    with (checkout / "hackscan/perf/rules/timing.py").open("a") as f:
        f.write("\n\ndef fourth_check(o, facts):\n    return None\n")
    code, out = _run(checkout, "fourth-check", "--stage", "perf", "-t", "timing", "--class", "9")
    assert code == 2 and "already defines fourth_check()" in out
