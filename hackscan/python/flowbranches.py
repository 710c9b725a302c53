"""Branch events of the value flow: ``if`` / loops / ``try`` / suppressing ``with`` as arms in one event
log, the conditions they test, and the pass that turns the log into the facts' branches, try
blocks and per-function tables once forward is walked."""

from __future__ import annotations

import ast

from ..util.lazy import cached_property
from .facts import (
    Arm,
    Branch,
    CallEdge,
    Condition,
    Handler,
    TryBlock,
)
from .flowtables import (
    _broad,
    _Frame,
    _src,
    _uniq,
    _with_lines,
)
from .members import subtree
from .module import children
from .provenance import EMPTY, Provenance
from .resolve import dotted_name, returns_of


class BranchEvents:
    """Control flow and the event log, mixed into ``valueflow._Analyser``."""

    # ------------------------------------------------------------------ control flow
    def _arm(self, label: str, stmts: list[ast.stmt], start: int, depth: int, terminates: bool,
             bindings: dict[str, Provenance] | None = None, value: Provenance | None = None) -> Arm:
        events = self.log[start:]
        kernels, ops, allocs, returns = [], [], [], []
        raises = False
        for kind, obj, d in events:
            if kind == "kernel":
                kernels.append(obj)
            elif kind == "op":
                ops.append(obj)
            elif kind == "alloc":
                allocs.append(obj)
            elif kind == "return" and d == depth:
                returns.append(obj)
            elif kind == "raise" and d == depth:
                raises = True
        first = stmts[0].lineno if stmts else 0
        last = (stmts[-1].end_lineno or stmts[-1].lineno) if stmts else 0
        # ``tuple(_uniq(x))`` without the call for the short lists most arms have
        return Arm(label, first, last,
                   tuple(kernels) if len(kernels) < 2 else tuple(_uniq(kernels)),
                   tuple(ops) if len(ops) < 2 else tuple(_uniq(ops)),
                   tuple(allocs) if len(allocs) < 2 else tuple(_uniq(allocs)),
                   tuple(returns) if len(returns) < 2 else tuple(_uniq(returns)),
                   raises, bindings or {}, value, terminates)

    @staticmethod
    def _bound_since(frame: _Frame, mark: int) -> set[str]:
        return set(frame.bound[mark:])

    def _if(self, s: ast.If) -> bool:
        frame = self.stack[-1]
        self._ev(s.test)
        # a branch is recorded on its first visit only (a helper called twice, a loop body): the
        # condition and the arms, pure summaries of that visit, are built only while the node is not
        # yet recorded.  Each is checked where it is built, so a re-entrant visit that records the
        # node in between skips exactly the summaries that would have been thrown away.
        branches = self.branch_nodes
        cond = self._condition(s.test) if s not in branches else None
        before = dict(frame.state)
        start, mark = len(self.log), len(frame.bound)
        body_term = self._block(s.body)
        body_state = frame.state
        body = body_names = None
        if s not in branches:
            body_names = self._bound_since(frame, mark)
            body = self._arm("body", s.body, start, frame.depth, body_term,
                             {n: body_state[n] for n in body_names if n in body_state})
        # the else arm starts from ``before`` itself, not a copy: nothing reads ``before`` after the else
        # block but the no-else bindings below, and without an else nothing writes into it
        frame.state = before
        start, mark = len(self.log), len(frame.bound)
        else_term = self._block(s.orelse) if s.orelse else False
        else_state = frame.state
        if s not in branches:
            if not s.orelse:  # no else: the names the body rebinds keep their old values on this path
                else_bindings = {n: before[n] for n in body_names if n in before}  # type: ignore[union-attr]
            else:
                else_names = self._bound_since(frame, mark)
                else_bindings = {n: else_state[n] for n in else_names if n in else_state}
            orelse = self._arm("orelse", s.orelse, start, frame.depth, else_term, else_bindings)
            branches.add(s)
            self.facts.branches.append(Branch(s, "if", frame.qualname, frame.depth, cond, body, orelse))
        live = [st for st, term in ((body_state, body_term), (else_state, else_term)) if not term]
        frame.state = self._join_states(live) if live else else_state
        return body_term and else_term

    def _join_states(self, states: list[dict[str, Provenance]]) -> dict[str, Provenance]:
        # the first state copied whole (the keys keep its order), the others joined into it
        out = dict(states[0])
        get = out.get
        for st in states[1:]:
            for k, v in st.items():
                cur = get(k)
                if cur is None:
                    out[k] = v
                elif cur is not v:  # most names hold the same flow in every state: ``join`` would return it
                    out[k] = cur.join(v)
        return out

    def _for(self, s: ast.For) -> None:
        frame = self.stack[-1]
        self._bind_iteration(s.target, s.iter, self._ev(s.iter))
        if isinstance(s.target, ast.Name) and isinstance(s.iter, ast.Attribute):
            chain = self._chain(s.iter)
            if chain is not None and self.facts.holders.get(chain) is not None:
                frame.callables[s.target.id] = ("holder", chain)
        # one pass: flows are sets, and the rules need what reaches the output, not a fixpoint
        before = dict(frame.state)
        self._block(s.body)
        frame.state = self._join_states([before, frame.state])
        if s.orelse:
            self._block(s.orelse)

    def _while(self, s: ast.While) -> None:
        frame = self.stack[-1]
        before = dict(frame.state)
        self._ev(s.test)
        cond = self._condition(s.test) if s not in self.branch_nodes else None  # first visit only (see _if)
        start = len(self.log)
        term = self._block(s.body)
        if s not in self.branch_nodes:
            self.branch_nodes.add(s)
            body = self._arm("body", s.body, start, frame.depth, term)
            self.facts.branches.append(Branch(s, "while", frame.qualname, frame.depth, cond, body,
                                              Arm("orelse", 0, 0)))
        frame.state = self._join_states([before, frame.state])
        if s.orelse:
            self._block(s.orelse)

    def _branch_expr(self, node: ast.AST, test: ast.expr, a: ast.expr | None, b: ast.expr | None,
                     kind: str) -> Provenance:
        frame = self.stack[-1]
        branches = self.branch_nodes
        self._ev(test)
        # summaries of the first visit only (see _if)
        cond = self._condition(test) if node not in branches else None
        start = len(self.log)
        fa = self._ev(a) if a is not None else EMPTY
        arm_a = _with_lines(self._arm("body", [], start, frame.depth, False, value=fa), a) \
            if node not in branches else None
        start = len(self.log)
        fb = self._ev(b) if b is not None else EMPTY
        if node not in branches:
            arm_b = _with_lines(self._arm("orelse", [], start, frame.depth, False, value=fb), b)
            self.branch_nodes.add(node)
            self.facts.branches.append(Branch(node, kind, frame.qualname, frame.depth, cond, arm_a, arm_b))
        return fa.join(fb)

    def _try(self, s: ast.Try) -> bool:
        frame = self.stack[-1]
        before = dict(frame.state)
        start = len(self.log)
        # a handler runs when some statement of the body raised: that statement's own binding never
        # happened (``try: x = kernel(x) except: x = torch_op(x)`` sees the original x)
        body_term = self._block(s.body[:-1])
        before_last = dict(frame.state)
        if not body_term and s.body:
            body_term = self._stmt(s.body[-1])
        else_term = False
        if s.orelse and not body_term:
            else_term = self._block(s.orelse)
        after_body = frame.state
        # the arms and handlers summarise the first visit only (see _if)
        tries = self.try_nodes
        body = self._arm("try", s.body, start, frame.depth, body_term or else_term) if s not in tries else None
        handlers = []
        states = [] if (body_term or else_term) else [after_body]
        all_term = body_term or else_term
        for h in s.handlers:
            frame.state = self._join_states([before, before_last])
            if h.name:
                frame.state[h.name] = EMPTY
            start, mark = len(self.log), len(frame.bound)
            term = self._block(h.body)
            if s not in tries:
                names = self._bound_since(frame, mark)
                arm = self._arm("handler", h.body, start, frame.depth, term,
                                {n: frame.state[n] for n in names if n in frame.state})
                types = self._exception_types(h.type)
                broad = _broad(types)
                handlers.append(Handler(h, types, broad, arm))
            if not term:
                states.append(frame.state)
            all_term = all_term and term
        frame.state = self._join_states(states) if states else self._join_states([before, after_body])
        if s not in self.try_nodes:
            self.try_nodes.add(s)
            self.facts.tries.append(TryBlock(s, frame.qualname, frame.depth, body, tuple(handlers)))
        if s.finalbody:
            if self._block(s.finalbody):
                return True
        return all_term and bool(s.handlers)

    def _suppress(self, s: ast.With, cm: ast.Call) -> bool:
        """``with contextlib.suppress(E): body`` is ``try: body except E: pass``: an exception skips the
        rest of the body and forward goes on after the block, where a fallback can wait.  Recorded as a
        try whose one handler falls through (its node a stand-in at the ``with``), so HS107 reads the code
        after the block as the handler's work, as it does for ``except: pass``."""
        frame = self.stack[-1]
        before = dict(frame.state)
        start = len(self.log)
        body_term = self._block(s.body)
        first = s not in self.try_nodes
        if first:
            body = self._arm("try", s.body, start, frame.depth, body_term)
            handler = ast.copy_location(ast.ExceptHandler(type=None, name=None, body=[ast.Pass()]), s)
            types = tuple(self._canon(a) or dotted_name(a) for a in cm.args)
            broad = _broad(types)
            arm = self._arm("handler", [], len(self.log), frame.depth, False, {})
            self.try_nodes.add(s)
            self.facts.tries.append(TryBlock(s, frame.qualname, frame.depth, body,  # type: ignore[arg-type]
                                             (Handler(handler, types, broad, arm),)))
        # the body may stop at any statement: what follows sees the state before it and after it
        frame.state = self._join_states([before, frame.state]) if not body_term else before
        return False

    def _exception_types(self, node: ast.AST | None) -> tuple[str, ...]:
        if node is None:
            return ()
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return tuple(self._canon(e) or dotted_name(e) for e in elts)

    # ------------------------------------------------------------------ conditions
    def _condition(self, test: ast.expr) -> Condition:
        flow = self.facts._flows.get(test, EMPTY)
        if self._length_truth(test):
            # ``if not blocks:`` on a split's tuple: its length, a shape
            return Condition(test, flow, frozenset(), (), frozenset(flow.inputs | flow.meta), (), frozenset())
        value_reads: list[tuple[str, ast.AST]] = []
        shape_lits: list[tuple[int, ast.AST]] = []
        state: set[str] = set()
        frame = self.stack[-1]
        flows = self.facts._flows
        if flow.inputs:
            stack = [test]
            while stack:
                n = stack.pop()
                f = flows.get(n)
                if isinstance(n, (ast.Call, ast.Subscript)) and f is not None and f.inputs:
                    value_reads.append((_src(n, 60), n))
                    continue
                if isinstance(n, ast.Name) and f is not None and f.inputs and n.id in frame.state:
                    value_reads.append((n.id, n))
                    continue
                stack.extend(children(n))
        fstate = frame.state
        for n in subtree(test):
            t = type(n)  # exact types: a parsed tree has no subclasses
            if t is ast.Name:
                if type(n.ctx) is ast.Load and n.id not in fstate:  # type: ignore[attr-defined]
                    state.add(n.id)  # type: ignore[attr-defined]
            elif t is ast.Attribute:
                chain = self._chain(n)
                if chain is not None:
                    state.add("self." + chain)
            elif t is ast.Compare:
                shape_lits.extend(self._meta_compare_literals(n, flows))  # type: ignore[arg-type]
            elif t is ast.Call and flows.get(n, EMPTY).meta:
                helper = self.invoked.get(n)
                if helper is not None:
                    shape_lits.extend(self._returned_shape_literals(helper))
        return Condition(test, flow, frozenset(flow.inputs), tuple(value_reads), frozenset(flow.meta),
                         tuple(shape_lits), frozenset(state))

    def _length_truth(self, test: ast.expr) -> bool:
        """``seq`` or ``not seq`` where ``seq`` is a local holding a split's tuple: the test reads how
        many pieces there are (a shape), not what they hold.  (A list literal is not one: a loop
        can append to it on values.)"""
        while type(test) is ast.UnaryOp and type(test.op) is ast.Not:  # type: ignore[attr-defined]
            test = test.operand  # type: ignore[attr-defined]
        return type(test) is ast.Name and test.id in self.stack[-1].sequences  # type: ignore[attr-defined]

    def _returned_shape_literals(self, fn: ast.FunctionDef, depth: int = 0) -> list[tuple[int, ast.AST]]:
        """Literals compared with metadata in what a helper returns (``return t.shape[-1] == 4096``): a
        condition written as ``if _is_tuned(x):`` tests the shape as much as the comparison inlined.
        Only the returned expressions are read (a helper's body is its own business), through helpers
        they call in turn, two levels deep; the flows are those of the helper's latest analysis."""
        out: list[tuple[int, ast.AST]] = []
        flows = self.facts._flows
        rets = self.returns_of.get(fn)
        if rets is None:
            rets = self.returns_of[fn] = returns_of(fn)
        for r in rets:
            for n in subtree(r):
                t = type(n)
                if t is ast.Compare:
                    out.extend(self._meta_compare_literals(n, flows))  # type: ignore[arg-type]
                elif t is ast.Call and depth < 1:
                    inner = self.invoked.get(n)
                    if inner is not None and inner is not fn:
                        out.extend(self._returned_shape_literals(inner, depth + 1))
        return out

    def _meta_compare_literals(self, n: ast.Compare, flows: dict[ast.AST, Provenance]) -> list[tuple[int, ast.AST]]:
        """The integer literals of a comparison one of whose sides reads metadata (``x.shape[1] == 4096``)."""
        sides = [n.left, *n.comparators]
        if any([flows.get(x, EMPTY).meta for x in sides]):  # a list: a generator left early is closed by a raised GeneratorExit
            return [lit for x in sides for lit in self._int_literals(x)]
        return []

    def _int_literals(self, node: ast.AST) -> list[tuple[int, ast.AST]]:
        out: list[tuple[int, ast.AST]] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            out.append((node.value, node))
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                out.extend(self._int_literals(e))
        elif isinstance(node, ast.Name) and node.id not in self.stack[-1].state:
            v = self.host.resolver.try_value(node, self.host.module_scope, 10**9)
            if isinstance(v, int) and not isinstance(v, bool):
                out.append((v, node))
        return out

    def _finish(self) -> None:
        facts = self.facts
        facts.returns = sorted(self.returns.values(), key=lambda r: (r.depth, r.node.lineno))  # r.line
        # ``if c: ...`` with no else: the path where c is false runs the rest of the function
        for i, br in enumerate(facts.branches):
            if br.kind == "if" and not br.node.orelse:
                arm = self._after_arm(br.node, br.function, br.orelse.bindings)
                if arm is not None:
                    facts.branches[i] = Branch(br.node, br.kind, br.function, br.depth, br.condition, br.body, arm)
        # ``try: ... except: pass`` falls through: the fallback is what follows the try
        for i, t in enumerate(facts.tries):
            for h in t.handlers:  # a loop, not an early-exited any(generator): see HostModule.ancestors
                if not h.arm.terminates:
                    after = self._after_arm(t.node, t.function, {})
                    if after is not None:
                        facts.tries[i] = TryBlock(t.node, t.function, t.depth, t.body, t.handlers, after)
                    break

    @cached_property
    def _by_function(self) -> tuple[dict[str, list], dict[str, list], dict[str, list], dict[str, list],
                                    dict[str, list[CallEdge]]]:
        """Returns, kernels, ops, allocs and call edges grouped by function, each group in the order of
        its list: ``_after_arm`` runs once per ``if`` without ``else`` and would scan every list each time.
        Built after the walk (the lists are final then)."""
        facts = self.facts
        groups: list[dict[str, list]] = []
        for records in (facts.returns, facts.kernels, facts.ops, facts.allocs):
            by: dict[str, list] = {}
            for r in records:
                got = by.get(r.function)
                if got is None:
                    by[r.function] = [r]
                else:
                    got.append(r)
            groups.append(by)
        calls: dict[str, list[CallEdge]] = {}
        for e in facts.calls:
            got = calls.get(e.caller)
            if got is None:
                calls[e.caller] = [e]
            else:
                got.append(e)
        return groups[0], groups[1], groups[2], groups[3], calls

    def _after_arm(self, node: ast.AST, function: str, bindings: dict[str, Provenance]) -> Arm | None:
        """The rest of ``function`` after ``node``: its ops, kernels and returns (helpers included)."""
        end = node.end_lineno or node.lineno  # type: ignore[attr-defined]
        returns, kernels_of, ops_of, allocs_of, calls_of = self._by_function
        # ``.line`` read as the node's line (the records' property) without the property call
        after = [r for r in returns.get(function, ()) if r.node.lineno > end]
        if not after:
            return None
        first, last = after[0].node.lineno, max(r.node.lineno for r in after)
        start_line = end + 1
        # lists built by comprehensions, not generators: ``_after_arm`` runs for every ``if`` without ``else``
        kernels = tuple([k for k in kernels_of.get(function, ()) if k.node.lineno >= start_line])
        ops = tuple([o for o in ops_of.get(function, ()) if getattr(o.node, "lineno", 0) >= start_line])
        allocs = tuple([a for a in allocs_of.get(function, ()) if a.node.lineno >= start_line])
        # helpers called after the node, and what they call, contribute their kernels and ops
        callees = {e.callee for e in calls_of.get(function, ()) if e.node.lineno >= start_line}
        frontier = list(callees)
        while frontier:
            fn = frontier.pop()
            for e in calls_of.get(fn, ()):
                if e.callee not in callees and e.callee != function:
                    callees.add(e.callee)
                    frontier.append(e.callee)
        if callees:  # the lists in their own order, as a reader of the whole list would meet them
            kernels += tuple([k for k in self.facts.kernels if k.function in callees])
            ops += tuple([o for o in self.facts.ops if o.function in callees])
            kernels, ops = tuple(_uniq(list(kernels))), tuple(_uniq(list(ops)))
        # without callees each record came from its function's group once: no repeat to drop
        return Arm("after", min(first, start_line), last, kernels, ops, allocs, tuple(after), False, bindings,
                   None, True)
