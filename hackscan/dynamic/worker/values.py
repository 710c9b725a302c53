"""Worker side: Python values (init arguments, model outputs) to and from wire-safe structures.

JSON has no tuples, dtypes or devices, and a model may return a tuple of tensors or a scalar.
``pack`` keeps those apart (``{"__tuple__": [...]}``) so the other worker rebuilds the same
arguments; ``flatten`` turns an output into leaves plus a structure string the parent compares.
"""

from __future__ import annotations

from typing import Any

import torch


def pack(v: Any) -> Any:
    if torch.is_tensor(v):
        return v
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
        return v
    if isinstance(v, tuple):
        return {"__tuple__": [pack(x) for x in v]}
    if isinstance(v, list):
        return [pack(x) for x in v]
    if isinstance(v, dict):
        return {"__dict__": [[pack(k), pack(x)] for k, x in v.items()]}
    if isinstance(v, torch.dtype):
        return {"__dtype__": str(v).replace("torch.", "")}
    if isinstance(v, torch.device):
        return {"__device__": str(v)}
    raise TypeError(f"cannot pass a {type(v).__name__} between workers")


def unpack(v: Any) -> Any:
    if isinstance(v, dict):
        if "__tuple__" in v:
            return tuple(unpack(x) for x in v["__tuple__"])
        if "__dict__" in v:
            return {unpack(k): unpack(x) for k, x in v["__dict__"]}
        if "__dtype__" in v:
            return getattr(torch, v["__dtype__"])
        if "__device__" in v:
            return torch.device(v["__device__"])
        return {k: unpack(x) for k, x in v.items()}
    if isinstance(v, list):
        return [unpack(x) for x in v]
    return v


def flatten(out: Any, leaves: list[Any] | None = None) -> tuple[list[Any], str]:
    """Leaves (tensors and numbers) in order, and a structure string such as ``(T,T)``."""
    if leaves is None:
        leaves = []
    if torch.is_tensor(out):
        if type(out) not in (torch.Tensor, torch.nn.Parameter):
            # a subclass's __torch_function__ is the candidate's code: it can compute the result
            # only when read (never in a timing loop that drops it) or answer a comparison with
            # anything.  The leaf is the memory it holds when forward returned, and the structure
            # names the type, so it differs from a reference that returns a plain tensor
            with torch._C.DisableTorchFunctionSubclass():
                leaves.append(out.as_subclass(torch.Tensor))
            return leaves, f"T<{type(out).__name__}>"
        leaves.append(out)
        return leaves, "T"
    if isinstance(out, (tuple, list)):
        parts = [flatten(x, leaves)[1] for x in out]
        open_, close = ("(", ")") if isinstance(out, tuple) else ("[", "]")
        return leaves, open_ + ",".join(parts) + close
    if isinstance(out, dict):
        parts = [f"{k}:{flatten(out[k], leaves)[1]}" for k in sorted(out, key=str)]
        return leaves, "{" + ",".join(parts) + "}"
    if isinstance(out, bool) or out is None:
        leaves.append(out)
        return leaves, "S"
    if isinstance(out, (int, float)):
        leaves.append(torch.tensor(float(out), dtype=torch.float64))
        return leaves, "N"
    leaves.append(None)
    return leaves, f"?{type(out).__name__}"


def to_device(values: list[Any], device: str) -> list[Any]:
    return [v.to(device) if torch.is_tensor(v) else v for v in values]


def clone_all(values: list[Any], device: str | None = None) -> list[Any]:
    out = []
    for v in values:
        if torch.is_tensor(v):
            v = v.detach().clone() if device is None else v.detach().to(device, copy=True)
        out.append(v)
    return out


def to_double(values: list[Any]) -> list[Any]:
    return [v.double() if torch.is_tensor(v) and v.is_floating_point() else v for v in values]
