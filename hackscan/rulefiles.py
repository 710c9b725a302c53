"""Where the rule files are: the one fact both the registry and the verdict classes need.

Kept apart (and free of hackscan imports) so that ``classes`` can read a rule's class without
importing the registry, which itself imports ``classes``.
"""

from __future__ import annotations

from pathlib import Path


class RulesNotFound(RuntimeError):
    pass

def rules_dir() -> Path:
    """The folder holding the rule files, in a source checkout or an installed package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "rules", here / "rules"):
        if candidate.is_dir() and any(candidate.glob("HS*.toml")):
            return candidate
    try:  # installed: rules/ is shipped as the package hackscan.rules
        import importlib.resources as resources

        return Path(str(resources.files("hackscan.rules")))
    except (ModuleNotFoundError, TypeError) as exc:  # pragma: no cover - broken install
        raise RulesNotFound("cannot find the rules/ folder") from exc
