"""The candidate's worker and its channel (HS408, HS410, HS411): it does not run, does not answer
what the parent asked, or writes what nobody asked for.

These rules fire on events of the run (a worker dies, a reply fails the audit); the stage hands
each unit the event's facts and the unit words the finding and decides its severity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...model import Confidence, Severity
from . import Decision, rule_unit
from .results import probe_evidence


@rule_unit("HS408")
def candidate_does_not_run(seed: int, phase: str, reason: str = "", *, record: Any = None,
                           worker: str | None = None, **facts: Any) -> Decision:
    """ModelNew does not run where it has to: it fails on the task's own inputs (``record``: the
    first failing original probe), its worker dies or hangs (``worker``: how, ``phase``: while doing
    what), it fails to import or build, to load again in a fresh worker (``phase="reload"``) or in
    the fresh pair of workers started for timing (``phase="timing pair"``)."""
    if record is not None:
        return Decision(message=f"ModelNew fails on the task's own inputs: {record.reason}",
                        evidence=probe_evidence(record, seed, phase="call"))
    if worker is not None:
        where = "importing or building ModelNew" if phase == "import" else phase
        return Decision(message=f"the candidate worker {worker} while {where}: {reason}",
                        evidence={"seed": seed, "phase": phase, "kind": worker, **facts})
    if phase == "reload":
        return Decision(message=f"ModelNew loaded once but not again in a fresh worker: {reason}",
                        evidence={"seed": seed, "phase": phase, **facts})
    if phase == "timing pair":
        return Decision(message=("ModelNew passed correctness, then failed in a fresh pair of workers started for "
                                 f"timing: {reason}"), evidence={"seed": seed, "phase": phase, **facts})
    # import or build: ``reason`` is what went wrong ("does not import", "does not compile (...)")
    return Decision(message=f"ModelNew {reason}", evidence={"phase": phase, "seed": seed, **facts})


@rule_unit("HS410")
def unanswered_check(seed: int, *, batch: int | None = None, batch_error: str | None = None,
                     problems: Sequence[str] = (), check: Mapping[str, Any] | None = None,
                     passed_original: bool = True, **facts: Any) -> Decision | None:
    """What the parent asked and did not get: a probe batch answered with an error (``batch_error``),
    answers that fail the audit (``problems``), or an integrity check the candidate raised inside
    (``check``; only once it ran on the task's inputs, and a warning for the census, which runs
    under hackscan's own dispatch mode or profiler that a legitimate extension can trip)."""
    if batch_error is not None:
        return Decision(message=(f"the candidate's worker answered probe batch {batch} with an error instead of "
                                 f"results: {batch_error[-200:]}"), evidence={"seed": seed, "batch": batch, **facts})
    if problems:
        return Decision(message=(f"the candidate's worker did not answer what the parent asked: {problems[0]}"
                                 + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")),
                        evidence={"seed": seed, "batch": batch, "problems": list(problems[:20])})
    if check is None or check.get("unanswered") or not passed_original:
        return None
    # a candidate that runs on the task's inputs but raises inside a check dodges what the check
    # would show (a cache, a reused buffer, stale memory): not answered is not passed
    kind = check.get("kind")
    reason = str(check["error"].get("message", ""))[-300:]
    census = kind == "census"
    return Decision(message=f"ModelNew raises inside the '{kind}' integrity check, which therefore says nothing: "
                            f"{reason[-200:]}",
                    evidence={"probe": kind, "input": "get_inputs() with a fresh seed", "seed": seed, "check": kind,
                              "exception": reason},
                    severity=Severity.WARNING if census else Severity.ERROR,
                    confidence=Confidence.MEDIUM if census else None)


@rule_unit("HS411")
def forged_reply(seed: int, role: str, *, frames: Sequence[Mapping[str, Any]] = (), broke: str | None = None,
                 **facts: Any) -> Decision | None:
    """Code in a worker writes on hackscan's socket: frames that answer no request (``frames``), or
    a channel broken mid-request (``broke``: while doing what)."""
    if broke is not None:
        return Decision(message=f"the {role} worker's channel broke while {broke}",
                        evidence={"seed": seed, "role": role, **facts})
    if not frames:
        return None
    first = frames[0]
    return Decision(message=(f"the {role} worker's channel carried {len(frames)} frame(s) that answer no request "
                             f"({first['why']}, while the parent waited for '{first['while_waiting_for']}'): code in "
                             "that worker writes on hackscan's socket"),
                    evidence={"seed": seed, "role": role, "frames": list(frames[:5]), "count": len(frames)})
