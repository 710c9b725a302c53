"""A self-contained two-process measurement: the performance stage without the dynamic stage.

The dynamic stage (``hackscan.dynamic``) is the normal host of the performance stage.  This
runner exists for what must work without it: the GPU suite (``gpu/perf_suite.sh``), performance-
only runs of a candidate, and end-to-end tests.  It keeps the same rules: candidate and reference
each run in their own child process (``python -m hackscan.perf.worker.child``), only JSON comes back, the
candidate is timed only after its outputs matched the reference's on the correctness sets, and the
parent's own clock checks the candidate's reported times (HS609).

This module does not import torch.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Config
from ..model import Finding, Location
from ..util.tail import read_tail
from .compare import compare_outputs
from .options import PerfOptions
from .outside import spin_calls
from .parent_side import anchor_line, evaluate


class ChildError(Exception):
    pass


@dataclass(frozen=True)
class ReferenceRun:
    """The reference worker's replies, to measure further candidates of the same problem without it."""

    device: str
    check: dict[str, Any]
    raw: dict[str, Any]
    options: PerfOptions


@dataclass
class Outcome:
    """What one standalone run found."""

    performance: dict[str, Any]
    findings: list[Finding]
    correctness: dict[str, Any]
    device: str
    candidate_raw: dict[str, Any] | None = None
    reference_raw: dict[str, Any] | None = None
    logs: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    reference: ReferenceRun | None = None



class _Child:
    def __init__(self, job: dict[str, Any], timeout: float, env: Mapping[str, str] | None):
        r, w = os.pipe()
        self.log = tempfile.NamedTemporaryFile(prefix=f"hackscan-perf-{job['role']}-", suffix=".log", delete=False)
        full_env = dict(os.environ if env is None else env)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        # the package this file belongs to, importable from a checkout that was never installed
        root = str(Path(__file__).resolve().parents[2])
        full_env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.workdir = tempfile.mkdtemp(prefix="hackscan-perf-")
        self.proc = subprocess.Popen([sys.executable, "-m", "hackscan.perf.worker.child", str(w)],
                                     stdin=subprocess.PIPE, stdout=self.log, stderr=self.log, pass_fds=(w,), env=full_env,
                                     start_new_session=True, cwd=self.workdir)
        os.close(w)
        self.r = r
        self.buf = b""
        self.timeout = timeout
        self.started = time.monotonic()
        self.sel = selectors.DefaultSelector()
        self.sel.register(r, selectors.EVENT_READ)
        self._write(job)

    def _write(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise ChildError(f"the {obj.get('role', 'worker')} process exited early") from exc

    def read(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise ChildError(f"timed out after {timeout or self.timeout:.0f} s")
            if not self.sel.select(timeout=min(left, 1.0)):
                if self.proc.poll() is not None and b"\n" not in self.buf:
                    raise ChildError(f"the worker exited with status {self.proc.returncode}")
                continue
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise ChildError(f"the worker closed its channel (status {self.proc.poll()})")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        try:
            msg = json.loads(line)
        except ValueError as exc:
            raise ChildError(f"unreadable reply: {line[:200]!r}") from exc
        if not isinstance(msg, dict):
            raise ChildError("reply is not an object")
        return msg

    def request(self, obj: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        self._write(obj)
        return self.read(timeout)

    def timed(self, obj: dict[str, Any], timeout: float | None = None) -> tuple[dict[str, Any], float]:
        t0 = time.perf_counter()
        reply = self.request(obj, timeout)
        return reply, time.perf_counter() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()

    def close(self) -> str:
        if self.proc.poll() is None:
            try:
                self._write({"cmd": "exit"})
                self.read(timeout=30)
            except ChildError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.sel.close()
        os.close(self.r)
        self.log.close()
        # by seeking: the child's log may be GiBs
        text = read_tail(Path(self.log.name), 8000)
        os.unlink(self.log.name)
        shutil.rmtree(self.workdir, ignore_errors=True)
        return text


def _extensions_env() -> dict[str, str]:
    env = dict(os.environ)
    if "TORCH_EXTENSIONS_DIR" not in env:
        base = os.environ.get("HACKSCAN_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hackscan")
        env["TORCH_EXTENSIONS_DIR"] = os.path.join(base, "torch_extensions")
    return env


def run(candidate_code: str, reference_code: str, *, device: str = "auto", path: str = "<candidate>",
        reference_path: str = "<reference>", options: PerfOptions | Mapping[str, Any] | None = None,
        seed: int = 1234, timeout: float = 600.0, config: Config | None = None, outside_clock: bool = True,
        atol: float = 1e-2, rtol: float = 1e-2, reference: ReferenceRun | None = None) -> Outcome:
    """Measure one candidate against its reference in two child processes.

    ``reference`` (from an earlier ``Outcome.reference`` of the same problem, seed and options)
    skips the reference worker.
    """
    t_start = time.perf_counter()
    env = _extensions_env()
    logs: dict[str, str] = {}
    job = {"reference_code": reference_code, "reference_path": reference_path, "code": candidate_code, "path": path,
           "device": device, "seed": seed}
    location = Location(path, line=anchor_line(candidate_code))

    def done(perf: dict[str, Any], findings: list[Finding], correctness: dict[str, Any], dev: str,
             cand: dict[str, Any] | None = None, ref_raw: dict[str, Any] | None = None) -> Outcome:
        return Outcome(perf, findings, correctness, dev, cand, ref_raw, logs, time.perf_counter() - t_start, reference)

    if reference is None:
        got = _reference(job, timeout, env, options, logs)
        if isinstance(got, str):
            return done({"measured": False, "reason": got}, [], {"passed": None}, device)
        reference = got
    dev, opts, ref_check, ref_raw = reference.device, reference.options, reference.check, reference.raw

    cand = _Child({**job, "role": "candidate", "device": dev}, timeout, env)
    try:
        hello = cand.read()
        if not hello.get("ok"):
            logs["candidate"] = cand.close()
            return done({"measured": False, "reason": f"the candidate failed to load: {hello.get('error')}"}, [],
                        {"passed": False, "error": hello.get("error")}, dev, None, ref_raw)
        check = cand.request({"cmd": "check"})
        correctness = _correctness(check, ref_check, atol, rtol)
        if not correctness["passed"]:
            logs["candidate"] = cand.close()
            return done({"measured": False, "reason": "failed correctness: " + correctness.get("why", "")}, [],
                        correctness, dev, None, ref_raw)
        reply = cand.request({"cmd": "measure", "options": opts.to_dict()})
        cand_raw = reply.get("raw") if reply.get("ok") else {"error": reply.get("error")}
        outside = None
        if outside_clock and reply.get("ok"):
            outside = _outside_clock(cand, cand_raw, opts)
    except ChildError as exc:
        logs["candidate"] = cand.close()
        return done({"measured": False, "reason": f"candidate worker: {exc}"}, [], {"passed": None}, dev, None, ref_raw)
    logs["candidate"] = cand.close()
    perf, findings = evaluate(cand_raw, ref_raw, location=location, config=config, outside=outside)
    return done(perf, findings, correctness, dev, cand_raw, ref_raw)


def _reference(job: dict[str, Any], timeout: float, env: dict[str, str],
               options: PerfOptions | Mapping[str, Any] | None, logs: dict[str, str]) -> ReferenceRun | str:
    """Run the reference worker: correctness fingerprints, then the baselines.  A string says why not."""
    ref = _Child({**job, "role": "reference", "code": ""}, timeout, env)
    try:
        hello = ref.read()
        if not hello.get("ok"):
            return f"the reference failed to load: {hello.get('error')}"
        dev = str(hello.get("device", "cpu"))
        opts = options if isinstance(options, PerfOptions) else PerfOptions.for_device(dev, **dict(options or {}))
        check = ref.request({"cmd": "check"})
        if not check.get("ok"):
            return f"the reference failed on the correctness inputs: {check.get('error')}"
        reply = ref.request({"cmd": "measure", "options": opts.to_dict()})
        raw = reply.get("raw") if reply.get("ok") else {"error": reply.get("error")}
        return ReferenceRun(dev, check, raw, opts)
    except ChildError as exc:
        return f"reference worker: {exc}"
    finally:
        logs["reference"] = ref.close()


def _correctness(check: dict[str, Any], ref_check: dict[str, Any], atol: float, rtol: float) -> dict[str, Any]:
    if not check.get("ok"):
        return {"passed": False, "why": f"raised {str(check.get('error'))[:300]}"}
    c, r = check.get("fingerprints") or [], ref_check.get("fingerprints") or []
    if not r or len(c) != len(r):
        return {"passed": False, "why": "no comparable outputs"}
    for i, (ci, ri) in enumerate(zip(c, r, strict=False)):
        a = compare_outputs(ci, ri, atol, rtol)
        if not a.ok:
            return {"passed": False, "why": f"check set {i}: {a.reason} (worst {a.worst_excess:.3g}x tolerance)"}
    return {"passed": True, "sets": len(r)}


def _outside_clock(child: _Child, raw: dict[str, Any], opts: PerfOptions) -> dict[str, Any] | None:
    """Time back-to-back calls with the parent's clock; the round trip of a ping is subtracted."""
    calls = spin_calls(raw, opts.spin_budget_s)
    if calls is None:
        return None
    rtts = []
    for _ in range(3):
        _, rtt = child.timed({"cmd": "ping"})
        rtts.append(rtt)
    reply, parent_s = child.timed({"cmd": "spin", "calls": calls}, timeout=max(60.0, opts.spin_budget_s * 50))
    if not reply.get("ok"):
        return None
    return {"calls": calls, "parent_s": parent_s, "rtt_s": min(rtts), "child_s": reply.get("child_s")}
