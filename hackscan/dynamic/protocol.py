"""Parent side of the protocol: the performance plug-in's context (PROTOCOL.md, "perf: parent
side") and the per-message checks on a worker's channel (``CheckedSession``, "Replies").

``PerfContext`` is what ``hackscan.perf.parent_side.evaluate`` receives: the reference outputs for
the timed input sets, the same correctness check the dynamic stage uses, and a factory for
findings located where the dynamic stage puts its own.  No torch: tensors are numpy arrays.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model import Finding, Report
from .compare import Tolerance, compare
from .session import WorkerFailure


@dataclass(frozen=True)
class PerfContext:
    device: str
    options: Mapping[str, Any]
    errors: Mapping[str, str]
    # key -> per input set: the reference's float32 output leaves (numpy arrays)
    reference_outputs: Mapping[str, Sequence[Sequence[Any]]]
    # key -> per input set: the reference's float64 output leaves (None where unavailable)
    reference_outputs64: Mapping[str, Sequence[Sequence[Any] | None]] = field(default_factory=dict)
    structures: Mapping[str, Sequence[str]] = field(default_factory=dict)
    tolerance: Tolerance = Tolerance()
    finding_factory: Callable[..., Finding] | None = None
    static_report: Report | None = None
    # the parent's own timing of back-to-back calls (HS609): {"calls", "parent_s", "rtt_s", "child_s"}
    outside: Mapping[str, Any] | None = None
    # the paired blocks (perf_run.paired_rounds): {"rounds": [{"order", "blocks": side -> calls}], ...}
    paired: Mapping[str, Any] | None = None

    def check(self, key: str, index: int, output: Sequence[Any]) -> tuple[bool, dict[str, Any]]:
        """Is ``output`` (the leaves of one timed call's output) right for input set ``index`` of ``key``?"""
        refs = self.reference_outputs.get(key) or []
        if index >= len(refs):
            return False, {"detail": f"no reference output for {key}[{index}]"}
        r64s = self.reference_outputs64.get(key) or []
        r64 = r64s[index] if index < len(r64s) else None
        structure = (self.structures.get(key) or [""] * len(refs))[index]
        o = compare(list(output), structure, refs[index], r64, structure, self.tolerance)
        return o.level in ("pass", "half", "skip"), o.evidence()

    def finding(self, rule_id: str, message: str, evidence: Mapping[str, Any] | None = None,
                severity: Any = None, confidence: Any = None) -> Finding:
        if self.finding_factory is None:
            raise RuntimeError("no finding factory in this context")
        return self.finding_factory(rule_id, message, dict(evidence or {}), severity=severity, confidence=confidence,
                                    stage="performance")


# --------------------------------------------------------------------------------------- channel checks
# How many frames that answer nothing the parent skips, per request, before it gives up on a
# channel: a candidate flooding its socket must not keep the parent reading for ever.
MAX_STRAY_FRAMES = 64


class CheckedSession:
    """One worker's ``Session`` with per-message checks (PROTOCOL.md, "Replies").

    Every request gets a fresh random ``nonce`` and the next ``seq``; the reply must echo both.  A
    frame that does not (a frame the candidate wrote on its own socket, a reply left over from an
    earlier request) is dropped, recorded in ``violations`` and the next frame is read instead, so
    the real worker's reply still counts.  This catches forged frames interleaved with the real
    worker's; it does not make the worker trusted: code in the worker's process can read the
    nonce of the request it is serving and answer in the worker's place.  What the parent decides
    from a candidate's replies therefore rests on raw outputs it compares itself.

    Everything else (``dead``, ``restart_clock``, ``peak_rss``, ...) is the session's own.
    """

    def __init__(self, session: Any, role: str):
        self._session = session
        self.role = role
        self.violations: list[dict[str, Any]] = []
        self._seq = 0
        self._pending: tuple[str, int, str] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    @property
    def session(self) -> Any:
        return self._session

    # the session's clock reads the allowance (``Session._progress``): set on this wrapper alone it
    # stopped nothing, and a candidate whose build outlasted --timeout was reported as hung (HS408).
    # Only this setting goes through; other attributes set on the wrapper stay on it (a test may
    # wrap ``send``, and forwarding that would make the session call its own wrapper).
    @property
    def compile_allowance(self) -> float:
        return float(self._session.compile_allowance)

    @compile_allowance.setter
    def compile_allowance(self, seconds: float) -> None:
        self._session.compile_allowance = seconds

    def send(self, msg: dict[str, Any]) -> None:
        self._seq += 1
        nonce = os.urandom(8).hex()
        self._pending = (nonce, self._seq, str(msg.get("cmd")))
        self._session.send(dict(msg, nonce=nonce, seq=self._seq))

    def recv(self, timeout: float | None = None) -> Any:
        if self._pending is None:
            # nothing was asked: whatever arrives is a stray frame (the parent never reads unasked)
            raise RuntimeError("recv() without a request")
        nonce, seq, cmd = self._pending
        for _ in range(MAX_STRAY_FRAMES):
            msg = self._session.recv(timeout)
            if isinstance(msg, dict) and msg.get("nonce") == nonce and msg.get("seq") == seq:
                self._pending = None
                return msg
            self.violations.append(_describe_stray(msg, cmd, seq))
        self._pending = None
        self._session.kill()
        raise WorkerFailure("protocol", f"the {self.role} worker sent {MAX_STRAY_FRAMES} frames that answer no "
                                        f"request (while the parent waited for '{cmd}')")

    def request(self, msg: dict[str, Any], timeout: float | None = None) -> Any:
        self.send(msg)
        return self.recv(timeout)

    def sync(self, timeout: float = 10.0) -> bool:
        """A last ``ping``: frames written after the final reply show up here as strays.  False when
        the worker cannot answer any more (it is dead, or the channel is lost)."""
        if self._session.dead is not None:
            return False
        try:
            self._session.restart_clock(timeout)
            reply = self.request({"cmd": "ping"}, timeout)
        except WorkerFailure:
            return False
        return bool(isinstance(reply, dict) and reply.get("ok"))


def _describe_stray(msg: Any, cmd: str, seq: int) -> dict[str, Any]:
    got = {k: msg.get(k) for k in ("nonce", "seq")} if isinstance(msg, dict) else {}
    keys = sorted(msg)[:12] if isinstance(msg, dict) else []
    why = ("no nonce / sequence number" if not got.get("nonce") and got.get("seq") is None else
           "a reply to an earlier request" if isinstance(got.get("seq"), int) and got["seq"] < seq else
           "a nonce or sequence number the parent never sent")
    return {"while_waiting_for": cmd, "seq": seq, "frame": {"type": type(msg).__name__, "keys": keys,
                                                            "echo": got}, "why": why}
