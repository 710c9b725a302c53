"""Harness detection (TAXONOMY class 11): behaving differently when checked than when timed.

The correctness check and the timed runs call the same ``forward``; a candidate that can tell them
apart can be right when checked and fast (and wrong) when timed.  The ways to tell are few: walk
the caller's frames, read the environment or the command line, or count calls (warm-up detection).
Reading them is not the problem; a *branch* on them is.  Each check here finds the read, then
follows its value through local names (and one level of helper functions) to the condition of an
``if`` / ``while`` / ternary.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from ...context import Hit, ScanContext
from ...model import Confidence, Severity
from ...python.indirection import lookup, namespace_writes, table_elements
from ...python.patterns import MiscFacts, object_names
from ...python.resolve import dotted_name

FRAME_CALLS = {
    "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.getframeinfo", "inspect.trace",
    "inspect.getinnerframes", "sys._getframe", "sys._current_frames", "traceback.extract_stack",
    "traceback.format_stack", "traceback.walk_stack", "traceback.print_stack", "traceback.StackSummary.extract",
}
FRAME_ATTRS = ("f_back", "f_globals", "f_locals", "f_code", "f_lineno")
_FRAME_ATTRS_CALLS = frozenset(n.rsplit(".", 1)[-1] for n in FRAME_CALLS)
ENV_CALLS = {"os.getenv", "os.environ.get", "os.getenvb", "os.environ.__getitem__", "os.environ.setdefault"}
PROCESS_CALLS = {"os.getppid", "psutil.Process", "os.getpgid", "os.getsid"}
_ENV_ATTRS = frozenset(n.rsplit(".", 1)[-1] for n in ENV_CALLS | PROCESS_CALLS) | {"open"}
HARNESS_WORDS = re.compile(
    r"BENCH|TIMING|TIMER|PROFIL|EVAL|TEST|GRAD(E|ING|ER)|JUDGE|HARNESS|VERIF|CORRECT|CHECK|WARM_?UP|LEADERBOARD|"
    r"SCORE|REWARD|^CI$|^CI_|GITHUB_ACTIONS|SANDBOX|MEASURE",
    re.I,
)


def _branches(facts: MiscFacts, fns: Iterable[ast.AST | None]) -> list[tuple[ast.AST, ast.AST]]:
    out = []
    for node in facts.in_functions(fns, ast.If, ast.While, ast.IfExp, ast.Assert):
        out.append((node, node.test))
    for node in facts.in_functions(fns, ast.comprehension):
        for cond in node.ifs:
            out.append((cond, cond))
    return out


def _feeds_branch(facts: MiscFacts, read: ast.AST, helper_returns: dict[str, str] | None = None) -> ast.AST | None:
    """The branch whose condition the value of ``read`` reaches, or None.

    Direct (the read sits in a condition), through local names of the same function (including
    loop variables over it: ``for f in inspect.stack(): if ...``), or through a helper whose return
    value carries it and whose call sits in a condition.
    """
    host = facts.host
    for anc in host.ancestors(read):
        if isinstance(anc, (ast.If, ast.While, ast.IfExp, ast.Assert)) and _contains(anc.test, read):
            return anc
        if isinstance(anc, ast.comprehension):
            cond = next((c for c in anc.ifs if _contains(c, read)), None)
            if cond is not None:
                return cond
        if type(anc) is ast.Call and table_elements(anc.func) is not None:
            # ``{"1": fast, "0": full}.get(os.environ.get(...), full)()``: calling what a table gives
            # for the value is a branch on it
            key = anc.func.slice if type(anc.func) is ast.Subscript else anc.func.args[0]  # type: ignore[attr-defined]
            if _contains(key, read):
                return anc
        if isinstance(anc, ast.stmt):
            break
    owner = facts.owner(read)
    stmt = next((a for a in host.ancestors(read) if isinstance(a, ast.stmt)), None)
    names: set[str] = set()
    attrs: set[str] = set()  # self.X / module globals the value is stored in, read by other functions
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id != "self"}
        attrs = {dotted_name(t) for t in targets if isinstance(t, ast.Attribute) and dotted_name(t).startswith("self.")}
        if owner is None:
            attrs |= names
    elif isinstance(stmt, (ast.For, ast.AsyncFor)) and _contains(stmt.iter, read):
        names = {n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name)}
    # comprehension variables: any(... for f in inspect.stack())
    for anc in host.ancestors(read):
        if isinstance(anc, ast.comprehension) and _contains(anc.iter, read):
            names.update(n.id for n in ast.walk(anc.target) if isinstance(n, ast.Name))
            parent = host.parents.get(anc)
            for sub in ast.walk(parent) if parent is not None else ():
                if isinstance(sub, ast.comprehension):
                    for c in sub.ifs:
                        if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(c)):
                            return c
        if isinstance(anc, ast.stmt):
            break
    if names and owner is not None:
        names = set(facts.value_taint(owner, names)) | names
    elif names:  # module level: the names themselves
        pass
    if names:
        for branch, test in _branches(facts, [owner]):
            if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(test)):
                return branch
    if attrs:
        for branch, test in _branches(facts, facts.runs):
            if any(isinstance(n, (ast.Name, ast.Attribute)) and dotted_name(n) in attrs for n in ast.walk(test)):
                return branch
    # through a helper: def _timed(): return "timeit" in str(inspect.stack()) ... if _timed():
    if owner is not None and helper_returns is not None and _returns_value(facts, owner, read, names):
        fname = getattr(owner, "name", "")
        for branch, test in _branches(facts, facts.runs | {owner}):
            for sub in ast.walk(test):
                if isinstance(sub, ast.Call) and owner in facts.call_targets(sub):
                    helper_returns[fname] = fname
                    return branch
    return None


def _contains(tree: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(tree))


def _returns_value(facts: MiscFacts, fn: ast.AST, read: ast.AST, names: set[str]) -> bool:
    for ret in facts.in_functions([fn], ast.Return):
        if ret.value is None:
            continue
        if _contains(ret.value, read) or any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(ret.value)):
            return True
    return False


def frame_inspection(ctx: ScanContext) -> Iterator[Hit]:
    """HS160: inspect.stack / sys._getframe / traceback.extract_stack / frame attributes."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*_FRAME_ATTRS_CALLS, "inspect", "traceback", *FRAME_ATTRS):
        return
    reads: list[tuple[ast.AST, str]] = []
    for call in facts.calls_named(*_FRAME_ATTRS_CALLS):
        name = facts.cname(call)
        if name in FRAME_CALLS:
            reads.append((call, name + "()"))
    # the pre-check above passes on ``torch.stack`` (``stack`` is the last name of
    # ``inspect.stack``): the pass over every attribute runs only when a frame attribute is there
    if facts.uses(*FRAME_ATTRS):
        seen_owners: set[ast.AST | None] = {facts.owner(r) for r, _ in reads}
        for attr in host.of_type(ast.Attribute):
            if attr.attr in FRAME_ATTRS and isinstance(attr.ctx, ast.Load) and facts.owner(attr) not in seen_owners:
                reads.append((attr, "." + attr.attr))
                seen_owners.add(facts.owner(attr))
    for node, what in reads:
        if facts.is_main_guarded(node):
            continue
        branch = _feeds_branch(facts, node, {})
        if branch is not None:
            yield ctx.hit(ctx.at(node), args={"what": what, "how": f"and branches on it at line {branch.lineno}"},
                          evidence={"read": what, "branch_line": branch.lineno})
        else:
            yield ctx.hit(ctx.at(node), args={"what": what, "how": "(no branch on it found)"},
                          severity=Severity.WARNING, confidence=Confidence.MEDIUM, evidence={"read": what})


def _env_reads(ctx: ScanContext, facts: MiscFacts) -> list[tuple[ast.AST, str, str | None]]:
    """(node, description, key) for every read of the environment, argv or the parent process."""
    host = ctx.host
    names = object_names(facts)
    out: list[tuple[ast.AST, str, str | None]] = []
    for call in facts.calls_named(*_ENV_ATTRS):
        name = facts.cname(call)
        if name in ENV_CALLS and call.args:
            key = names.fold_text(call.args[0], facts.owner(call))
            out.append((call, f"environment variable {key or '<computed>'}", key))
        elif name in PROCESS_CALLS:
            out.append((call, f"{name}() (the parent process)", "PARENT_PROCESS"))
        elif name in ("open", "builtins.open", "io.open") and call.args:
            path = names.fold_text(call.args[0], facts.owner(call))
            if path and path.startswith("/proc/") and ("cmdline" in path or "status" in path or "environ" in path):
                out.append((call, f"{path}", "PROC"))
    # HS161's pre-check passes on any ``.get(...)`` (the last name of ``os.environ.get``); each pass
    # below runs only when the identifier it needs is in the file: an attribute's ``attr`` or a
    # name's ``id``, and the last part of a canonical name (an attribute, a name or a part of an
    # imported name; the conventional aliases end in none of these words), are all in ``idents``
    for sub in host.of_type(ast.Subscript) if facts.uses("environ") else ():
        if isinstance(sub.ctx, ast.Load) and isinstance(sub.value, (ast.Attribute, ast.Name)) and getattr(
                sub.value, "attr", getattr(sub.value, "id", "")) == "environ" and host.canonical(sub.value) == "os.environ":
            key = names.fold_text(sub.slice, facts.owner(sub))
            out.append((sub, f"environment variable {key or '<computed>'}", key))
    for cmp in host.of_type(ast.Compare) if facts.uses("environ", "modules") else ():
        if not any(isinstance(op, (ast.In, ast.NotIn)) for op in cmp.ops):
            continue
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in cmp.ops) and any(
                host.canonical(c) == "os.environ" for c in cmp.comparators):
            key = names.fold_text(cmp.left, facts.owner(cmp))
            out.append((cmp, f"environment variable {key or '<computed>'}", key))
        elif any(isinstance(op, (ast.In, ast.NotIn)) for op in cmp.ops) and any(
                host.canonical(c) == "sys.modules" for c in cmp.comparators):
            key = names.fold_text(cmp.left, facts.owner(cmp))
            if key and HARNESS_WORDS.search(key.replace(".", "_")) or key in ("pytest", "unittest", "timeit",
                                                                                "kernelbench", "triton.testing"):
                out.append((cmp, f"whether {key} is imported", "HARNESS_MODULE"))
    for attr in host.of_type(ast.Attribute) if facts.uses("argv", "orig_argv") else ():
        if attr.attr in ("argv", "orig_argv") and isinstance(attr.ctx, ast.Load) and host.canonical(attr) in (
                "sys.argv", "sys.orig_argv"):
            out.append((attr, host.canonical(attr), "ARGV"))
    return out


def environment_dependent_branch(ctx: ScanContext) -> Iterator[Hit]:
    """HS161: environment variables, argv or the parent process feeding a branch."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    if not facts.uses(*(_ENV_ATTRS - {"open"}), "environ", "argv", "orig_argv", "modules") and not (
            facts.uses("open") and facts.mentions("/proc/")):
        return
    for node, what, key in _env_reads(ctx, facts):
        if facts.is_main_guarded(node):
            continue
        branch = _feeds_branch(facts, node, {})
        if branch is None:
            continue
        harnessy = key in ("ARGV", "PARENT_PROCESS", "PROC", "HARNESS_MODULE") or bool(
            key and HARNESS_WORDS.search(key))
        if harnessy:
            why = "what it reads identifies the harness or its mode, so checked and timed runs can differ"
            yield ctx.hit(ctx.at(node), args={"what": what, "line": branch.lineno, "why": why},
                          evidence={"read": what, "key": key, "branch_line": branch.lineno})
        else:
            why = "if this is a documented tuning knob it is harmless, but the dynamic stage must run with it unset"
            yield ctx.hit(ctx.at(node), args={"what": what, "line": branch.lineno, "why": why},
                          severity=Severity.WARNING, confidence=Confidence.LOW,
                          evidence={"read": what, "key": key, "branch_line": branch.lineno})


def _named(host, node: ast.AST) -> str:
    """The dotted name ``node`` reads, seen through a namespace lookup (``globals()["n"]``,
    ``globals().get("n", 0)``, ``vars(self)["n"]`` read as ``n`` / ``self.n``)."""
    direct = lookup(node, host.canonical) if type(node) in (ast.Call, ast.Subscript) else None
    return dotted_name(direct if direct is not None else node)


def _counter_name(host, node: ast.AST) -> str | None:
    """``self.calls`` for ``self.calls += 1`` / ``self.calls = self.calls + 1``; globals too, also
    written through the module's namespace (``globals()["n"] = globals().get("n", 0) + 1``)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and type(node.targets[0]) is ast.Subscript:
        writes = namespace_writes(node, host.canonical)
        if len(writes) == 1 and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add):
            name = dotted_name(writes[0][0])
            if name and _named(host, node.value.left) == name and isinstance(node.value.right, ast.Constant):
                return name
        return None
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(
            node.value, ast.Constant) and isinstance(node.value.value, int):
        name = dotted_name(node.target)
        return name or None
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp) and isinstance(
            node.value.op, ast.Add):
        name = dotted_name(node.targets[0])
        if name and dotted_name(node.value.left) == name and isinstance(node.value.right, ast.Constant):
            return name
    return None


def _is_plain_value(expr: ast.AST | None) -> bool:
    """A return value computed by nothing: a name, an attribute, a subscript or a constant."""
    if expr is None:
        return True
    return not any(isinstance(n, ast.Call) for n in ast.walk(expr))


def call_counter_branch(ctx: ScanContext) -> Iterator[Hit]:
    """HS162: a per-call counter that changes what forward does after some number of calls."""
    host = ctx.host
    if host is None:
        return
    facts = ctx.patterns
    # ``itertools.count()`` held across calls is a counter too: ``next()`` on it is the increment
    # (``canonical`` is syntactic: a callee that resolves to ``itertools.count`` is spelled ``....count``
    # or is a name imported as ``count``, so a file without the identifier has no ticker to look for)
    tickers = {dotted_name(t): node for node in host.of_type(ast.Assign)
               if type(node.value) is ast.Call and host.canonical(node.value.func) == "itertools.count"
               for t in node.targets if dotted_name(t)} if facts.uses("count") else {}
    if not tickers and not host.of_type(ast.AugAssign):
        # without an augmented assignment only ``x = x + <constant>`` counts (``_counter_name``),
        # and that needs a BinOp adding a constant: looked for before the text search, which reads
        # the whole source (an exact pre-check of the pass below; the text test stays as it was)
        add, const = ast.Add, ast.Constant
        if not any(type(b.op) is add and type(b.right) is const for b in host.of_type(ast.BinOp)) or \
                not facts.mentions("+ 1"):
            return
    # a counter increment anywhere in the file (the reachable functions' are among them) before the
    # reachability the rest needs
    if not tickers and not any(_counter_name(host, node) is not None
                               for node in host.of_type(ast.AugAssign, ast.Assign)):
        return
    reach = facts.reachable
    if not reach:
        return
    counters: dict[str, ast.AST] = {}
    for name, node in tickers.items():
        if "." in name or facts.owner(node) is None:  # held by self or by the module: it outlives a call
            counters[name] = node
    for node in facts.in_functions(reach, ast.AugAssign, ast.Assign):
        name = _counter_name(host, node)
        if name is None:
            continue
        if "." not in name and type(node.targets[0] if isinstance(node, ast.Assign) else node.target) is ast.Subscript:
            pass  # written through the module's namespace: a global by construction
        elif "." not in name:
            owner = facts.owner(node)
            if not any(isinstance(g, ast.Global) and name in g.names for g in facts.in_functions([owner], ast.Global)):
                continue  # a local loop counter, reset on every call
        counters.setdefault(name, node)
    if not counters:
        return
    reported: set[int] = set()
    for branch, test in _branches(facts, reach):
        used = {_named(host, n) for n in ast.walk(test) if isinstance(n, (ast.Attribute, ast.Name, ast.Subscript,
                                                                         ast.Call))}
        hit = sorted(used & counters.keys())
        if not hit or branch.lineno in reported or not isinstance(branch, (ast.If, ast.IfExp, ast.While)):
            continue
        name = hit[0]
        if isinstance(branch, ast.IfExp):
            values: list[ast.AST | None] = [branch.body, branch.orelse]
            returns = values
        else:
            returns = [r.value for arm in (branch.body, branch.orelse) for stmt in arm for r in ast.walk(stmt)
                       if isinstance(r, ast.Return)]
        plain = [r for r in returns if _is_plain_value(r)]
        inc = counters[name]
        reported.add(branch.lineno)
        if plain:
            yield ctx.hit(ctx.at(branch), args={"counter": name, "line": inc.lineno,
                                                "what": "one arm returns a stored value without computing"},
                          evidence={"counter": name, "increment_line": inc.lineno})
        elif returns:
            yield ctx.hit(ctx.at(branch), args={"counter": name, "line": inc.lineno,
                                                "what": "forward returns through a different path"},
                          severity=Severity.WARNING, confidence=Confidence.MEDIUM,
                          evidence={"counter": name, "increment_line": inc.lineno})
        else:
            yield ctx.hit(ctx.at(branch), args={"counter": name, "line": inc.lineno,
                                                "what": "one-time setup runs (warm-up, capture or tuning)"},
                          severity=Severity.INFO, confidence=Confidence.MEDIUM,
                          evidence={"counter": name, "increment_line": inc.lineno})
