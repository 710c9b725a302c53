"""Reference reuse (class 12) and a missing ModelNew.

* HS111: ``class ModelNew(Model)`` without a forward of its own: it runs the reference.
* HS112: forward calls the reference: ``super().forward``, ``Model.forward(self, ...)``, a ``Model`` instance
  held in ``__init__`` and called in forward; importing the reference module.
* HS117: the file defines no ``ModelNew``: the harness cannot run it, and any other class analysed instead
  is a guess.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity


def inherits_reference_forward(ctx: ScanContext) -> Iterator[Hit]:
    """HS111."""
    facts = ctx.model_flow
    if facts is None or facts.model is None:
        return
    uses = [u for u in facts.reference_uses if u.kind == "inherits"]
    if not uses:
        return
    own_forward = facts.forward is not None and facts.forward.cls == facts.model_name
    if own_forward:
        return
    yield ctx.hit(ctx.at(facts.model), args={"model": facts.model_name, "base": uses[0].detail},
                  evidence={"bases": list(facts.bases)})


def calls_reference_model(ctx: ScanContext) -> Iterator[Hit]:
    """HS112."""
    facts = ctx.model_flow
    if facts is None or facts.model is None:
        return
    reported: set[int] = set()
    for u in facts.reference_uses:
        if u.kind in ("super-forward", "model-forward") and u.reachable:
            if u.line in reported:
                continue
            reported.add(u.line)
            yield ctx.hit(ctx.at(u.node), message=f"forward calls the reference implementation: {u.detail}",
                          evidence={"kind": u.kind}, severity=Severity.ERROR, confidence=Confidence.HIGH)
        elif u.kind == "instantiate" and u.reachable and u.line not in reported:
            reported.add(u.line)
            yield ctx.hit(ctx.at(u.node), message=f"forward builds the reference model: {u.detail}",
                          evidence={"kind": u.kind}, severity=Severity.ERROR, confidence=Confidence.HIGH)
    # a reference instance held by the model and called in forward
    for attr, h in facts.holders.items():
        if not _is_reference_class(h.cls):
            continue
        if facts.reads(attr):
            node = facts.attr_reads.get(attr, [h.node])[0]
            if getattr(node, "lineno", 0) in reported:
                continue
            reported.add(getattr(node, "lineno", 0))
            yield ctx.hit(ctx.at(node), message=f"forward runs a reference model held in self.{attr} "
                                                f"(built at line {h.line} as {h.cls}(...))",
                          evidence={"kind": "calls-instance", "attr": attr}, severity=Severity.ERROR,
                          confidence=Confidence.HIGH)
        elif h.line not in reported:
            reported.add(h.line)
            yield ctx.hit(ctx.at(h.node), message=f"__init__ builds the reference model ({h.cls}(...)) in "
                                                  f"self.{attr}; forward does not call it, but it should not be there",
                          evidence={"kind": "instantiate", "attr": attr}, severity=Severity.WARNING,
                          confidence=Confidence.MEDIUM)
    for u in facts.reference_uses:
        if u.kind == "import" and u.line not in reported:
            reported.add(u.line)
            yield ctx.hit(ctx.at(u.node), message=f"imports the reference problem: {u.detail}",
                          evidence={"kind": "import"}, severity=Severity.WARNING, confidence=Confidence.MEDIUM)
        elif u.kind == "instantiate" and not u.reachable and u.line not in reported and \
                not any(h.node is u.node for h in facts.holders.values()):
            reported.add(u.line)
            yield ctx.hit(ctx.at(u.node), message=f"builds the reference model: {u.detail}",
                          evidence={"kind": "instantiate"}, severity=Severity.WARNING, confidence=Confidence.MEDIUM)


def _is_reference_class(name: str) -> bool:
    return name == "Model" or name.endswith(".Model")


def no_modelnew(ctx: ScanContext) -> Iterator[Hit]:
    """HS117."""
    host = ctx.host
    if host is None:
        return
    if "ModelNew" in host.classes():
        return
    for node in host.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in targets):
                return
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "ModelNew"
                                                                    for a in node.names):
            return
    facts = ctx.model_flow
    other = f"; the analysis used class {facts.model_name} instead" if facts is not None and facts.model_name else ""
    yield Hit(line=1, column=1, args={"other": other},
              evidence={"analysed": facts.model_name if facts is not None else None})
