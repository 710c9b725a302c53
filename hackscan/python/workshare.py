"""How much of a reference's arithmetic its matmuls / convolutions are: what TF32 can change.

TF32 switches (HS172) only touch GEMMs and convolutions.  Whether one is a real precision downgrade
depends on how much of the reference's work those ops are: a GEMM that contracts over 4096 values is
~8000 flops per output element and dwarfs any elementwise tail, while ``nn.Linear(2, 64)`` followed
by a dozen activations is mostly elementwise work that TF32 leaves alone.

The estimate is per output element, from the reference facts alone (no execution): a heavy op costs
``2 * K`` flops, K being its contraction length (the dim two input tensors share, or the
``in_features`` / ``in_channels`` x kernel area read from ``get_init_inputs()``); every other compute op
a few flops.  It is coarse by design; it only has to tell "a real share" from "a sliver".
"""

from __future__ import annotations

from .catalog import classify_torch, op_family
from .reference import ReferenceFacts

MATMUL_FAMILIES = frozenset({"matmul", "einsum", "attention", "rnn"})
CONV_FAMILIES = frozenset({"conv", "conv_transpose"})
# flops per element charged to a non-GEMM compute op (an activation, a norm's passes, a reduction)
ELEMENTWISE_FLOPS = 4.0
# below this share of the estimated flops, TF32 is a warning: the heavy op is a sliver of the work
REAL_SHARE = 0.25


def contraction_length(ref: ReferenceFacts, kind: str) -> int | None:
    """K of the reference's heavy op: the largest dim two input tensors share (``A @ B``), else the
    first integer of ``get_init_inputs()`` (in_features / in_channels) times the kernel area for a
    convolution (the third integer, squared); None when neither is known."""
    shapes = [s.shape for s in ref.inputs if s.shape]
    if len(shapes) >= 2:
        shared = set(d for d in shapes[0] if isinstance(d, int)) & set(d for d in shapes[1] if isinstance(d, int))
        if shared:
            return max(shared)
    ints = [v for v in ref.init_inputs if isinstance(v, int) and not isinstance(v, bool)]
    if not ints:
        return None
    k = ints[0]
    if kind == "conv" and len(ints) >= 3:
        spatial = 3 if any(op_family(o) in CONV_FAMILIES and o.endswith("3d") for o in ref.forward_ops) else 2
        if any(o.endswith("1d") for o in ref.forward_ops):
            spatial = 1
        k *= ints[2] ** spatial
    return k


def heavy_share(ref: ReferenceFacts, kind: str) -> tuple[float | None, str]:
    """The estimated share (0..1) of the reference's flops in ops a TF32 switch of ``kind`` (``matmul``
    or ``conv``) affects, with a one-line account; None when the facts do not allow an estimate."""
    wanted = MATMUL_FAMILIES if kind == "matmul" else CONV_FAMILIES
    heavy = other = 0
    for op in ref.forward_ops:
        fam = op_family(op)
        if fam in wanted:
            heavy += 1
        elif op.startswith("torch.") and classify_torch(op) != "compute":
            continue
        elif fam not in MATMUL_FAMILIES | CONV_FAMILIES:
            other += 1
    if not heavy:
        return 0.0, f"the reference has no {'matmul' if kind == 'matmul' else 'convolution'}"
    k = contraction_length(ref, kind)
    if k is None:
        return None, "the contraction length is not known statically"
    heavy_flops = 2.0 * k * heavy
    share = heavy_flops / (heavy_flops + ELEMENTWISE_FLOPS * other)
    return share, (f"{'matmul' if kind == 'matmul' else 'convolution'} work is about {share:.0%} of the reference's "
                   f"estimated flops (contraction length {k}, {heavy} heavy op(s) against {other} other op(s))")
