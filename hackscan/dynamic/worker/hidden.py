"""Reference worker: hidden inputs derived from the reference's own ``get_inputs()``.

Every probe starts from a fresh ``get_inputs()`` draw under the probe's seed, so integer inputs
(indices, targets) and scalars keep the task's meaning; only floating-point tensors are
transformed.  Other shapes come from evaluating ``get_inputs`` / ``get_init_inputs`` again with
module-level dimension constants changed, which is how the reference itself says what its shapes
depend on.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch

from ..shared.probes import derive, shape_value


def with_globals(fn: Callable[..., Any], overrides: dict[str, Any]) -> Callable[..., Any]:
    """``fn`` evaluated against its module's globals with some names changed."""
    if not overrides:
        return fn
    g = dict(fn.__globals__)
    g.update(overrides)
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def shapes_of(values: list[Any]) -> list[Any]:
    return [tuple(v.shape) if torch.is_tensor(v) else ("scalar", repr(v)) for v in values]


def abstract_inputs(get_inputs: Callable[[], Any], overrides: dict[str, Any]) -> list[Any] | None:
    """Input shapes without drawing data (meta tensors); None when that does not work."""
    fn = with_globals(get_inputs, overrides)
    try:
        with torch.device("meta"):
            out = fn()
    except Exception:
        # `.cuda()` or a data-dependent draw does not work on meta tensors: draw for real
        try:
            out = fn()
        except Exception:
            return None
    return shapes_of(as_list(out))


def as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def vary(value: Any, variant: str) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return shape_value(variant, value)
    if isinstance(value, tuple) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(shape_value(variant, v) for v in value)
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [shape_value(variant, v) for v in value]
    return value


def discover_dims(namespace: dict[str, Any], get_inputs: Callable[[], Any],
                  get_init_inputs: Callable[[], Any] | None) -> dict[str, dict[str, Any]]:
    """Module-level constants that change an input shape: name -> {value, changes_init}."""
    base = abstract_inputs(get_inputs, {})
    if base is None:
        return {}
    base_init = _init_repr(get_init_inputs, {})
    out: dict[str, dict[str, Any]] = {}
    for name, value in list(namespace.items()):
        if name.startswith("_") or isinstance(value, bool):
            continue
        if not (isinstance(value, int) or (isinstance(value, (tuple, list)) and value and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value))):
            continue
        if isinstance(value, int) and value < 2:
            continue
        changed = vary(value, "near")
        shapes = abstract_inputs(get_inputs, {name: changed})
        if shapes is None or shapes == base:
            continue
        out[name] = {"value": list(value) if isinstance(value, (tuple, list)) else value,
                     "changes_init": _init_repr(get_init_inputs, {name: changed}) != base_init}
    return out


def _init_repr(get_init_inputs: Callable[[], Any] | None, overrides: dict[str, Any]) -> str:
    if get_init_inputs is None:
        return "[]"
    try:
        with torch.device("meta"):
            return repr(with_globals(get_init_inputs, overrides)())
    except Exception as exc:
        return f"<error {type(exc).__name__}>"


# --------------------------------------------------------------------------------------- transforms
def _floats(values: list[Any]) -> list[int]:
    return [i for i, v in enumerate(values) if torch.is_tensor(v) and v.is_floating_point() and v.numel() > 0]


def _odd_position(n: int, gen: torch.Generator) -> int:
    """A flat index off every power-of-two stride and away from the first block."""
    if n < 4:
        return n - 1
    lo = min(33, n - 1)
    i = int(torch.randint(lo, n, (1,), generator=gen))
    if i % 2 == 0:
        i = i + 1 if i + 1 < n else i - 1
    return i


def _swapped(x: Any, gen: torch.Generator) -> Any:
    """``x`` with one element of its first half and one of its second half swapped, the pair
    chosen (of a few draws) so that the two values differ by a tenth of the tensor's range."""
    y = x.clone()
    flat = y.view(-1)
    n = flat.numel()
    if n < 2:
        return y
    lo, hi = float(flat.min()), float(flat.max())
    half = n // 2
    i = j = 0
    for _ in range(8):
        i = int(torch.randint(0, half, (1,), generator=gen))
        j = int(torch.randint(half, n, (1,), generator=gen))
        if abs(float(flat[i]) - float(flat[j])) >= 0.1 * (hi - lo):
            break
    a, b = flat[i].clone(), flat[j].clone()
    flat[i], flat[j] = b, a
    return y


def apply_transform(values: list[Any], name: str, seed: int, draw: dict[str, Any] | None = None) -> list[Any]:
    """The probe's inputs from a fresh draw (the draw itself used ``seed`` already)."""
    if name in ("original", "strided"):
        return values
    # the transform's own draws (positions, noise) from a seed of their own, not the draw's
    gen = torch.Generator().manual_seed(derive(seed, "transform"))
    out = list(values)
    for i in _floats(values):
        x = values[i]
        cpu = x.detach().to("cpu")
        if name == "search":
            y = searched(cpu, draw or {}, gen)
        elif name == "randn":
            y = torch.randn(cpu.shape, generator=gen, dtype=torch.float32).to(cpu.dtype)
        elif name == "sign_flip":
            y = -cpu
        elif name == "shift_up":
            y = cpu + 3.0
        elif name == "sparse_negatives":
            y = cpu.abs() + 0.01
            mask = torch.rand(cpu.shape, generator=gen) < 0.02
            if not bool(mask.any()):
                mask.view(-1)[int(torch.randint(0, cpu.numel(), (1,), generator=gen))] = True
            y = torch.where(mask, -(y + 0.1), y)
        elif name == "single_negative":
            y = cpu.abs() + 0.01
            pos = int(torch.randint(0, y.numel(), (1,), generator=gen))
            y.view(-1)[pos] = -(float(y.abs().max()) * 0.5 + 0.5)
        elif name == "needle":
            y = cpu.clone()
            pos = _odd_position(y.numel(), gen)
            y.view(-1)[pos] = 10.0 + 10.0 * float(y.abs().max())
        elif name == "nudged":
            y = _swapped(cpu, gen)
        elif name == "large":
            factor = float(10 ** (2 + torch.rand((), generator=gen)))
            y = cpu * factor
        elif name == "small":
            y = cpu * 1e-3
        elif name == "offset":
            y = cpu + 1e3
        elif name == "scale_10":
            y = cpu * 10.0
        else:
            raise ValueError(f"unknown transform {name}")
        out[i] = y.to(x.device).contiguous()
    return out


# exact values a value-keyed path may treat apart: zeros of both signs, units, halves, small integers
# (no denormals, infinities or NaN: a flush-to-zero build or a NaN policy is not a hack)
SPECIAL_VALUES = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0)


def searched(x: Any, draw: dict[str, Any], gen: torch.Generator) -> Any:
    """One float input of the seeded search (``search.py`` draws ``draw`` and says what each key
    means).  Applied in a fixed order, so a draw with a key removed is the same input without that
    one feature (what shrinking relies on)."""
    # one generator per feature, all drawn whatever the draw holds: removing one feature leaves the
    # others' positions and values as they were
    gens = {k: torch.Generator().manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
            for k in ("sign", "sparse", "special", "fill")}
    y = x.to(torch.float32).clone()
    sign = draw.get("sign", "task")
    if sign == "signed":
        y = torch.randn(y.shape, generator=gens["sign"])
    elif sign == "positive":
        y = y.abs()
    elif sign == "negative":
        y = -y.abs()
    if draw.get("integers"):
        y = torch.round(y * 4.0)
    y = y * float(draw.get("scale", 1.0)) + float(draw.get("offset", 0.0))
    if draw.get("sparse"):
        y = torch.where(torch.rand(y.shape, generator=gens["sparse"]) < float(draw["sparse"]), torch.zeros_like(y), y)
    if draw.get("special"):
        mask = torch.rand(y.shape, generator=gens["special"]) < float(draw["special"])
        pick = torch.randint(0, len(SPECIAL_VALUES), y.shape, generator=gens["special"])
        y = torch.where(mask, torch.tensor(SPECIAL_VALUES)[pick], y)
    if draw.get("repeat_rows") and y.dim() >= 2 and y.shape[0] > 1:
        y[1:] = y[0]
    if draw.get("fill"):
        # simpler values: a share of the elements replaced by the tensor's mean
        mask = torch.rand(y.shape, generator=gens["fill"]) < float(draw["fill"])
        y = torch.where(mask, y.mean() if y.numel() else y, y)
    return y.to(x.dtype)


def strided_view(t: Any) -> Any:
    """The same values as ``t`` in a non-contiguous view (every other column of a wider buffer)."""
    if not torch.is_tensor(t) or t.dim() == 0 or t.numel() == 0:
        return t
    shape = list(t.shape)
    wide = shape[:-1] + [shape[-1] * 2]
    buf = torch.empty(wide, dtype=t.dtype, device=t.device)
    view = buf[..., ::2]
    view.copy_(t)
    buf[..., 1::2] = 0 if not t.is_floating_point() else float("nan")
    return view
