"""Configuration: ``[tool.hackscan]`` in pyproject.toml, overridden by command-line options.

Keys: ``select`` / ``ignore`` (rule ids, names or id prefixes), ``fail-on`` (error / warning /
info), ``mode`` (gate / audit), ``severity`` (a table of per-rule severity overrides),
``code-field`` / ``ref-field`` for JSONL datasets, ``harness`` (the scoring harness the dynamic stage
imitates when it loads and calls a candidate: ``kernelbench`` by default, see
``hackscan/dynamic/shared/profiles.py``), ``reject-class`` (the verdict classes that make a result fail the gate:
all by default, see ``hackscan/classes.py``), and per-rule option tables under ``[tool.hackscan.rules.HS123]``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .model import Severity

MODES = ("gate", "audit")


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: Severity = Severity.ERROR
    mode: str = "gate"
    severity: Mapping[str, Severity] = field(default_factory=dict)
    rule_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    code_field: str = "custom_code"
    ref_field: str = "ref_code"
    # the harness profile (dynamic/shared/profiles.py) the candidate is loaded and called under
    harness: str = "kernelbench"
    # the verdict classes (classes.py) whose findings reject a result; None: every class
    reject_classes: tuple[str, ...] | None = None
    source: str | None = None  # which file the settings came from

    def with_(self, **changes: Any) -> Config:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def options_for(self, rule_id: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
        merged = dict(defaults)
        merged.update(self.rule_options.get(rule_id, {}))
        return merged


def check_harness(name: Any) -> str:
    """The harness profile's name, normalised; a ConfigError naming the known ones otherwise."""
    from .dynamic.shared.profiles import PROFILES  # plain data, no torch

    if not isinstance(name, str) or name.strip().lower() not in PROFILES:
        raise ConfigError(f"harness must be one of {', '.join(sorted(PROFILES))} (got {name!r})")
    return name.strip().lower()


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in [start] + list(start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None, start: Path | None = None) -> Config:
    """Read ``[tool.hackscan]`` from ``path`` or the nearest pyproject.toml above ``start``."""
    if path is None:
        path = find_pyproject(start or Path.cwd())
        if path is None:
            return Config()
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    section = data.get("tool", {}).get("hackscan")
    if section is None:
        return Config()
    return parse_config(section, str(path))


def parse_config(section: Mapping[str, Any], source: str = "<config>") -> Config:
    def seq(key: str) -> tuple[str, ...]:
        v = section.get(key, ())
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{source}: {key} must be a list of rule ids")
        return tuple(v)

    try:
        fail_on = Severity.parse(section.get("fail-on", "error"))
        severity = {k.upper(): Severity.parse(v) for k, v in dict(section.get("severity", {})).items()}
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    mode = section.get("mode", "gate")
    if mode not in MODES:
        raise ConfigError(f"{source}: mode must be one of {', '.join(MODES)}")
    rules = section.get("rules", {})
    if not isinstance(rules, dict):
        raise ConfigError(f"{source}: [tool.hackscan.rules] must be a table")
    known = {"select", "ignore", "fail-on", "mode", "severity", "rules", "code-field", "ref-field", "harness",
             "reject-class"}
    unknown = set(section) - known
    if unknown:
        raise ConfigError(f"{source}: unknown keys {', '.join(sorted(unknown))}")
    try:
        harness = check_harness(section.get("harness", "kernelbench"))
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    reject = None
    if "reject-class" in section:
        from .classes import ClassError, parse_classes

        value = section["reject-class"]
        if not isinstance(value, (str, list)) or not all(isinstance(x, str) for x in (value if isinstance(value, list) else [value])):
            raise ConfigError(f"{source}: reject-class must be a list of verdict classes")
        try:
            reject = parse_classes(value, source)
        except ClassError as exc:
            raise ConfigError(str(exc)) from None
    return Config(
        select=seq("select"),
        ignore=seq("ignore"),
        fail_on=fail_on,
        mode=mode,
        severity=severity,
        rule_options={k.upper(): dict(v) for k, v in rules.items()},
        code_field=str(section.get("code-field", "custom_code")),
        ref_field=str(section.get("ref-field", "ref_code")),
        harness=harness,
        reject_classes=reject,
        source=source,
    )
