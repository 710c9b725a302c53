"""Worker side, build farm only: reach the candidate's builds the way its real worker will.

The farm (``dynamic/farm.py``) compiles a candidate's extensions in a sandbox without a GPU, so
that its real worker, which holds a GPU's gate, finds them in the cache.  Importing the module
reaches only the builds made unconditionally at import; in real candidates many others are made in
``__init__`` (directly or through a helper), or behind ``if torch.cuda.is_available():``, which
reads False where no GPU is visible.  So the farm worker:

- when the candidate's real workers see a GPU (the parent says so: ``gpu`` in the request), shows
  the candidate the device they have, as far as a build can tell:
  ``torch.cuda.is_available()`` reads True, and ``Tensor.cuda()`` / ``Module.cuda()`` leave the
  value on the CPU instead of raising (a buffer moved to the GPU in ``__init__`` before the build);
  nothing can run on a GPU here, so anything that really needs one fails, after the build;
- constructs ``ModelNew(*get_init_inputs())`` with the reference's init inputs (under the harness's
  construction seed: what the real worker constructs), and if that built nothing, calls it once on
  the reference's ``get_inputs()`` on the CPU (a build on first use).  Both are values a reference
  worker of the farm drew (``ReferenceWorker.draw``): the reference's source never enters this
  process, whose builds reach the candidate's real worker through the cache.

Every error is ignored: what the farm misses, the real worker builds as before.  Only the farm's
workers ever do this (``build_only`` in the spec the parent gave; the candidate cannot set it),
so no real worker's ``torch.cuda`` is ever dressed up.
"""

from __future__ import annotations

from typing import Any

import torch

# a CPU forward on inputs bigger than this is not tried: it could take minutes, and a build on
# first use that it would reach is then built by the real worker
MAX_FORWARD_BYTES = 1 << 30


def pretend_gpu() -> None:
    """``torch.cuda.is_available()`` True, ``.cuda()`` a no-op (see the module's docstring)."""
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]

    def stay(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    torch.Tensor.cuda = stay  # type: ignore[method-assign]
    torch.nn.Module.cuda = stay  # type: ignore[method-assign]


def exercise(cls: Any, init_packed: Any, inputs_packed: Any, seed: int, built: Any) -> dict[str, Any]:
    """Construct ``cls`` with the reference's init inputs, and call it once on the reference's
    ``get_inputs()`` draw if ``built()`` (how many builds the candidate made so far) is still 0.
    Both come as values the parent had a reference worker draw (``draw``): the reference's source
    never enters this process, where the candidate's code runs.  Returns what was done."""
    from .values import unpack

    done: dict[str, Any] = {}
    try:
        init = list(unpack(init_packed)) if init_packed is not None else []
        torch.manual_seed(int(seed))
        model = cls(*init)
        done["constructed"] = True
    except BaseException as exc:  # noqa: BLE001 - the real worker reports it
        done["error"] = f"construct: {type(exc).__name__}"
        return done
    if built():
        return done
    if inputs_packed is None:
        done["forward"] = "skipped: no inputs drawn (too large, or the draw failed)"
        return done
    try:
        inputs = list(unpack(inputs_packed))
        size = sum(int(x.numel() * x.element_size()) for x in inputs if torch.is_tensor(x))
        if size > MAX_FORWARD_BYTES:
            done["forward"] = f"skipped: {size >> 20} MiB of inputs"
            return done
        with torch.no_grad():
            model(*inputs)
        done["forward"] = "ran"
    except BaseException as exc:  # noqa: BLE001 - after the build, errors are expected (no GPU)
        done["forward"] = f"raised {type(exc).__name__}"
    return done
