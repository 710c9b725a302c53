"""The records of the model's value flow (``ModelFlow`` and what it lists): what forward reaches,
and what each value it computes depends on.

The builder is ``valueflow.build_model_flow(host)`` (lazy as ``ctx.model_flow``): it takes the model
class from ``program.model_class``, analyses its ``forward`` once with every helper it reaches
inlined (``self.helper(...)``, module functions, ``Function.apply`` -> its ``forward``, submodule
classes defined in the file) and records, in one pass over the statements:

* every torch compute op, custom kernel launch and allocation, each with its line and function;
* for every ``return``: a ``Provenance`` saying what the returned value depends on;
* every ``if`` / ``while`` / ternary / ``assert``: whether the condition reads tensor *values* or
  only metadata, the shape literals it compares against, the state it reads, and what each arm does;
* every ``try``: what the body and each handler compute and return;
* in-place writes into forward arguments, strided / first-row slices feeding reductions or
  broadcasts, ``self`` attributes read, and the parameter holders of ``__init__``.

Rules read these lists; none of them walks the tree again.  ``ModelFlow`` is public: the
attributes below are documented and stable for the other rule families (HS13x-HS19x, HS3xx).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..util.lazy import cached_property
from ..util.quick_init import quick_init
from .catalog import op_family
from .module import HostModule
from .provenance import EMPTY, Provenance


# ---------------------------------------------------------------------------------------- records
@quick_init
@dataclass(frozen=True)
class FunctionInfo:
    """A Python function reachable from forward (forward itself included)."""

    qualname: str  # ``ModelNew.forward``, ``helper``, ``ReluFn.forward``, ``Block.forward``
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None  # the class it is defined in
    kind: str  # forward | method | function | autograd | submodule


@quick_init
@dataclass(frozen=True)
class CallEdge:
    caller: str
    callee: str
    node: ast.Call


@quick_init
@dataclass(frozen=True)
class TorchOp:
    """A torch computation: ``torch.matmul``, ``Tensor.sum``, ``torch.nn.Conv2d`` (a module call), ``+``."""

    id: int
    name: str  # canonical: torch.matmul, torch.nn.functional.relu, Tensor.sum, torch.nn.Conv2d, torch.add
    node: ast.AST
    function: str
    kind: str  # call | method | module | operator
    # the modules inside an nn.Sequential / ModuleList call
    members: tuple[str, ...] = ()

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)

    # ``family`` / ``families`` depend on the frozen fields alone and rules read them per op many times
    # (``rank_ops`` sorts by them): computed once, kept in the instance ``__dict__`` (fields, equality,
    # hash and repr are unchanged: a dataclass reads its fields only)
    @cached_property
    def family(self) -> str:
        return op_family(self.name)

    @cached_property
    def families(self) -> frozenset[str]:
        return frozenset([self.family, *(op_family(m) for m in self.members)])


@quick_init
@dataclass(frozen=True)
class KernelCall:
    """A custom kernel launch: an extension function, a Triton launch, ``torch.ops.<ns>.<op>``, cupy."""

    id: int
    kind: str  # extension | triton | torch_ops | cupy | numba
    name: str  # graph node name: export:<ext>.<fn>, triton:<kernel>, op:<ns>.<op>, cupy:<name>
    target: str  # the function / kernel name
    node: ast.Call
    function: str
    extension: str | None = None
    # forward arguments whose values reach the kernel's arguments
    input_args: frozenset[str] = frozenset()
    # whether the call's result is used (False: an expression statement, e.g. a Triton launch)
    result_used: bool = True
    # ids of the torch ops already applied to the kernel's arguments (work done before it runs)
    input_ops: frozenset[int] = frozenset()

    @property
    def line(self) -> int:
        return self.node.lineno


@quick_init
@dataclass(frozen=True)
class Alloc:
    id: int
    name: str  # torch.empty_like, torch.full, Tensor.new_zeros
    node: ast.Call
    function: str
    fill: str  # uninitialised | constant | random | data
    # the fill value of full / full_like / new_full when it is a literal
    value: float | int | bool | None = None

    @property
    def line(self) -> int:
        return self.node.lineno


@dataclass
class Return:
    """One ``return`` in reachable code; ``flow`` joins every context it was reached in."""

    node: ast.Return
    function: str
    depth: int  # 0 for forward's own returns, 1 for a helper called from forward, ...
    flow: Provenance

    @property
    def line(self) -> int:
        return self.node.lineno


@quick_init
@dataclass(frozen=True)
class ShapeUse:
    """A call whose arguments fix a shape: an allocation, a view / reshape / expand target, a kernel
    launch (arguments and Triton grid), a ``range`` bound.  Literals here equal to the task's dims are
    hardcoded shapes (class 2)."""

    node: ast.AST  # the call (or the grid expression of a Triton launch)
    kind: str  # alloc | view | kernel | grid | range
    function: str
    args: tuple[ast.AST, ...]  # the argument expressions that carry sizes (``ast.keyword`` for keywords)

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


@quick_init
@dataclass(frozen=True)
class Mutation:
    """An in-place write into a forward argument (or a view of one)."""

    node: ast.AST
    function: str
    arg: str
    how: str  # ``x.relu_()``, ``x[...] =``, ``out=x``, ``inplace=True``, ``x +=``, ``kernel writes x``
    kind: str  # method | setitem | augassign | out | inplace | kernel | data | function

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


@quick_init
@dataclass(frozen=True)
class Slice:
    """A strided (``x[:, ::16]``) or first-row (``x[0:1]``, ``x[:, :1]``) slice of a tensor."""

    id: int
    node: ast.AST
    function: str
    kind: str  # strided | first
    base: str  # source text of the sliced expression
    step: int = 1
    start: int = 0
    axis: int = 0


@quick_init
@dataclass(frozen=True)
class PartialUse:
    """A slice consumed so that only part of the input decides the output (class 15)."""

    id: int
    slice: Slice
    consumer: ast.AST
    op: str  # the reduction or broadcast: torch.sum, Tensor.expand, ...
    kind: str  # strided-reduction | strided-kernel (a strided slice handed to a kernel) | first-broadcast

    @property
    def line(self) -> int:
        return getattr(self.consumer, "lineno", 0)


@quick_init
@dataclass(frozen=True)
class Condition:
    node: ast.expr
    flow: Provenance
    # forward arguments whose *values* the condition reads (empty for shape / dtype checks)
    value_args: frozenset[str]
    # the constructs that read values: (source text, node), e.g. ("x.min().item()", <Call>)
    value_reads: tuple[tuple[str, ast.AST], ...]
    # forward arguments whose metadata (shape, dtype, numel, contiguity, device) it reads
    meta_args: frozenset[str]
    # integer literals compared with metadata: (value, node), including names folded to ints
    shape_literals: tuple[tuple[int, ast.AST], ...]
    # state read: ``self.flag``, ``cuda_available`` (module globals), ``ext`` (an extension name)
    state: frozenset[str]

    @property
    def value_dependent(self) -> bool:
        return bool(self.value_args)

    @property
    def metadata_only(self) -> bool:
        return not self.value_args and bool(self.meta_args)

    @property
    def line(self) -> int:
        return self.node.lineno


@quick_init
@dataclass(frozen=True)
class Arm:
    """What one arm of a branch (or a try body / handler) does, inlined helpers included."""

    label: str  # body | orelse | after | try | handler
    first_line: int
    last_line: int
    kernels: tuple[KernelCall, ...] = ()
    ops: tuple[TorchOp, ...] = ()
    allocs: tuple[Alloc, ...] = ()
    returns: tuple[Return, ...] = ()  # returns of the branch's own function reached in this arm
    raises: bool = False
    # flows of names bound in this arm, as they stand at its end (``out = x`` / ``out = ext.f(x)``)
    bindings: Mapping[str, Provenance] = field(default_factory=dict)
    # for a ternary: the flow of the arm's expression
    value: Provenance | None = None
    terminates: bool = False

    @property
    def empty(self) -> bool:
        return self.first_line == 0


@quick_init
@dataclass(frozen=True)
class Branch:
    node: ast.AST
    kind: str  # if | while | ifexp | assert
    function: str
    depth: int
    condition: Condition
    body: Arm
    # the else arm; with no ``else``, the rest of the function (label "after"), whose ``bindings`` are the
    # old values of the names the body rebinds
    orelse: Arm

    @property
    def line(self) -> int:
        return self.node.lineno

    @property
    def arms(self) -> tuple[Arm, Arm]:
        return (self.body, self.orelse)


@quick_init
@dataclass(frozen=True)
class Handler:
    node: ast.ExceptHandler
    types: tuple[str, ...]  # canonical exception names; () for a bare except
    broad: bool  # bare, Exception, BaseException, RuntimeError-style catch-alls
    arm: Arm

    @property
    def line(self) -> int:
        return self.node.lineno


@quick_init
@dataclass(frozen=True)
class TryBlock:
    node: ast.Try
    function: str
    depth: int
    body: Arm
    handlers: tuple[Handler, ...]
    # what runs after the try when a handler falls through (``except: pass`` then ``return torch_op(x)``)
    after: Arm | None = None

    @property
    def line(self) -> int:
        return self.node.lineno


@quick_init
@dataclass(frozen=True)
class Holder:
    """A ``self`` attribute assigned in ``__init__`` that holds parameters, modules or tensors."""

    attr: str  # dotted from the model: ``fc``, ``block.conv`` (inside a submodule defined in the file)
    kind: str  # module | parameter | buffer | tensor | local | container | stateless | callable | extension | unknown | config
    cls: str  # canonical class or factory: torch.nn.Linear, torch.nn.Parameter, Block, torch.randn
    node: ast.AST
    # learnable tensors that decide the output: ("weight", "bias") for Linear(bias=True)
    params: tuple[str, ...] = ()
    # default initialisation is the identity (BatchNorm, LayerNorm, Parameter(torch.ones(...)))
    identity_init: bool = False
    # for callables: what the attribute refers to (``ext.relu``, ``torch.relu``, ``Fn.apply``)
    target: str = ""
    # built with ``inplace=True`` (``nn.ReLU(inplace=True)``): calling it writes into its argument
    inplace: bool = False

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)

    @property
    def holds_parameters(self) -> bool:
        return self.kind in ("module", "parameter", "buffer", "tensor", "local", "container")


@quick_init
@dataclass(frozen=True)
class ReferenceUse:
    """Where the candidate reuses the reference model (class 12)."""

    node: ast.AST
    kind: str  # inherits | super-forward | model-forward | instantiate | import | calls-instance
    detail: str
    reachable: bool  # inside forward-reachable code

    @property
    def line(self) -> int:
        return getattr(self.node, "lineno", 0)


# ---------------------------------------------------------------------------------------- the facts
@dataclass
class ModelFlow:
    host: HostModule
    # the model class analysed (``ModelNew``, or the nn.Module subclass with a forward), if any
    model: ast.ClassDef | None = None
    model_name: str | None = None
    # canonical names of the model's bases (``torch.nn.Module``, ``Model``)
    bases: tuple[str, ...] = ()
    forward: FunctionInfo | None = None
    init: FunctionInfo | None = None
    # forward's parameters after self, in order (``*args`` as ``args``)
    args: tuple[str, ...] = ()
    # annotation text per forward parameter (``torch.Tensor``, ``float``)
    arg_annotations: Mapping[str, str] = field(default_factory=dict)
    # every function analysed from forward, forward first
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    calls: list[CallEdge] = field(default_factory=list)
    ops: list[TorchOp] = field(default_factory=list)
    kernels: list[KernelCall] = field(default_factory=list)
    allocs: list[Alloc] = field(default_factory=list)
    returns: list[Return] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
    tries: list[TryBlock] = field(default_factory=list)
    mutations: list[Mutation] = field(default_factory=list)
    slices: list[Slice] = field(default_factory=list)
    partials: list[PartialUse] = field(default_factory=list)
    shape_uses: list[ShapeUse] = field(default_factory=list)
    # kernels whose results flow into each torch op (op id -> kernel ids): the op runs after them
    op_input_kernels: dict[int, frozenset[int]] = field(default_factory=dict)
    # ``self`` attribute chains read in reachable code (``fc``, ``fc.weight``, ``block.conv.bias``)
    attr_reads: dict[str, list[ast.AST]] = field(default_factory=dict)
    # ``self.parameters()``, ``getattr(self, name)``, ``self.__dict__``: reads the analysis cannot name
    dynamic_self_access: list[ast.AST] = field(default_factory=list)
    # parameter holders and other members assigned in __init__ (and submodule classes' __init__)
    holders: dict[str, Holder] = field(default_factory=dict)
    # attributes computed in __init__ from other attributes: ``w_t`` -> {``fc.weight``}
    derived: dict[str, frozenset[str]] = field(default_factory=dict)
    # names recording whether a kernel compiled or ran: ``cuda_available``, ``self.use_custom`` -> why
    fallback_flags: dict[str, str] = field(default_factory=dict)
    reference_uses: list[ReferenceUse] = field(default_factory=list)
    # the analysis gave up somewhere (depth, budget): absence of evidence is weaker
    truncated: bool = False
    _flows: dict[ast.AST, Provenance] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ queries
    def flow_of(self, node: ast.AST) -> Provenance | None:
        """The flow computed for an expression node in reachable code (the last context it was reached in)."""
        return self._flows.get(node)

    @cached_property
    def forward_returns(self) -> list[Return]:
        """forward's own ``return`` statements (depth 0).  Kept once built, as ``output`` is: the
        rules read it after the analysis has set ``returns`` for good (several rules, several times)."""
        return [r for r in self.returns if r.depth == 0]

    @cached_property
    def output(self) -> Provenance:
        """The join of every value forward returns."""
        return Provenance.join_all([r.flow for r in self.forward_returns])

    # module functions decorated as device kernels by other JITs (``@cuda.jit`` from numba)
    jit_kernels: frozenset[str] = frozenset()

    def feeds_output(self, function: str) -> bool:
        """Whether values returned by ``function`` can reach forward's output (forward itself does)."""
        if self.forward is not None and function == self.forward.qualname:
            return True
        return function in self.output.via

    @property
    def defines_kernel(self) -> bool:
        """The file compiles an extension, defines a Triton / numba kernel, or calls a custom ``torch.ops`` op."""
        return bool(self.host.extensions or self.host.triton_kernels or self.jit_kernels
                    or any(k.kind == "torch_ops" for k in self.kernels))

    def op(self, op_id: int) -> TorchOp:
        return self.ops[op_id]

    def kernel(self, kernel_id: int) -> KernelCall:
        return self.kernels[kernel_id]

    def ops_of(self, flow: Provenance) -> list[TorchOp]:
        return sorted((self.ops[i] for i in flow.ops), key=lambda o: (o.line, o.name))

    def kernels_of(self, flow: Provenance) -> list[KernelCall]:
        return sorted((self.kernels[i] for i in flow.kernels), key=lambda k: k.line)

    def allocs_of(self, flow: Provenance) -> list[Alloc]:
        return sorted((self.allocs[i] for i in flow.allocs), key=lambda a: a.line)

    def partials_of(self, flow: Provenance) -> list[PartialUse]:
        return sorted((self.partials[i] for i in flow.partial), key=lambda p: p.line)

    def returned_test(self, node: ast.expr, depth: int = 0) -> ast.expr:
        """What a condition written as a helper call tests: ``if _is_tuned(x):`` with ``def _is_tuned(t):
        return t.shape[-1] == 4096`` tests that comparison.  The helper's one ``return`` value, through up
        to two helpers; ``node`` itself when it is no call to an analysed helper or the helper returns
        more than one expression (which arm is which is then unclear)."""
        if type(node) is not ast.Call or depth > 1:
            return node
        for e in self.calls:  # only for conditions that are calls: few, and few edges
            if e.node is node:
                info = self.functions.get(e.callee)
                if info is None:
                    return node
                rets = [s.value for s in ast.walk(info.node) if isinstance(s, ast.Return) and s.value is not None]
                if len(rets) != 1:
                    return node
                return self.returned_test(rets[0], depth + 1)
        return node

    def reads(self, chain: str) -> bool:
        """Whether reachable code reads ``self.<chain>`` or something inside it."""
        if chain in self.attr_reads:
            return True
        prefix = chain + "."
        return any(k.startswith(prefix) for k in self.attr_reads)


__all__ = [
    "Alloc", "Arm", "Branch", "CallEdge", "Condition", "FunctionInfo", "Handler", "Holder", "KernelCall",
    "Mutation", "PartialUse", "ModelFlow", "ReferenceUse", "Return", "ShapeUse", "Slice", "TorchOp", "TryBlock",
    "Provenance", "EMPTY",
]
