"""Resume a run from its stream of finished results (``--resume``).

Each line the run streams (``pipeline.ResultStream``) carries ``key``: a content hash of what
decides the result, namely the candidate (path, record, language, code), its reference, hackscan's
version and every option or setting that can change a finding (the device, the seed, the timeout,
the baselines, the sandbox mode, the harness, the rule selection and options).  A resumed run reads
the lines back, keeps the reports whose key it would compute again, and runs only the rest.  An
edited candidate, another seed or another hackscan version gives another key, so a stale result is
never reused.

Reports are rebuilt from their JSON form (``report_from_dict``), which ``Report.to_dict`` inverts
field for field: the reports at the end of a resumed run render as those of a one-shot run would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any

from . import __version__
from .config import Config
from .dynamic.options import DynamicOptions
from .inputs import InputProblem, Submission
from .model import Confidence, Finding, Location, Report, Severity, SkippedRule, Stage, Verdict

# RunOptions fields that cannot change a result: how many processes scan, nothing else
_NEUTRAL_OPTIONS = frozenset({"jobs"})
# Config fields that change no report: the exit threshold, and where the settings came from
_NEUTRAL_CONFIG = frozenset({"fail_on", "source"})


def _plain(value: Any) -> Any:
    """A stable JSON form of an option value (tuples, enums, mappings in key order)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if hasattr(value, "value") and not isinstance(value, (int, float, str, bool)):
        return _plain(value.value)
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return repr(value)


def settings_digest(options: DynamicOptions, config: Config) -> str:
    """What in the options and settings can change a result, hashed once per run."""
    opts = {f.name: _plain(getattr(options, f.name)) for f in fields(options) if f.name not in _NEUTRAL_OPTIONS}
    if isinstance(opts.get("extra"), dict) and opts["extra"].pop("seed_drawn", False):
        # a seed the command line drew for this run (no --seed): a resumed run draws another, and
        # must still find what the killed run finished (each reused result keeps its own seed)
        opts["seed"] = None
    conf = {f.name: _plain(getattr(config, f.name)) for f in fields(config) if f.name not in _NEUTRAL_CONFIG}
    text = json.dumps({"version": __version__, "options": opts, "config": conf}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def result_key(item: Submission | InputProblem, settings: str) -> str:
    """The key of one item's result under one run's settings (``settings_digest``)."""
    h = hashlib.sha256(settings.encode())
    if isinstance(item, Submission):
        parts: Iterable[Any] = ("submission", item.path, item.record, item.language, item.file, item.code,
                                item.reference, item.reference_path, item.self_reference,
                                json.dumps(_plain(item.meta), sort_keys=True))
    else:
        parts = ("problem", item.path, item.record, item.reason)
    for part in parts:
        text = "\x00" if part is None else str(part)
        # length-prefixed: no two different tuples of parts hash alike
        h.update(f"{len(text)}:".encode())
        h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def report_from_dict(d: Mapping[str, Any]) -> Report:
    """The inverse of ``Report.to_dict`` (on its JSON-typed output)."""
    findings = tuple(_finding(f) for f in d.get("findings", ()))
    skipped = tuple(SkippedRule(s["rule"], s["reason"]) for s in d.get("skipped_rules", ()))
    return Report(path=d["path"], verdict=Verdict(d["verdict"]), findings=findings, skipped=skipped,
                  error=d.get("error"), record=d.get("record"), reference=d.get("reference"),
                  meta=d.get("meta") or {}, dynamic=d.get("dynamic"), performance=d.get("performance"))


def _finding(f: Mapping[str, Any]) -> Finding:
    loc = Location(path=f["path"], line=f.get("line", 0), column=f.get("column", 0), end_line=f.get("end_line"),
                   end_column=f.get("end_column"), record=f.get("record"), unit=f.get("unit"))
    return Finding(rule=f["rule"], name=f["name"], severity=Severity(f["severity"]),
                   confidence=Confidence(f["confidence"]), message=f["message"], location=loc,
                   stage=Stage(f.get("stage", "static")), evidence=f.get("evidence") or {},
                   suppressed=bool(f.get("suppressed", False)), suppression_reason=f.get("suppression_reason"),
                   related=tuple(f.get("related", ())), snippet=f.get("snippet"),
                   confirmed_by=tuple(f.get("confirmed_by", ())), cleared_by=tuple(f.get("cleared_by", ())))


class StreamError(Exception):
    """A stream file that cannot be resumed from (unreadable, or not hackscan's)."""


def load_done(path: str) -> dict[str, Report]:
    """The finished results in a stream file, by key; a missing file holds none.

    A line cut short (the process was killed while writing it; the next run starts a new line after
    it) is dropped, and its candidate runs again.  Lines without a key (written by an older
    hackscan) cannot be matched to a candidate and are ignored.  Any other line that is not a
    result is an error: the file is not a hackscan stream, and resuming from it would mix foreign
    data into the report.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise StreamError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    done: dict[str, Report] = {}
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            key = obj.get("key")
            report = report_from_dict(obj)
        except (ValueError, KeyError, TypeError, AttributeError):
            # every result line begins so (Report.to_dict puts the path first): this one was cut
            if line.startswith('{"path":'):
                continue
            raise StreamError(f"{path} line {n + 1} is not a hackscan result; "
                              "resume needs the file a --stream run wrote") from None
        if isinstance(key, str):
            done[key] = report
    return done
