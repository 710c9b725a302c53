"""hackscan: does an LLM-generated GPU kernel do its job, or game the benchmark that scores it?

The Python API is built for training loops: ``scan_source`` runs the static stage on one candidate
in a few milliseconds and never imports torch.  ``verify`` runs the whole verification of one
candidate (static, dynamic and performance stages, the candidate in sandboxed child processes) and
``Verifier`` serves a training loop (warm workers, futures, a Ray cluster); ``RewardPolicy`` turns
their ``Verification`` into a reward, and ``hackscan.rl.trainers`` plugs it into TRL and verl.  None of
them imports torch into the caller's process.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .config import Config
    from .inputs import InputProblem, Submission
    from .model import Report

__all__ = ["scan_source", "scan_batch", "scan_paths", "Scanner", "default_scanner", "verify", "Verifier",
           "Verification", "Speedup", "VerifyOptions", "RewardPolicy", "__version__"]

_LAZY = {"Verifier": "rl.verifier", "verify": "rl.verifier", "Verification": "rl.verification",
         "Speedup": "rl.verification", "RewardPolicy": "rl.reward", "VerifyOptions": "dynamic.options"}


def __getattr__(name: str) -> object:
    """The verification API, imported on first use (``import hackscan`` stays as light as the
    static scan needs)."""
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Scanner:
    """A reusable static scanner (select/ignore/mode fixed once); safe to share across threads."""

    def __init__(self, *, mode: str = "gate", select: Sequence[str] = (), ignore: Sequence[str] = (),
                 config: Config | None = None, reject_classes: Sequence[str] | None = None,
                 reference_cache_size: int = 8):
        from .classes import parse_classes
        from .config import Config
        from .engine import StaticScanner

        base = config or Config()
        cfg = base.with_(mode=mode, select=tuple(select) or base.select, ignore=tuple(ignore) or base.ignore,
                         reject_classes=parse_classes(reject_classes) if reject_classes is not None else None)
        self._config = cfg
        # references kept parsed and analysed: the last few by default (consecutive candidates of a
        # task); a training loop that cycles through a task set keeps the whole set (``Verifier``)
        self._engine = StaticScanner(cfg, reference_cache_size=reference_cache_size)

    def rejects(self, report: Report) -> bool:
        """The gate's answer: an error finding of a rejected verdict class (all unless ``reject_classes``
        names some), or a result that could not be analysed."""
        from .classes import rejects

        return rejects(report, self._config.reject_classes, self._config.fail_on.value)

    def scan(self, code: str, reference: str | None = None, *, path: str = "<string>") -> Report:
        return self._engine.scan(_submission(code, reference, path))

    def scan_batch(self, codes: Iterable[str | tuple[str, str | None]], reference: str | None = None) -> list[Report]:
        """Scan many candidates; the garbage collector is tuned while the batch runs and restored
        afterwards (``hackscan.engine.batch_gc``)."""
        from .engine import batch_gc

        out = []
        with batch_gc():
            for i, item in enumerate(codes):
                code, ref = (item if isinstance(item, tuple) else (item, reference))
                out.append(self.scan(code, ref, path=f"<sample {i}>"))
        return out


def _submission(code: str, reference: str | None, path: str) -> Submission | InputProblem:
    """One candidate as the stages take it; a candidate that defines ``Model`` too is its own
    reference when none is given.  A generation with no code (not a string, empty, or the string
    ``"None"`` that datasets store for a failed generation) is an input problem, verdict ``error``,
    as the command line reports it: a gate must never half-analyse nothing and accept it."""
    from .inputs import _MODEL_CLASS, _MODELNEW_CLASS, InputProblem, Submission

    if not isinstance(code, str):
        return InputProblem(path, f"the candidate is {type(code).__name__}, not source text: no code to analyse")
    if code.strip() in ("", "None"):
        what = "empty" if not code.strip() else 'the string "None"'
        return InputProblem(path, f"the candidate is {what}: no code to analyse")

    self_ref = False
    if reference is None and _MODEL_CLASS.search(code) and _MODELNEW_CLASS.search(code):
        reference, self_ref = code, True
    language = "python"
    if path.endswith((".cu", ".cuh")):
        language = "cuda"
    elif path.endswith((".cpp", ".cc", ".cxx")):
        language = "cpp"
    return Submission(path=path, code=code, language=language, file=path, reference=reference,
                      reference_path="<reference>" if reference is not None else None, self_reference=self_ref)


@functools.lru_cache(maxsize=8)
def default_scanner(mode: str = "gate", select: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> Scanner:
    """The ``Scanner`` ``scan_source`` and ``scan_batch`` use for these settings, built on the first
    call and kept: it loads the rule registry and imports the check modules once, and parses a
    reference once for consecutive candidates of one task.  Different settings get their own."""
    return Scanner(mode=mode, select=select, ignore=ignore)


def scan_source(code: str, reference: str | None = None, *, path: str = "<string>", mode: str = "gate",
                select: Sequence[str] = (), ignore: Sequence[str] = ()) -> Report:
    """Statically scan one candidate.  ``mode='gate'`` (default) ignores suppression comments."""
    return default_scanner(mode, tuple(select), tuple(ignore)).scan(code, reference, path=path)


def scan_batch(codes: Iterable[str | tuple[str, str | None]], reference: str | None = None, *,
               mode: str = "gate", select: Sequence[str] = (), ignore: Sequence[str] = ()) -> list[Report]:
    """Statically scan many candidates; items are code strings or ``(code, reference)`` pairs."""
    return default_scanner(mode, tuple(select), tuple(ignore)).scan_batch(codes, reference)


def scan_paths(paths: Iterable[str], reference: str | None = None, *, mode: str = "audit",
               config: Config | None = None) -> list[Report]:
    """Statically scan files, folders and JSONL datasets, as the command does with ``--static``."""
    from .config import Config
    from .engine import StaticScanner
    from .inputs import InputOptions, discover

    cfg = (config or Config()).with_(mode=mode)
    engine = StaticScanner(cfg)
    opts = InputOptions(reference=reference, code_field=cfg.code_field, ref_field=cfg.ref_field)
    return engine.scan_many(discover(paths, opts))
