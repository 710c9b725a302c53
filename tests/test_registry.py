"""Lint the registry itself: unique ids and names, required metadata, fixtures for every rule."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from hackscan.annotations import parse_annotations
from hackscan.registry import ID_RE, NAME_RE, RegistryError, lint, load_registry, parse_rule, rules_dir

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
