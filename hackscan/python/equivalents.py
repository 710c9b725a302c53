"""The one table of equivalent ops: which torch spellings compute the same work.

Rules that compare a candidate's torch ops with the reference's (HS104-HS108, HS118, HS204, HS508)
ask this table, so that a rule's severity never depends on how either side spells the op:
``nn.Linear`` against ``torch.addmm``, ``F.silu`` against ``x * torch.sigmoid(x)``, ``nn.LayerNorm``
against ``var_mean`` + ``rsqrt``, a 1x1 ``nn.Conv2d`` against ``permute`` + ``torch.mm``.

Three kinds of entry, all on op *families* (``catalog.op_family``: ``F.relu``, ``x.relu_()`` and
``nn.ReLU`` are already the one family ``relu``):

* ``SAME``: families that are one operation under different names (``relu`` is ``clamp(min=0)``;
  ``mean`` is ``sum`` over a count; ``einsum`` and ``tensordot`` are GEMMs; the norms are one
  normalisation whatever axes they normalise over).  Either side's member matches the other's.
* ``COMPOSITES``: an op and the compositions that compute it (``silu`` = ``sigmoid`` and ``mul``,
  ``layer_norm`` = ``var_mean`` and ``rsqrt``).  A reference written as the composition also
  "computes" the op, and a reference that calls the op also computes the composition's
  *distinctive* parts (``sigmoid``, ``rsqrt``, ``erf``), never the generic arithmetic (``mul``,
  ``add``, ``sum``) that any epilogue has: counting those would make every ``x + 1`` the
  reference's op.
* ``LOWERS_TO``: work a reference op may be computed as (a convolution as a GEMM: a 1x1 conv is
  ``permute`` + ``mm``, any conv is ``unfold`` + ``mm``).  One way only: a reference GEMM is not
  computed by a candidate's convolution.

``reference_work(families)`` closes a reference's families under the table; a candidate op is the
reference's op when one of its families is in that closure.
"""

from __future__ import annotations

import functools

# one operation, several names (after ``op_family``)
SAME: tuple[frozenset[str], ...] = (
    frozenset({"matmul", "einsum", "tensordot"}),
    frozenset({"relu", "clamp", "threshold"}),
    frozenset({"sum", "mean", "nansum", "nanmean"}),
    frozenset({"max", "min", "aminmax"}),
    frozenset({"softmax", "log_softmax", "logsumexp", "softmin"}),
    frozenset({"layer_norm", "group_norm", "instance_norm", "batch_norm", "rms_norm", "native_layer_norm"}),
    frozenset({"var", "std", "var_mean", "std_mean"}),
    frozenset({"gelu", "fast_gelu"}),
    frozenset({"elu", "selu", "celu"}),
)

# op -> (compositions that compute it, its distinctive parts)
COMPOSITES: dict[str, tuple[tuple[frozenset[str], ...], frozenset[str]]] = {
    "silu": ((frozenset({"sigmoid", "mul"}),), frozenset({"sigmoid"})),
    "gelu": ((frozenset({"erf", "mul"}), frozenset({"tanh", "pow"})), frozenset({"erf"})),
    "mish": ((frozenset({"tanh", "softplus"}),), frozenset({"softplus"})),
    "softplus": ((frozenset({"log1p", "exp"}), frozenset({"log", "exp"})), frozenset({"log1p"})),
    "sigmoid": ((frozenset({"exp", "reciprocal"}),), frozenset()),
    "hardswish": ((frozenset({"hardtanh", "mul"}), frozenset({"relu6", "mul"})), frozenset()),
    "softmax": ((frozenset({"exp", "sum"}), frozenset({"exp", "div"})), frozenset({"exp"})),
    "log_softmax": ((frozenset({"logsumexp", "sub"}),), frozenset({"logsumexp"})),
    "layer_norm": ((frozenset({"var_mean", "rsqrt"}), frozenset({"var", "rsqrt"}), frozenset({"var", "sqrt"}),
                    frozenset({"std", "mean"}), frozenset({"var_mean", "sqrt"})),
                   frozenset({"var_mean", "var", "std", "std_mean", "rsqrt"})),
    "rms_norm": ((frozenset({"rsqrt", "pow", "mean"}), frozenset({"rsqrt", "square", "mean"}),
                  frozenset({"norm", "div"})), frozenset({"rsqrt"})),
    "cosine_similarity": ((frozenset({"norm", "sum", "div"}),), frozenset({"norm"})),
    "pairwise_distance": ((frozenset({"norm", "sub"}),), frozenset({"norm"})),
    "cross_entropy": ((frozenset({"log_softmax", "nll_loss"}),), frozenset({"log_softmax", "nll_loss"})),
    "mse_loss": ((frozenset({"pow", "mean", "sub"}), frozenset({"square", "mean", "sub"})), frozenset()),
}

# a reference op and the work it may be computed as (one way)
LOWERS_TO: dict[str, frozenset[str]] = {
    "conv": frozenset({"matmul"}),            # 1x1 conv == permute + mm; im2col (unfold) + mm
    "conv_transpose": frozenset({"matmul"}),  # col2im after a GEMM
    "attention": frozenset({"matmul", "softmax"}),
    "rnn": frozenset({"matmul"}),
    "linear": frozenset({"matmul"}),
}

_SAME_OF: dict[str, frozenset[str]] = {}
for _group in SAME:
    for _name in _group:
        _SAME_OF[_name] = _SAME_OF.get(_name, frozenset()) | _group


def same_as(family: str) -> frozenset[str]:
    """The families that are ``family`` under another name (``family`` itself included)."""
    return _SAME_OF.get(family, frozenset({family}))


def _with_same(families: frozenset[str]) -> frozenset[str]:
    out: set[str] = set()
    for f in families:
        out |= same_as(f)
    return frozenset(out)


@functools.lru_cache(maxsize=1024)  # a pure function of one reference's families; references repeat
def reference_work(families: frozenset[str]) -> frozenset[str]:
    """Every family whose op computes the reference's work: its own, their other names, the ops its
    compositions spell (``sigmoid`` + ``mul`` -> ``silu``), the distinctive parts of its ops
    (``layer_norm`` -> ``rsqrt``) and what its heavy ops lower to (``conv`` -> ``matmul``)."""
    out = set(_with_same(families))
    for op, (compositions, parts) in COMPOSITES.items():
        if op in out or any(c <= out for c in compositions):
            out.add(op)
            out |= parts
    for op, lowered in LOWERS_TO.items():
        if op in out:
            out |= lowered
    return _with_same(frozenset(out))


def computes_reference(op_families: frozenset[str], ref_families: frozenset[str]) -> bool:
    """Does an op (by its families) compute work the reference computes, however either is spelled?"""
    if not ref_families:
        return False
    return bool(op_families & reference_work(ref_families))


