"""Which inputs each call sees: a pool of fresh sets, rotated, with new values on every call.

A timed call must not be able to return a remembered answer.  The pool holds ``N`` distinct input
sets (from ``get_inputs()`` with fresh seeds) and ``N`` working slots the model is called with.
Call ``j`` uses slot ``j % N`` (so consecutive calls see different pointers) and fills it with
values nobody has seen before:

* the first ``N`` calls get the fresh sets themselves;
* later calls get a convex mix ``a * set_p + (1 - a) * set_q`` of two different fresh sets, with
  ``a`` and the pair chosen by ``j``.  A mix keeps what a task's inputs are made of: the support
  (``rand``'s [0, 1), signs), zeros and linear structure (triangular, symmetric, banded), so a
  legitimate kernel that relies on the task's input structure stays correct, while a cache keyed
  by pointer, shape or content returns a stale answer that the output check sees;
* non-floating tensors (indices, labels, masks) take the values of one of the two sets;
* with a single set, later calls get that set scaled by a factor in [0.5, 1): zeros, signs, the
  support of ``rand`` and linear structure survive, and the values are new on every call.

Both children build the same plan from the same sets, so call ``j`` sees bitwise the same inputs
in the candidate and the reference, and the parent can compare their outputs call by call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

_GOLDEN = 0.6180339887498949


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors(item)]
    return []


def nbytes(obj: Any) -> int:
    """Bytes of the distinct storages of every tensor in ``obj``."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in _tensors(obj):
        try:
            storage = t.untyped_storage()
            key = (storage.data_ptr(), storage.nbytes())
        except (RuntimeError, NotImplementedError):
            key = (id(t), t.numel() * t.element_size())
        if key not in seen:
            seen.add(key)
            total += key[1]
    return total


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, list):
        return [_clone(x) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_clone(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    return obj


def _relaid(obj: Any, offset: int) -> Any:
    """``obj`` with every tensor copied to new memory ``offset`` elements (mod 1024) into a larger
    allocation (same shape, strides, dtype and device; contiguous tensors only are moved)."""
    if isinstance(obj, torch.Tensor):
        if not obj.is_contiguous() or obj.numel() == 0:
            return obj.detach().clone()
        base = torch.empty(obj.numel() + offset, dtype=obj.dtype, device=obj.device)
        out = base[offset:].view(obj.shape)
        out.copy_(obj)
        return out
    if isinstance(obj, list):
        return [_relaid(x, offset) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_relaid(x, offset) for x in obj)
    if isinstance(obj, dict):
        return {k: _relaid(v, offset) for k, v in obj.items()}
    return obj


def _zip_fill(dst: Any, srcs: list[Any], fill: Any) -> None:
    if isinstance(dst, torch.Tensor):
        fill(dst, [s for s in srcs])
    elif isinstance(dst, (list, tuple)):
        for i, d in enumerate(dst):
            _zip_fill(d, [s[i] for s in srcs], fill)
    elif isinstance(dst, dict):
        for k, d in dst.items():
            _zip_fill(d, [s[k] for s in srcs], fill)


def _mix_weight(j: int) -> float:
    # deterministic, never near 0 or 1, so the mix is far from either parent set
    return 0.25 + 0.5 * ((j * _GOLDEN) % 1.0)


# the share of values the ``sparse`` series keeps (the rest exactly zero), and the seed of its
# mask: fixed, so that both workers zero the same positions
SPARSE_KEEP = 0.1
_SPARSE_SEED = 0x5EED

# series whose call ``j`` gets the values of the main-distribution call timed just before it, in
# storage of its own (``InputPlan.copy_of``); the transform itself leaves the values alone
REPEAT = "repeat"


def _sparse(t: torch.Tensor) -> None:
    gen = torch.Generator(device=t.device).manual_seed(_SPARSE_SEED)
    keep = torch.rand(t.shape, generator=gen, device=t.device) < SPARSE_KEEP
    t.masked_fill_(~keep, 0)


def apply_hidden(obj: Any, name: str) -> None:
    """Move the floating tensors of ``obj`` to a hidden distribution, in place.  None of these
    changes the work an honest kernel does (``sparse`` can only lessen it): a time that grows on
    them much more than the reference's is a skip keyed on the values."""
    if name == REPEAT:
        return
    for t in _tensors(obj):
        if not t.is_floating_point() and not t.is_complex():
            continue
        if name == "mixed":
            t.sub_(0.5).mul_(4.0)
        elif name == "negated":
            t.neg_()
        elif name == "shifted":
            # rand's [0, 1) becomes [3, 4): a guard on "at most 1" or "below 2" sees new values
            t.add_(3.0)
        elif name == "sparse":
            _sparse(t)
        else:
            raise ValueError(f"unknown hidden distribution {name!r}")


def batch_size(sets: Sequence[Sequence[Any]]) -> int | None:
    """The leading dimension of the first tensor of the first set, when it is at least 2."""
    tensors = _tensors(list(sets[0])) if sets else []
    if not tensors or tensors[0].dim() == 0 or tensors[0].shape[0] < 2:
        return None
    return int(tensors[0].shape[0])


def halved(sets: Sequence[Sequence[Any]]) -> list[list[Any]] | None:
    """The sets with every tensor whose leading dimension is the batch (the first tensor's) cut
    to half of it: the same task on half the work.  None when there is no batch to halve.  Whether
    the task accepts it (a square matmul whose both operands lead with the batch does not) is the
    reference's to say: the series is skipped where the reference fails on it."""
    batch = batch_size(sets)
    if batch is None:
        return None
    half = batch // 2

    def cut(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return obj[:half].clone() if obj.dim() >= 1 and obj.shape[0] == batch else obj
        if isinstance(obj, list):
            return [cut(x) for x in obj]
        if isinstance(obj, tuple):
            return tuple(cut(x) for x in obj)
        if isinstance(obj, dict):
            return {k: cut(v) for k, v in obj.items()}
        return obj

    return [cut(list(s)) for s in sets]


class InputPlan:
    """The pool and the rule that says which values call ``j`` sees."""

    def __init__(self, sets: Sequence[Sequence[Any]], max_pool_bytes: int | None = None, max_sets: int | None = None):
        if not sets:
            raise ValueError("the input plan needs at least one input set")
        per_set = max(1, nbytes(list(sets[0])))
        keep = len(sets)
        if max_sets is not None:
            keep = min(keep, max(1, max_sets))
        if max_pool_bytes is not None:
            # originals + working slots: two copies of every set
            keep = min(keep, max(1, max_pool_bytes // (2 * per_set)))
        self.originals: list[list[Any]] = [list(s) for s in sets[:keep]]
        self.slots: list[list[Any]] = [_clone(list(s)) for s in self.originals]
        self.set_bytes = per_set
        self.refresh = "mix" if keep >= 2 else "scale"

    def relayout(self, salt: int) -> None:
        """Move every working slot to freshly allocated memory, each tensor at an offset of 0-4 KiB
        chosen by ``salt``.  The same reference's fastest call took 0.062 ms in one worker process
        and 0.071 ms in the next on the shared host: a bias per process that no repeat inside the
        process can see.  Where the buffers sit (pages, cache sets against the flush buffer) is one
        suspect; moving the slots between blocks turns that part into scatter the run sees.  One
        trial showed no measurable gain from it, nor harm (docs/measured.md)."""
        fresh = []
        for k, slot in enumerate(self.slots):
            fresh.append(_relaid(slot, (salt * 7919 + k * 104729) % 1024))
        self.slots = fresh  # the old slots are freed only now: the new ones cannot reuse them

    @property
    def size(self) -> int:
        return len(self.originals)

    def inputs_for(self, j: int, hidden: str | None = None) -> list[Any]:
        """Fill the slot of call ``j`` with its values (see the module doc) and return it."""
        n = self.size
        k = j % n
        slot = self.slots[k]
        rnd = j // n
        if rnd == 0:
            _zip_fill(slot, [self.originals[k]], lambda d, s: d.copy_(s[0]))
        elif n >= 2:
            p = k
            q = (k + 1 + (rnd - 1) % (n - 1)) % n
            a = _mix_weight(j)
            pick = self.originals[p] if rnd % 2 else self.originals[q]

            def fill(d: torch.Tensor, s: list[torch.Tensor]) -> None:
                if (d.is_floating_point() or d.is_complex()) and s[0].shape == s[1].shape:
                    d.copy_(s[0]).mul_(a).add_(s[1], alpha=1.0 - a)
                else:
                    d.copy_(s[2])

            _zip_fill(slot, [self.originals[p], self.originals[q], pick], fill)
        else:
            # one set only: scale it (a roll or a shuffle would break triangular or banded inputs)
            factor = 0.5 + 0.5 * ((rnd * _GOLDEN) % 1.0)

            def scale(d: torch.Tensor, s: list[torch.Tensor]) -> None:
                d.copy_(s[0])
                if d.is_floating_point() or d.is_complex():
                    d.mul_(factor)

            _zip_fill(slot, [self.originals[0]], scale)
        if hidden is not None:
            apply_hidden(slot, hidden)
        return slot

    def copy_of(self, j: int, values: list[Any]) -> list[Any]:
        """The slot of call ``j`` filled with a copy of ``values`` (another plan's slot, same
        shapes): the same contents in other storage, for the ``repeat`` series."""
        slot = self.slots[j % self.size]
        _zip_fill(slot, [values], lambda d, s: d.copy_(s[0]))
        return slot

    def digest(self) -> list[list[float]]:
        """A cheap fingerprint of the pool, so the parent can check both children saw the same sets."""
        out: list[list[float]] = []
        for s in self.originals:
            row: list[float] = []
            for t in _tensors(s):
                row.append(float(torch.sum(t.detach(), dtype=torch.float64).item()) if t.numel() else 0.0)
            out.append(row)
        return out
