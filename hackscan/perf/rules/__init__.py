"""Performance rule units (HS6xx): one function per rule, in topic modules (``timing``,
``outputs``, ``memory``).  ``parent_side`` reads the workers' raw measurements into figures and
intervals; each unit decides its rule from them and returns a ``Decision`` (the TOML message's
``args``, the evidence, a severity), an ``Undecided`` (the point figure would decide, its interval
straddles the threshold: stated in the report, never raised) or ``None``.  Pure Python, like the
parent side: no torch, no numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...dynamic.rules import Decision, rule_id_of, rule_unit

__all__ = ["Decision", "Undecided", "rule_id_of", "rule_unit"]


@dataclass(frozen=True)
class Undecided:
    """A figure whose interval reaches across the rule's threshold: ``what`` was measured, ``ci``
    its interval (in the threshold's units), ``threshold`` the words for what it straddles."""

    what: str
    ci: tuple[float, float]
    threshold: str
