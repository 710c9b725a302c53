"""Turn what the user passed (files, folders, JSONL datasets) into submissions.

A submission is one candidate's code plus, when known, its reference problem.  Discovery never
raises for one bad input: it yields an ``InputProblem`` in its place, so the scan of the other
inputs goes on and the problem reaches the report.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PY_SUFFIXES = (".py",)
CUDA_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
REFERENCE_NAMES = ("reference.py", "ref.py", "problem.py")
# a file defining a class named Model (the KernelBench reference convention)
_MODEL_CLASS = re.compile(r"^class\s+Model\s*[(:]", re.M)
_MODELNEW_CLASS = re.compile(r"^class\s+ModelNew\s*[(:]", re.M)
MAX_BYTES = 5_000_000


@dataclass(frozen=True)
class Submission:
    """One candidate to scan.

    ``path`` is what reports show (``kernels/relu/hack.py``, ``data.jsonl:17``); ``file`` is the file
    it came from; ``record`` the 1-based JSONL line.  ``language`` is ``python`` for host files and
    ``cuda`` / ``cpp`` for standalone sources.
    """

    path: str
    code: str
    language: str = "python"
    file: str | None = None
    record: int | None = None
    reference: str | None = None
    reference_path: str | None = None
    # the reference came from the candidate's own file (it defines Model too)
    self_reference: bool = False
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InputProblem:
    """An input that could not be read; reported as a result with verdict ``error``."""

    path: str
    reason: str
    record: int | None = None


@dataclass(frozen=True)
class InputOptions:
    reference: str | None = None  # --ref: applies to every candidate
    code_field: str = "custom_code"
    ref_field: str = "ref_code"
    # JSONL fields copied into the report's meta
    meta_fields: tuple[str, ...] = ("task_id", "level_id", "problem_id", "problem_name", "name")
    # --claimed-field: the field holding the claimed speedup (the report's meta names it)
    claimed_field: str | None = None


def discover(paths: Iterable[str], options: InputOptions = InputOptions()) -> Iterator[Submission | InputProblem]:
    ref_text, ref_problem = None, None
    if options.reference:
        ref_text, ref_problem = _read_text(Path(options.reference))
        if ref_problem:
            yield InputProblem(options.reference, f"cannot read the reference: {ref_problem}")
            return
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            yield InputProblem(raw, "no such file or directory")
        elif p.is_dir():
            yield from _folder(p, options, ref_text)
        else:
            yield from _file(p, options, ref_text, folder_reference=None, beside=True)


def take(items: Iterable[Submission | InputProblem], limit: int | None = None, sample: int | None = None,
         seed: int | None = None) -> list[Submission | InputProblem]:
    """The first ``limit`` items, or a random ``sample`` of them drawn with ``seed``, in input order.

    The draw depends only on the seed and the number of items, so the same seed on the same inputs
    takes the same records.  Unreadable inputs count as items: they are results like any other.
    """
    items = list(items)
    if limit is not None:
        return items[:limit]
    if sample is not None and sample < len(items):
        chosen = sorted(random.Random(seed).sample(range(len(items)), sample))
        return [items[i] for i in chosen]
    return items


def _reference_in(folder: Path) -> tuple[str, Path] | InputProblem | None:
    """The folder's reference (the first of ``REFERENCE_NAMES`` present), or why it cannot be read."""
    for name in REFERENCE_NAMES:
        cand = folder / name
        if cand.is_file():
            text, problem = _read_text(cand)
            if problem:
                return InputProblem(str(cand), f"cannot read the reference: {problem}")
            return text, cand
    return None


def _folder(root: Path, options: InputOptions, ref_text: str | None) -> Iterator[Submission | InputProblem]:
    """Every candidate under ``root``; a folder's ``reference.py`` pairs with its siblings."""
    for folder in sorted([root] + [d for d in root.rglob("*") if d.is_dir()]):
        if any(part.startswith((".", "__pycache__")) for part in folder.relative_to(root).parts):
            continue
        folder_ref = _reference_in(folder)
        if isinstance(folder_ref, InputProblem):
            yield folder_ref
            folder_ref = None
        for f in sorted(folder.iterdir()):
            if not f.is_file() or f.name.startswith("."):
                continue
            if folder_ref is not None and f == folder_ref[1]:
                continue
            if f.suffix in PY_SUFFIXES + CUDA_SUFFIXES + JSONL_SUFFIXES:
                yield from _file(f, options, ref_text, folder_ref)


def _file(p: Path, options: InputOptions, ref_text: str | None, folder_reference: tuple[str, Path] | None,
          beside: bool = False) -> Iterator[Submission | InputProblem]:
    """One file.  ``beside``: a candidate named on its own pairs with a reference in its folder, as
    it would in a folder scan, unless it defines ``Model`` itself (then it is its own reference) or
    is the reference."""
    if p.suffix in JSONL_SUFFIXES:
        yield from _jsonl(p, options, ref_text)
        return
    text, problem = _read_text(p)
    if problem:
        yield InputProblem(str(p), problem)
        return
    if p.suffix in CUDA_SUFFIXES:
        yield Submission(path=str(p), code=text, language="cpp" if p.suffix in (".cpp", ".cc", ".cxx") else "cuda",
                         file=str(p), reference=ref_text, reference_path=options.reference)
        return
    if p.suffix not in PY_SUFFIXES:
        yield InputProblem(str(p), f"unsupported file type {p.suffix or '(none)'}: expected .py, .cu, .cpp or .jsonl")
        return
    reference, reference_path, self_ref = ref_text, options.reference, False
    if reference is None and folder_reference is None and beside and p.name not in REFERENCE_NAMES \
            and not _MODEL_CLASS.search(text):
        found = _reference_in(p.parent)
        if isinstance(found, InputProblem):
            yield found
        else:
            folder_reference = found
    if reference is None and folder_reference is not None:
        reference, reference_path = folder_reference[0], str(folder_reference[1])
    if reference is None and _MODEL_CLASS.search(text) and _MODELNEW_CLASS.search(text):
        reference, reference_path, self_ref = text, str(p), True
    yield Submission(path=str(p), code=text, file=str(p), reference=reference,
                     reference_path=reference_path, self_reference=self_ref)


def _jsonl(p: Path, options: InputOptions, ref_text: str | None) -> Iterator[Submission | InputProblem]:
    try:
        handle = p.open("r", encoding="utf-8", errors="strict")
    except OSError as exc:
        yield InputProblem(str(p), f"cannot open: {exc.strerror or exc}")
        return
    with handle:
        lineno = 0
        while True:
            try:
                line = handle.readline()
            except UnicodeDecodeError:
                yield InputProblem(f"{p}:{lineno + 1}", "not UTF-8 text", record=lineno + 1)
                return
            if not line:
                break
            lineno += 1
            if not line.strip():
                continue
            where = f"{p}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield InputProblem(where, f"invalid JSON: {exc.msg} at column {exc.colno}", record=lineno)
                continue
            if not isinstance(obj, dict):
                yield InputProblem(where, "record is not a JSON object", record=lineno)
                continue
            code = obj.get(options.code_field)
            if code is None:
                yield InputProblem(where, f"record has no {options.code_field!r} (null or missing)", record=lineno)
                continue
            if not isinstance(code, str):
                yield InputProblem(where, f"field {options.code_field!r} is not a string", record=lineno)
                continue
            if code.strip() in ("", "None"):
                # a generator that produced nothing (CUDA-L1 stores the string "None"): there is no
                # candidate to judge, which a gate must reject as an error, not half-analyse
                what = "empty" if not code.strip() else 'the string "None"'
                yield InputProblem(where, f"field {options.code_field!r} is {what}: no code to analyse", record=lineno)
                continue
            ref = obj.get(options.ref_field)
            reference = ref if isinstance(ref, str) and ref.strip() else ref_text
            meta = {k: obj[k] for k in options.meta_fields if k in obj}
            # the ``score*`` fields when no field is named; the named field alone when one is (the
            # claimed-vs-verified table then reads one field, not a mix of it and the others)
            claimed = {} if options.claimed_field else \
                {k: v for k, v in obj.items() if k.startswith("score") and isinstance(v, (int, float))}
            named = obj.get(options.claimed_field) if options.claimed_field else None
            if isinstance(named, (int, float)) and not isinstance(named, bool) and math.isfinite(named) and named > 0:
                claimed = {options.claimed_field: named}
                meta["claimed_field"] = options.claimed_field
            elif named is not None:
                # a claimed speedup is a positive number: the CLI refuses the field (check_claimed)
                meta["claimed_invalid"] = repr(named)[:40]
            if claimed:
                meta["claimed"] = claimed
            yield Submission(path=where, code=code, file=str(p), record=lineno, reference=reference,
                             reference_path=f"{where}#{options.ref_field}" if reference is not None and reference is not ref_text else options.reference,
                             meta=meta)


def _read_text(p: Path) -> tuple[str, str | None]:
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            return "", f"file too large ({size} bytes)"
        data = p.read_bytes()
    except IsADirectoryError:
        return "", "is a directory"
    except OSError as exc:
        return "", f"cannot read: {exc.strerror or exc}"
    if b"\x00" in data[:8192]:
        return "", "binary file (contains NUL bytes)"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return "", "not UTF-8 text"


def check_claimed(items: Iterable[Submission | InputProblem], field: str) -> str | None:
    """Why ``--claimed-field field`` cannot stand over these submissions (None when it can): no
    record holds it (a misspelt name would otherwise be ignored, and the claimed-vs-verified table
    silently built from the ``score*`` fields), a record holds something other than a positive
    number, or every record holds a whole number (an id or a level, not a speedup)."""
    records = [s for s in items if isinstance(s, Submission) and s.record is not None]
    if not records:
        return f"--claimed-field {field}: it reads JSONL records, and the paths hold none"
    bad = next((s for s in records if (s.meta or {}).get("claimed_invalid") is not None), None)
    if bad is not None:
        return (f"--claimed-field {field}: {bad.path} holds {bad.meta['claimed_invalid']}, "
                "not a positive number (a claimed speedup)")
    values = [(s.meta or {}).get("claimed", {}).get(field) for s in records
              if (s.meta or {}).get("claimed_field") == field]
    if not values:
        return f"--claimed-field {field}: no record of {len(records)} has that field"
    if all(isinstance(v, int) for v in values):
        return (f"--claimed-field {field}: every record holds a whole number ({', '.join(map(str, values[:3]))}"
                f"{', ...' if len(values) > 3 else ''}), an id or a level rather than a claimed speedup")
    return None
