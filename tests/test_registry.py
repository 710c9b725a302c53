"""Lint the registry itself: unique ids and names, required metadata, fixtures for every rule."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

from hackscan.annotations import parse_annotations
from hackscan.registry import ID_RE, NAME_RE, UNIT_HOMES, RegistryError, lint, load_registry, parse_rule, rules_dir

from .conftest import FIXTURES

REGISTRY = load_registry()


def _all_annotations():
    out = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".cu", ".cuh", ".cpp"):
            out.append((path, parse_annotations(path.read_text(encoding="utf-8", errors="replace"))))
    return out


ANNOTATIONS = _all_annotations()


def test_registry_loads_and_is_not_empty() -> None:
    assert len(REGISTRY) >= 6


def test_ids_and_names_are_unique_and_well_formed() -> None:
    ids = [r.id for r in REGISTRY]
    names = [r.name for r in REGISTRY]
    assert len(ids) == len(set(ids))
    assert len(names) == len(set(names))
    assert all(ID_RE.match(i) for i in ids)
    assert all(NAME_RE.match(n) for n in names)


def test_every_rule_file_is_named_for_its_id() -> None:
    for path in rules_dir().glob("*.toml"):
        data = tomllib.loads(path.read_text())
        assert path.stem == data["id"], path


@pytest.mark.parametrize("rule", list(REGISTRY), ids=[r.id for r in REGISTRY])
def test_rule_has_hack_and_legit_fixtures(rule) -> None:
    if rule.fixture_exempt:
        assert len(rule.fixture_exempt) > 20, "say why the rule has no fixture"
        return
    hacks = [p for p, a in ANNOTATIONS if rule.id in a.expected_rules]
    legit = [p for p, a in ANNOTATIONS if rule.id in a.legit_for]
    assert hacks, f"{rule.id}: no fixture annotated '# expect: {rule.id}'"
    assert legit, f"{rule.id}: no legitimate look-alike annotated '# legit-for: {rule.id}'"


@pytest.mark.parametrize("rule", list(REGISTRY), ids=[r.id for r in REGISTRY])
def test_check_function_resolves(rule) -> None:
    if rule.check:
        assert callable(rule.check_function())
    else:
        assert rule.emitted_by


@pytest.mark.parametrize("rule", [r for r in REGISTRY if r.check], ids=[r.id for r in REGISTRY if r.check])
def test_check_function_is_named_after_its_rule_and_filed_by_language(rule) -> None:
    assert lint(rule) == []


STAGED = [r for r in REGISTRY if r.stage.value in UNIT_HOMES]
PACKAGE = Path(__file__).resolve().parent.parent / "hackscan"
# the id families whose findings the dynamic and performance stages make
STAGE_ID = re.compile(r"^HS[456]\d\d$")


def _units() -> dict[str, list[str]]:
    """Every function marked ``@rule_unit`` in the unit packages: rule id -> its dotted paths."""
    out: dict[str, list[str]] = {}
    for home in UNIT_HOMES.values():
        pkg = importlib.import_module(home.rstrip("."))
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for name, obj in vars(mod).items():
                if callable(obj) and getattr(obj, "__module__", None) == mod.__name__ and hasattr(obj, "rule_id"):
                    out.setdefault(obj.rule_id, []).append(f"{mod.__name__}:{name}")
    return out


@pytest.mark.parametrize("rule", STAGED, ids=[r.id for r in STAGED])
def test_dynamic_and_performance_rules_name_a_unit_named_after_them_that_carries_their_id(rule) -> None:
    assert rule.unit, f"{rule.id}: no unit = ... in {rule.path}"
    assert lint(rule) == []


def test_every_unit_is_the_unit_of_its_rules_toml_and_each_rule_has_one() -> None:
    units = _units()
    assert {r.id for r in STAGED} == set(units), "a unit without a TOML, or a TOML without a unit"
    for rid, paths in units.items():
        assert paths == [REGISTRY.get(rid).unit], f"{rid}: units {paths}, the TOML names {REGISTRY.get(rid).unit}"


def _stage_id_literals(path: Path) -> list[tuple[int, str]]:
    """HS4xx-HS6xx ids spelled as string constants in code (docstrings and comments are prose)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs and STAGE_ID.match(n.value)]


def test_every_rule_id_the_stages_emit_comes_from_a_unit() -> None:
    # a finding is made under the id its unit carries (rules.found, _Emitter.decide): an id spelled
    # in the stages' own code is a decision made outside a unit, with no TOML to hold it to
    spelled = []
    for stage in ("dynamic", "perf"):
        for path in sorted((PACKAGE / stage).rglob("*.py")):
            if "rules" in path.relative_to(PACKAGE / stage).parts:
                continue
            spelled += [f"{path.relative_to(PACKAGE)}:{line} {value}" for line, value in _stage_id_literals(path)]
    assert spelled == []
    # and every id a unit carries is a rule of the registry with that unit
    for rid, paths in _units().items():
        assert rid in REGISTRY and REGISTRY.get(rid).unit in paths


def test_lint_names_a_misnamed_misfiled_or_misnumbered_unit() -> None:
    good = REGISTRY.get("HS503")
    assert lint(good) == []
    misnamed = dataclasses.replace(good, unit="hackscan.dynamic.rules.integrity:nondeterministic_output")
    problems = lint(misnamed)
    assert any("must be named after the rule: 'output_ignores_new_input_values'" in p for p in problems)
    assert any("carries the id 'HS504', not 'HS503'" in p for p in problems)
    misfiled = dataclasses.replace(REGISTRY.get("HS608"),
                                   unit="hackscan.dynamic.rules.integrity:memory_grows_per_call")
    assert any("must live under hackscan.perf.rules." in p for p in lint(misfiled))
    assert any("does not resolve" in p for p in lint(misfiled))
    missing = dataclasses.replace(good, unit=None)
    assert any("names its unit function" in p for p in lint(missing))


def test_lint_names_a_misnamed_or_misfiled_check() -> None:
    good = REGISTRY.get("HS101")
    misnamed = dataclasses.replace(good, check="hackscan.checks.python.guards:shape_guarded_shortcut")
    assert any("must be named after the rule: 'value_guarded_shortcut'" in p for p in lint(misnamed))
    misfiled = dataclasses.replace(REGISTRY.get("HS202"), check="hackscan.checks.triton:cuda_value_guard")
    assert any("must live under hackscan.checks.cuda." in p for p in lint(misfiled))
    missing = dataclasses.replace(good, check="hackscan.checks.python.guards:value_guarded_shortcut_typo",
                                  name="value-guarded-shortcut-typo")
    assert any("does not resolve" in p for p in lint(missing))


def test_annotations_name_existing_rules() -> None:
    known = {r.id for r in REGISTRY}
    for path, ann in ANNOTATIONS:
        names = {r for r, _ in ann.expected | ann.todo | ann.spurious} | set(ann.legit_for)
        assert names <= known, f"{path}: unknown rule ids {sorted(names - known)}"


def test_malformed_rules_are_rejected() -> None:
    good = tomllib.loads((rules_dir() / "HS002.toml").read_text())
    for key in ("severity", "message", "legit_example"):
        bad = dict(good)
        del bad[key]
        with pytest.raises(RegistryError):
            parse_rule(bad)
    with pytest.raises(RegistryError):
        parse_rule({**good, "id": "X1"})
    with pytest.raises(RegistryError):
        parse_rule({**good, "name": "Not Kebab"})
    with pytest.raises(RegistryError):
        parse_rule({**good, "severity": "fatal"})
