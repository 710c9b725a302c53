"""Harness profiles: how the scoring harness a candidate was written for loads and calls it.

A candidate rewarded for passing may look for signs that it is being checked rather than scored:
its module's name, its ``__file__``, ``sys.argv``, the working directory, the environment, whether
``.eval()`` was called, the seed its parameters were drawn under, the function that calls
``forward``.  A profile states what the real harness shows for each, and the candidate worker (and
the sandbox that starts it) shows exactly that.  Plain data, no torch: the parent sends
``to_dict()`` to the candidate worker in its ``load`` request, and the sandbox reads ``cwd``,
``argv`` and ``env`` (``sandbox_view()``) when it starts a worker.

``kernelbench`` follows KernelBench's ``src/eval.py`` (``eval_kernel_against_ref``):

* ``set_seed(42)`` (``seed_num``'s default) before ``get_init_inputs()``, again before
  ``Model(*init_inputs)`` and again before ``ModelNew(*init_inputs)``: both models are built under
  the same fixed, public seed.  The run's own seeds stay secret (``probes.derive``).
* the candidate's source is written to a ``tempfile.NamedTemporaryFile(suffix=".py")`` (a
  ``/tmp/tmpXXXXXXXX.py``) and imported with ``importlib.util.spec_from_file_location("temp_module",
  path)`` + ``module_from_spec`` + ``exec_module`` (``load_custom_model_with_tempfile``, the path
  Triton needs, since ``@triton.jit`` reads its function's source); ``module_from_spec`` does not
  put the module in ``sys.modules``.  The CUDA path's ``exec`` into a context dict under
  ``"<string>"`` would break ``inspect.getsource``, so the file form is the one shown.
* ``TORCH_USE_CUDA_DSA=1`` is set before the candidate is loaded.
* ``.eval()`` is never called; the models are called as ``model_new(*inputs)`` under
  ``torch.no_grad()`` from ``run_and_check_correctness`` in ``src/eval.py``.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_HARNESS = "kernelbench"

# tempfile's own alphabet for NamedTemporaryFile names
_TEMP_CHARS = string.ascii_lowercase + string.digits + "_"


@dataclass(frozen=True)
class HarnessProfile:
    name: str
    description: str
    # the candidate module: its ``__name__`` / ``__spec__.name``, and whether the harness leaves it
    # in ``sys.modules`` (``importlib.util.module_from_spec`` does not)
    module_name: str
    register_module: bool
    # ``__file__``: the directory the harness writes the source to, and the file's name, where
    # ``{random}`` stands for tempfile's eight random characters
    file_dir: str
    file_name: str
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    # whether the harness calls ``model.eval()`` after building the models
    eval_mode: bool = False
    # the seed both models are built under (and ``get_init_inputs()`` is drawn under)
    construction_seed: int = 0
    # the harness function that calls ``forward``: the one frame between the worker and the model
    caller_name: str = "evaluate"
    caller_module: str = "__main__"
    caller_file: str = "eval.py"

    def source_name(self) -> str:
        return source_name(self.file_name)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["argv"] = list(self.argv)
        return out

    def sandbox_view(self) -> dict[str, Any]:
        """What a sandbox applies when it starts the candidate's process."""
        return {"cwd": self.cwd, "argv": list(self.argv), "env": dict(self.env)}


PROFILES: dict[str, HarnessProfile] = {p.name: p for p in (
    HarnessProfile(
        name="kernelbench",
        description="KernelBench's src/eval.py: temp-file import as temp_module, set_seed(42) before each model, "
                    "no .eval(), called from run_and_check_correctness",
        module_name="temp_module",
        register_module=False,
        file_dir="/tmp",
        file_name="tmp{random}.py",
        argv=("scripts/eval_from_generations.py",),
        cwd="/workspace/KernelBench",
        env={"TORCH_USE_CUDA_DSA": "1"},
        eval_mode=False,
        construction_seed=42,
        caller_name="run_and_check_correctness",
        caller_module="src.eval",
        caller_file="/workspace/KernelBench/src/eval.py",
    ),
    HarnessProfile(
        name="plain",
        description="a generic script: the candidate imported as model_new from the working directory, "
                    "eval mode, seed 0",
        module_name="model_new",
        register_module=True,
        file_dir=".",
        file_name="model_new.py",
        argv=("eval.py",),
        cwd="/workspace",
        env={},
        eval_mode=True,
        construction_seed=0,
        caller_name="evaluate",
        caller_module="__main__",
        caller_file="/workspace/eval.py",
    ),
)}


def source_name(file_name: str) -> str:
    """A candidate file's name, with fresh random characters where the harness has them."""
    return file_name.replace("{random}", "".join(secrets.choice(_TEMP_CHARS) for _ in range(8)))


class UnknownHarness(ValueError):
    pass


def get_profile(name: str | None) -> HarnessProfile:
    """The profile called ``name`` (default ``kernelbench``); a clear error for an unknown one."""
    key = (name or DEFAULT_HARNESS).strip().lower()
    try:
        return PROFILES[key]
    except KeyError:
        raise UnknownHarness(f"unknown harness {name!r}; known: {', '.join(sorted(PROFILES))}") from None
