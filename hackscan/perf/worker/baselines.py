"""The baselines a speedup is measured against, in the reference child.

* ``eager_fp32``: eager PyTorch with strict fp32 (``allow_tf32`` off for matmul and cuDNN,
  ``float32_matmul_precision("highest")``) — what KernelBench-style harnesses time;
* ``eager_tf32``: eager PyTorch with TF32 allowed (``allow_tf32`` on, precision ``"high"``) — what
  anyone running PyTorch on an Ampere-or-later GPU gets by setting one flag; the headline on GPUs;
* ``compile``: ``torch.compile`` of the reference under the headline precision (TF32 on GPUs),
  where it compiles.  On the CPU it runs only when asked (``compile="always"``): compiling costs
  tens of seconds on a small CI machine.

On the CPU TF32 does not exist, so there is no ``eager_tf32`` and the headline is ``eager_fp32``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

STRICT = "eager_fp32"
TF32 = "eager_tf32"
COMPILE = "compile"


def _flags() -> dict[str, Any]:
    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def precision_flags() -> dict[str, Any]:
    """The global precision switches a candidate could flip (class 14); reported before/after."""
    flags = _flags()
    flags["fp16_reduced_precision_reduction"] = bool(
        getattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", False))
    flags["bf16_reduced_precision_reduction"] = bool(
        getattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False))
    return flags


@contextlib.contextmanager
def precision(tf32: bool) -> Iterator[None]:
    saved = _flags()
    try:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved["matmul_allow_tf32"]
        torch.backends.cudnn.allow_tf32 = saved["cudnn_allow_tf32"]
        torch.set_float32_matmul_precision(saved["float32_matmul_precision"])


def names_for(device: torch.device, compile_enabled: bool, tf32: bool = True) -> list[str]:
    names = [STRICT]
    if device.type == "cuda" and tf32:
        names.append(TF32)
    if compile_enabled:
        names.append(COMPILE)
    return names


def headline_for(device: torch.device, tf32: bool = True) -> str:
    return TF32 if device.type == "cuda" and tf32 else STRICT


def uses_tf32(name: str, device: torch.device) -> bool:
    if name == TF32:
        return True
    if name == COMPILE:
        return device.type == "cuda"
    return False


def compiled(model: torch.nn.Module, mode: str) -> Callable[..., Any]:
    """``torch.compile(model)``; errors surface on the first call, which the caller times apart."""
    return torch.compile(model, mode=None if mode == "default" else mode)
