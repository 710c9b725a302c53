"""The rule registry: one TOML file per rule in the top-level ``rules/`` folder.

The folder *is* the registry (semgrep-rules, ruff): nothing else lists rules.  A rule file holds the
id, the kebab-case name, severity, confidence, the message, the docs with a hack example and a
legitimate look-alike, and the dotted path of the one check function that implements it (for a
dynamic or performance rule, ``unit``: the function in ``hackscan/dynamic/rules/`` or
``hackscan/perf/rules/`` that decides it from the stage's facts).  The check function is imported
only when the rule runs, so listing rules costs no analysis imports.
"""

from __future__ import annotations

import functools
import importlib
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .classes import ClassError, class_for
from .model import Confidence, Severity, Stage
from .rulefiles import RulesNotFound, rules_dir

ID_RE = re.compile(r"^HS\d{3}$")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
LANGUAGES = frozenset({"python", "cuda", "cpp", "triton", "any"})

# Id families, so that an id tells the area at a glance (bandit's B1xx..B7xx).
FAMILIES: Mapping[str, str] = {
    "HS0": "meta: parsing, extraction, suppressions",
    "HS1": "Python host code",
    "HS2": "CUDA / C++ extension code",
    "HS3": "Triton kernels",
    "HS4": "dynamic: correctness on hidden inputs",
    "HS5": "dynamic: integrity probes",
    "HS6": "performance and memory",
}

REQUIRED = ("id", "name", "severity", "confidence", "stage", "languages", "taxonomy", "message",
            "summary", "description", "hack_example", "legit_example")


class RegistryError(Exception):
    """A rule file is malformed.  Raised at load time so a bad rule never half-runs."""


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: Severity
    confidence: Confidence
    stage: Stage
    languages: tuple[str, ...]
    taxonomy: tuple[int, ...]
    message: str
    summary: str
    description: str
    hack_example: str
    legit_example: str
    check: str | None = None
    # rules whose findings are produced by a stage itself rather than by a check function
    # (a syntax error found by the engine, a failed probe found by the dynamic runner)
    emitted_by: str | None = None
    # a dynamic or performance rule's unit: the function that decides it from the stage's facts
    # (``hackscan/dynamic/rules/<topic>.py:<function>``, ``hackscan/perf/rules/<topic>.py:<function>``)
    unit: str | None = None
    requires_reference: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    # why a rule has no fixture of its own (only for rules no input can trigger on purpose)
    fixture_exempt: str | None = None
    path: str = ""
    # what kind of rejection a finding of this rule stands for (hackscan/classes.py): the TOML's
    # ``verdict_class`` where given, else the class of the first taxonomy class
    verdict_class: str = "meta"

    @property
    def family(self) -> str:
        return FAMILIES.get(self.id[:3], "other")

    def check_function(self) -> Callable[..., Any]:
        if not self.check:
            raise RegistryError(f"{self.id} has no check function")
        return _resolve(self.check)

    def unit_function(self) -> Callable[..., Any]:
        if not self.unit:
            raise RegistryError(f"{self.id} has no unit function")
        return _resolve(self.unit)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "severity": self.severity.value,
            "confidence": self.confidence.value,
            "stage": self.stage.value,
            "languages": list(self.languages),
            "taxonomy": list(self.taxonomy),
            "class": self.verdict_class,
            "summary": self.summary,
            "requires_reference": self.requires_reference,
        }


@functools.cache
def _resolve(dotted: str) -> Callable[..., Any]:
    module, _, attr = dotted.partition(":")
    if not attr:
        raise RegistryError(f"check {dotted!r} must be 'package.module:function'")
    return getattr(importlib.import_module(module), attr)


class Registry:
    """An immutable set of rules, indexed by id and by name."""

    def __init__(self, rules: Iterable[Rule]):
        ordered = sorted(rules, key=lambda r: r.id)
        self._by_id = {r.id: r for r in ordered}
        self._by_name = {r.name: r for r in ordered}

    def __iter__(self):
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, key: str) -> bool:
        return key in self._by_id or key in self._by_name

    def get(self, key: str) -> Rule:
        """Look a rule up by id (``HS101``) or name (``value-guarded-shortcut``)."""
        rule = self._by_id.get(key.upper()) or self._by_name.get(key.lower())
        if rule is None:
            raise KeyError(key)
        return rule

    def select(self, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[Rule]:
        """Rules matching ``select`` prefixes (all when empty) and none of ``ignore``.

        Prefixes work like ruff's selectors: ``HS1`` picks the whole Python host family.
        """
        sel = [s.upper() for s in select if s]
        ign = [s.upper() for s in ignore if s]

        def match(rule: Rule, pats: list[str]) -> bool:
            return any(rule.id.startswith(p) or rule.name.upper() == p for p in pats)

        return [r for r in self if (not sel or match(r, sel)) and not match(r, ign)]


# Where a check function lives, by the rule's language: a newcomer finds a rule's code from its id
# and name alone (checks/<language>/<hack class>.py, function named after the rule).
CHECK_HOMES: Mapping[str, tuple[str, ...]] = {
    "python": ("hackscan.checks.python.",),
    "cuda": ("hackscan.checks.cuda.",),
    "cpp": ("hackscan.checks.cuda.",),
    "triton": ("hackscan.checks.triton",),
    "any": ("hackscan.checks.",),
}


# Where a dynamic or performance rule's unit lives, by the stage that emits it.
UNIT_HOMES: Mapping[str, str] = {
    "dynamic": "hackscan.dynamic.rules.",
    "performance": "hackscan.perf.rules.",
}


def check_name(rule_name: str) -> str:
    """The check function's name for a rule name: ``value-guarded-shortcut`` -> ``value_guarded_shortcut``."""
    return rule_name.replace("-", "_")


def lint(rule: Rule) -> list[str]:
    """What is wrong with how a rule's check is filed (empty when nothing): the function must be named
    after the rule and live under its language's folder (meta rules, ``HS0xx``, in ``checks/meta.py``).
    Imports the check module, so it is a test-time lint, not part of loading the registry."""
    if rule.stage.value in UNIT_HOMES or rule.unit:
        return _lint_unit(rule)
    if not rule.check:
        return []
    module, _, attr = rule.check.partition(":")
    problems = []
    want = check_name(rule.name)
    if attr != want:
        problems.append(f"{rule.id}: check function {attr!r} must be named after the rule: {want!r}")
    homes = ("hackscan.checks.meta",) if rule.id.startswith("HS0") else CHECK_HOMES[rule.languages[0]]
    if not module.startswith(homes):
        problems.append(f"{rule.id}: check module {module!r} must live under {' or '.join(homes)}")
    try:
        func = _resolve(rule.check)
    except (ImportError, AttributeError) as exc:
        return [*problems, f"{rule.id}: check {rule.check!r} does not resolve: {exc}"]
    if getattr(func, "__name__", None) != attr:  # an alias (`x = other_check`) hides the real function
        problems.append(f"{rule.id}: {rule.check!r} is an alias of {getattr(func, '__name__', func)!r}")
    if not callable(func):
        problems.append(f"{rule.id}: {rule.check!r} is not callable")
    return problems


def _lint_unit(rule: Rule) -> list[str]:
    """The same filing rules for a dynamic or performance rule's unit, and one more: the function
    carries the rule's id (``@rule_unit("HS503")``), which is the id its findings are made under."""
    home = UNIT_HOMES.get(rule.stage.value)
    if home is None:
        return [f"{rule.id}: a {rule.stage.value} rule has no unit (units are for {', '.join(UNIT_HOMES)} rules)"]
    if not rule.unit:
        return [f"{rule.id}: a {rule.stage.value} rule names its unit function: unit = \"{home}<topic>:"
                f"{check_name(rule.name)}\""]
    module, _, attr = rule.unit.partition(":")
    problems = []
    want = check_name(rule.name)
    if attr != want:
        problems.append(f"{rule.id}: unit function {attr!r} must be named after the rule: {want!r}")
    if not module.startswith(home):
        problems.append(f"{rule.id}: unit module {module!r} must live under {home}")
    try:
        func = _resolve(rule.unit)
    except (ImportError, AttributeError, RegistryError) as exc:
        return [*problems, f"{rule.id}: unit {rule.unit!r} does not resolve: {exc}"]
    if getattr(func, "__name__", None) != attr:
        problems.append(f"{rule.id}: {rule.unit!r} is an alias of {getattr(func, '__name__', func)!r}")
    if getattr(func, "rule_id", None) != rule.id:
        problems.append(f"{rule.id}: {rule.unit!r} carries the id {getattr(func, 'rule_id', None)!r}, not {rule.id!r} "
                        f"(mark it @rule_unit({rule.id!r}))")
    return problems


def parse_rule(data: Mapping[str, Any], path: str = "") -> Rule:
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise RegistryError(f"{path}: missing {', '.join(missing)}")
    rid = str(data["id"])
    if not ID_RE.match(rid):
        raise RegistryError(f"{path}: id {rid!r} is not of the form HS123")
    if Path(path).name and Path(path).stem != rid and path:
        raise RegistryError(f"{path}: file name must be {rid}.toml")
    name = str(data["name"])
    if not NAME_RE.match(name):
        raise RegistryError(f"{path}: name {name!r} is not kebab-case")
    langs = tuple(data["languages"])
    bad = [lang for lang in langs if lang not in LANGUAGES]
    if bad or not langs:
        raise RegistryError(f"{path}: unknown languages {bad}")
    try:
        severity = Severity.parse(data["severity"])
        confidence = Confidence.parse(data["confidence"])
        stage = Stage(data["stage"])
    except ValueError as exc:
        raise RegistryError(f"{path}: {exc}") from None
    taxonomy = tuple(int(t) for t in data["taxonomy"])
    if any(t < 0 or t > 20 for t in taxonomy):
        raise RegistryError(f"{path}: taxonomy classes run 1..20 (0 for meta rules)")
    for key in ("summary", "description", "hack_example", "legit_example", "message"):
        if not str(data[key]).strip():
            raise RegistryError(f"{path}: {key} is empty")
    override = data.get("verdict_class")
    try:
        verdict_class = class_for(taxonomy, str(override) if override is not None else None)
    except ClassError as exc:
        raise RegistryError(f"{path}: {exc}") from None
    check = data.get("check")
    emitted_by = data.get("emitted_by")
    if not check and not emitted_by:
        raise RegistryError(f"{path}: a rule needs a check function or says which stage emits it (emitted_by)")
    return Rule(
        id=rid,
        name=name,
        severity=severity,
        confidence=confidence,
        stage=stage,
        languages=langs,
        taxonomy=taxonomy,
        message=str(data["message"]).strip(),
        summary=str(data["summary"]).strip(),
        description=str(data["description"]).strip(),
        hack_example=str(data["hack_example"]).strip("\n"),
        legit_example=str(data["legit_example"]).strip("\n"),
        check=str(check) if check else None,
        emitted_by=str(emitted_by) if emitted_by else None,
        unit=str(data["unit"]) if data.get("unit") else None,
        requires_reference=bool(data.get("requires_reference", False)),
        options=dict(data.get("options", {})),
        fixture_exempt=str(data["fixture_exempt"]) if data.get("fixture_exempt") else None,
        path=path,
        verdict_class=verdict_class,
    )


def load_registry(directory: Path | None = None) -> Registry:
    if directory is None:
        return _default_registry()
    return _load(Path(directory))


@functools.lru_cache(maxsize=1)
def _default_registry() -> Registry:
    try:
        return _load(rules_dir())
    except RulesNotFound as exc:  # pragma: no cover - broken install
        raise RegistryError(str(exc)) from exc


def _load(directory: Path) -> Registry:
    rules: list[Rule] = []
    seen_names: dict[str, str] = {}
    for path in sorted(directory.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise RegistryError(f"{path}: {exc}") from None
        rule = parse_rule(data, str(path))
        if rule.name in seen_names:
            raise RegistryError(f"{path}: name {rule.name} already used by {seen_names[rule.name]}")
        seen_names[rule.name] = rule.id
        rules.append(rule)
    return Registry(rules)
