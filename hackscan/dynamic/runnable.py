"""Parent side: can this candidate run here, on which device, and where do its findings go.

Decided from the candidate's source without running it: a CUDA source or a cupy kernel needs a
GPU; Triton needs a GPU or the ``triton`` package (its interpreter runs on the CPU); a C++-only
extension needs a C++ compiler; pure PyTorch runs anywhere.  A candidate that only *calls* CUDA
(``x.cuda()``) is found out when it runs: the worker classifies the error, and the stage reports
the candidate as not runnable here rather than as broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..inputs import Submission
from ..python.program import Outline, outline

_CUDA_CALLS = re.compile(r"\.cuda\(|device\s*=\s*['\"]cuda|torch\.device\(\s*['\"]cuda|\.to\(\s*['\"]cuda")
# CUDA source text anywhere in the file: a kernel built at run time from strings the static stage
# could not resolve (written to a temp file, assembled in a method) is still a CUDA candidate
_CUDA_SOURCE = re.compile(r"__global__\s+void|<<<[^>]*>>>|\bcuda_sources\s*=\s*[^N\s]|['\"][^'\"]*\.cu['\"]")


@dataclass(frozen=True)
class Target:
    """What the stage needs to know about a candidate before running it."""

    forward_line: int = 1
    forward_column: int = 1
    needs: frozenset[str] = frozenset()  # cuda | triton | cxx
    custom: bool = False  # compiles or JIT-compiles kernels of its own
    languages: frozenset[str] = frozenset()
    mentions_cuda: bool = False
    problem: str | None = None  # why it cannot run at all (no ModelNew, a syntax error)
    extensions: tuple[str, ...] = ()
    extension_kinds: tuple[str, ...] = ()  # how each is built: load_inline, load, cupy (python/module.py)
    attrs: dict[str, Any] = field(default_factory=dict)


def inspect(sub: Submission, program: Outline | None = None) -> Target:
    """``program`` is what the static stage learnt of the candidate (``report.program``); without
    it (a caller that ran no static scan) the candidate is parsed here, with the same rules."""
    if sub.language != "python":
        return Target(problem=f"a standalone {sub.language.upper()} file has no Python host (ModelNew) to run")
    if program is None:
        try:
            program = _outline(sub)
        except (SyntaxError, ValueError) as exc:
            return Target(problem=f"the host code does not parse: {exc}")
    if not program.harness_name:  # the harness looks ModelNew up by name (a class or an alias of one)
        return Target(problem="the candidate defines no ModelNew class")
    needs: set[str] = set()
    languages = set(program.languages)
    custom = bool(program.extensions) or bool(program.triton_kernels)
    if any(kind == "cupy" for _, kind in program.extensions):
        needs.add("cuda")
    if program.triton_kernels:
        needs.add("triton")
    if program.incomplete and ("load_inline" in sub.code or "cpp_extension" in sub.code):
        custom = True
        needs.add("cxx")
    if "cuda" in languages:
        needs.add("cuda")
    elif _CUDA_SOURCE.search(sub.code):
        # its custom path is CUDA: on a CPU only its fallback would run, which is not the candidate
        needs.add("cuda")
        custom = True
    if "cpp" in languages and "cuda" not in languages:
        needs.add("cxx")
    return Target(forward_line=program.line, forward_column=program.column, needs=frozenset(needs), custom=custom,
                  languages=frozenset(languages), mentions_cuda=bool(_CUDA_CALLS.search(sub.code)),
                  extensions=tuple(name for name, _ in program.extensions),
                  extension_kinds=tuple(kind for _, kind in program.extensions))


def _outline(sub: Submission) -> Outline:
    """The static stage's outline, computed here for a caller that has none."""
    from ..python.module import HostModule

    host = HostModule.parse(sub.code, sub.file or sub.path)
    try:
        return outline(host)
    except Exception:  # the static stage reports extraction trouble; here it only costs precision
        return outline(host, extract=False)


def choose_device(requested: str, info: dict[str, Any], target: Target) -> tuple[str | None, str | None]:
    """(device, None) when the candidate can run, else (None, reason)."""
    has_gpu = bool(info.get("cuda"))
    if requested == "cuda" and not has_gpu:
        return None, "--device cuda was asked for, but torch sees no CUDA GPU here"
    device = "cuda" if requested == "cuda" or (requested == "auto" and has_gpu) else "cpu"
    cpu_only = "cxx" in target.needs and "cuda" not in target.needs and not target.mentions_cuda
    if cpu_only and requested == "auto":
        device = "cpu"  # a C++-only extension is CPU code: its loops would read device pointers
    elif cpu_only and device == "cuda":
        # handed CUDA tensors, its loops dereference device pointers on the host and the worker dies
        # with SIGSEGV (seen on an H200): that says nothing about the candidate, so do not run it
        return None, ("the candidate's extension is C++ only (CPU code, no CUDA kernel), and --device cuda "
                      "would hand it device pointers: run it with --device cpu or auto")
    if "cuda" in target.needs:
        if device != "cuda":
            return None, ("the candidate compiles CUDA code and needs a CUDA GPU" +
                          (" (run with --device cuda or auto)" if has_gpu else "; this machine has none"))
        if not info.get("nvcc"):
            return None, "the candidate compiles CUDA code, and no nvcc is installed here"
    if "triton" in target.needs and device != "cuda" and not info.get("triton"):
        return None, "the candidate's Triton kernels need a GPU, or the triton package for its CPU interpreter"
    if "cxx" in target.needs and not info.get("cxx"):
        return None, "the candidate compiles a C++ extension, and no C++ compiler is installed here"
    return device, None
