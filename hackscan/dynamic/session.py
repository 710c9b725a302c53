"""Parent side: one conversation with one worker (``Session``) and how a worker fails
(``WorkerFailure``).

A session runs every request against a wall-clock deadline and a memory limit, and kills a worker
that overruns either with its whole process tree.  Nothing received is unpickled (see ``wire``).
It sits below both ways of starting a worker, the zygote pool (``pool.py``) and the bubblewrap
sandbox (``sandbox.py``), so that neither has to import the other to hand out sessions.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from ..util.tail import read_tail
from . import spill
from .shared import wire


class WorkerFailure(Exception):
    """The worker died, hung or outgrew its memory; ``kind`` says which."""

    def __init__(self, kind: str, message: str, status: int | None = None, log_tail: str = ""):
        super().__init__(message)
        self.kind = kind  # crash | timeout | memory | disk | protocol
        self.status = status
        self.log_tail = log_tail

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": str(self), "status": self.status, "log_tail": self.log_tail[-1500:]}


def _status_text(status: int | None) -> str:
    if status is None:
        return "unknown exit status"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by {name}"
    if os.WIFEXITED(status):
        return f"exited with code {os.WEXITSTATUS(status)}"
    return f"status {status}"


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Session:
    """A conversation with one worker, under one overall deadline."""

    # when the last request went out (the earliest a build notice may be stamped) and the wall
    # deadline (``bound``); set per session, defaults for one made without ``__init__``
    _sent_at = float("-inf")
    wall_deadline: float | None = None

    def __init__(self, zygote: Any, pid: int, sock: socket.socket, log: Path, timeout: float,
                 mem_bytes: int | None, handle: Any = None):
        self.zygote = zygote
        # a sandboxed worker (``sandbox.Handle``): its tree's memory, its kill and exit status
        self.handle = handle
        self.pid = pid
        self.sock = sock
        self.log = log
        self.deadline = time.monotonic() + timeout
        # the worker's last moment, kept by the parent alone (``bound``): no restart of the clock,
        # no build notice and nothing else the worker sends moves it
        self.wall_deadline: float | None = None
        self.mem_bytes = mem_bytes
        # large replies (probe outputs) go to a file, not the parent's heap (spill.py)
        self.reader = wire.FrameReader(sock, spill.sink)
        self.dead: WorkerFailure | None = None
        self.peak_rss = 0
        self.pending = False
        # seconds a build may take; the time limit stops while one runs (the worker says so)
        self.compile_allowance = 0.0
        self._paused_remaining: float | None = None
        self._paused_at = 0.0
        self._sent_at = time.monotonic()
        self.builds: list[dict[str, Any]] = []

    def cpu_seconds(self) -> float:
        """CPU time of the worker's whole process tree so far (the sandbox's, or the process's own
        without one), read by the parent."""
        from .limits import proc_cpu_seconds

        if self.handle is not None:
            return float(self.handle.limit.cpu_seconds())
        return proc_cpu_seconds(self.pid)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def bound(self, seconds: float) -> None:
        """The worker's wall-clock deadline: ``seconds`` from now, or sooner when one is set already."""
        end = time.monotonic() + max(float(seconds), 0.0)
        self.wall_deadline = end if self.wall_deadline is None else min(self.wall_deadline, end)
        self.deadline = min(self.deadline, self.wall_deadline)

    def _clamp(self) -> None:
        if self.wall_deadline is not None and not self.deadline <= self.wall_deadline:
            self.deadline = self.wall_deadline  # also NaN: a NaN deadline never passes

    def restart_clock(self, timeout: float) -> None:
        """A new time limit from now (the probing phase after a long compile)."""
        self.deadline = time.monotonic() + timeout
        self._clamp()

    def log_tail(self) -> str:
        return read_tail(self.log, 3000)

    def send(self, msg: dict[str, Any]) -> None:
        if self.dead is not None:
            raise self.dead
        # the reader leaves a short timeout on the socket; a large frame needs the worker's pace
        self.sock.settimeout(max(self.remaining(), 1.0))
        try:
            wire.send(self.sock, msg)
        except TimeoutError:
            self._died("timeout", "the worker stopped reading its requests")
        except OSError:
            self._died("crash", "the worker closed its channel")
        self.pending = True
        self._sent_at = time.monotonic()

    def recv(self, timeout: float | None = None) -> Any:
        """The reply to the last request; raises ``WorkerFailure`` when the worker cannot give it."""
        if self.dead is not None:
            raise self.dead
        end = self.deadline if timeout is None else min(self.deadline, time.monotonic() + timeout)
        while True:
            left = end - time.monotonic()
            # read what has arrived before judging the deadline: a build-started notice may be
            # waiting, and it moves the deadline
            try:
                frame = self.reader.poll(max(min(left, 0.25), 0.005))
            except wire.PeerClosed:
                self._died("crash", "the worker died")
            except wire.WireError as exc:
                self._died("protocol", f"the worker sent a malformed frame: {exc}")
            except OSError:  # a reset channel: the worker is gone
                self._died("crash", "the worker died")
            if frame is not None:
                try:
                    msg = wire.decode(frame[0], frame[1], side="parent")
                except wire.WireError as exc:
                    self._died("protocol", f"the worker sent a malformed reply: {exc}")
                if isinstance(msg, dict) and "__progress__" in msg:
                    self._progress(msg["__progress__"])
                    end = self.deadline if timeout is None else max(end, self.deadline)
                    continue
                self.pending = False
                return msg
            if time.monotonic() >= end:
                if self.wall_deadline is not None and end >= self.wall_deadline:
                    self._died("timeout", "the worker ran past its wall-clock deadline "
                                          "(the whole candidate's, which nothing it sends extends)")
                self._died("timeout", "the worker ran past its time limit" if end >= self.deadline
                           else "the worker did not answer in time")
            rss = self.handle.rss() if self.handle is not None else _rss_bytes(self.pid)
            self.peak_rss = max(self.peak_rss, rss)
            if self.mem_bytes and rss > self.mem_bytes:
                whose = "the worker's process tree" if self.handle is not None else "the worker"
                self._died("memory", f"{whose} used {rss / 2**30:.1f} GiB, over the "
                                     f"{self.mem_bytes / 2**30:.1f} GiB limit")
            over = self.handle.disk_over() if self.handle is not None else None
            if over:
                self._died("disk", over)
            if self.handle is not None and self.handle.limit.oom_kills():
                # a child killed at the sandbox's limit: the worker may carry on, the finding stands
                self._died("memory", "a process of the worker's tree was killed at its memory limit "
                                     f"({self.mem_bytes / 2**30:.1f} GiB for the whole tree)")

    def _progress(self, event: Any) -> None:
        """A build started or ended in the worker: its time does not count against the limit."""
        if not isinstance(event, dict) or not self.compile_allowance:
            return
        # the worker stamps events with CLOCK_MONOTONIC (shared by all processes): exact even when
        # the parent reads them late, e.g. after the reference's probes.  A stamp is the worker's
        # word: one in the future (or not a number) would move the deadline as far as it likes, so
        # it is held between the request and the moment the parent reads it
        now = time.monotonic()
        at = event.get("at")
        at = float(at) if type(at) in (int, float) and at == at else now
        at = min(max(at, self._sent_at), now)
        # the allowance is spent, not renewed, by each build: a worker sending notices of its own
        # cannot stop the clock for longer than compile_allowance in all
        if event.get("build") == "start" and self._paused_remaining is None:
            self._paused_remaining = max(self.deadline - at, 1.0)
            self._paused_at = at
            self.deadline = at + max(self.compile_allowance, 0.0)
        elif event.get("build") == "end" and self._paused_remaining is not None:
            self.compile_allowance -= max(at - self._paused_at, 0.0)
            self.deadline = at + self._paused_remaining
            self._paused_remaining = None
            self.builds.append(event)
        self._clamp()

    def request(self, msg: dict[str, Any], timeout: float | None = None) -> Any:
        self.send(msg)
        return self.recv(timeout)

    def _died(self, kind: str, message: str) -> None:
        if self.handle is not None:
            # the worker's own exit status first (killing the sandbox would hide it)
            status = self.handle.exit_status(wait=2.0)
            self.kill()
        else:
            self.kill()
            status = self.zygote.exit_status(self.pid, wait=2.0)
        text = message
        if kind == "crash":
            text = f"{message} ({_status_text(status)})"
            if status is not None and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
                tail = self.log_tail()
                if "MemoryError" in tail or "std::bad_alloc" in tail or (
                        self.handle is not None and self.handle.limit.oom_kills()):
                    kind = "memory"
                    text = f"{message}: the worker's process tree reached its memory limit"
        self.dead = WorkerFailure(kind, text, status, self.log_tail())
        raise self.dead

    def kill(self) -> None:
        if self.handle is not None:
            self.handle.kill()
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        if getattr(self, "_closed", False):
            return  # closed early (a fresh pair of timing workers, timing_pairs._fresh_pair), then again at the end
        self._closed = True
        if self.dead is None and not self.pending:
            try:
                self.request({"cmd": "exit"}, timeout=2.0)
            except WorkerFailure:
                pass
        self.kill()
        try:
            self.sock.close()
        except OSError:
            pass
        if self.handle is not None:
            self.handle.destroy()
        try:
            self.log.unlink()
        except OSError:
            pass
