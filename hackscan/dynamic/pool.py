"""Parent side: the zygote process and the worker sessions forked from it.

The parent holds one zygote per device setting for the life of the process (starting one costs
an ``import torch``, about 2 s here) and forks a fresh worker per candidate and per reference.  A
``Session`` is one conversation with one worker: every request runs against a wall-clock deadline
and an RSS limit, and a worker that overruns either is killed with its whole process group.
Nothing received is unpickled (see ``wire``).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .shared import wire


class WorkerFailure(Exception):
    """The worker died, hung or outgrew its memory; ``kind`` says which."""

    def __init__(self, kind: str, message: str, status: int | None = None, log_tail: str = ""):
        super().__init__(message)
        self.kind = kind  # crash | timeout | memory | protocol
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


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


class Zygote:
    """One forkserver process; ``spawn`` forks a worker from it."""

    def __init__(self, device: str, log_dir: Path, start_timeout: float = 180.0,
                 extra_env: dict[str, str] | None = None):
        self.device = device
        self.log_dir = log_dir
        self.exits: dict[int, int] = {}
        self.preloaded: set[str] = set()
        self._lock = threading.Lock()
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        # two workers share the cores (the reference probes while the candidate compiles), often
        # with other work: spinning OpenMP barriers then cost 100x on small ops
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env.setdefault("PYTHONUNBUFFERED", "1")
        root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(extra_env or {})
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
            env.setdefault("TRITON_INTERPRET", "1")
        self.log_path = log_dir / "zygote.log"
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hackscan.dynamic.worker.zygote", str(child_end.fileno())],
                pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True, close_fds=True)
        finally:
            log.close()
            child_end.close()
        self.ctrl = parent_end
        self.started = time.monotonic()
        msg = self._read(start_timeout)
        if msg is None or not msg.get("ready"):
            self.close()
            why = (msg or {}).get("error") or "no answer in time"
            raise WorkerFailure("crash", f"the worker server did not start: {why}", log_tail=self.log_tail())
        self.info: dict[str, Any] = msg["info"]
        self.start_seconds = time.monotonic() - self.started

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, timeout: float) -> dict[str, Any] | None:
        """One control message (exit notices are filed away and skipped)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.ctrl], [], [], min(left, 0.5))
            if not r:
                if not self.alive():
                    return None
                continue
            data = self.ctrl.recv(1 << 20)
            if not data:
                return None
            msg = json.loads(data.decode("utf-8"))
            if "exit" in msg:
                self.exits[int(msg["exit"])] = int(msg["status"])
                continue
            return msg

    def drain(self) -> None:
        while True:
            r, _, _ = select.select([self.ctrl], [], [], 0)
            if not r:
                return
            data = self.ctrl.recv(1 << 20)
            if not data:
                return
            msg = json.loads(data.decode("utf-8"))
            if "exit" in msg:
                self.exits[int(msg["exit"])] = int(msg["status"])

    def exit_status(self, pid: int, wait: float = 1.0) -> int | None:
        end = time.monotonic() + wait
        with self._lock:
            while True:
                self.drain()
                if pid in self.exits:
                    return self.exits.pop(pid)
                if time.monotonic() >= end or not self.alive():
                    return None
                select.select([self.ctrl], [], [], 0.05)

    def preload(self, modules: list[str], timeout: float = 120.0) -> list[str]:
        """Import more modules in the zygote, so every later worker starts with them."""
        wanted = [m for m in modules if m not in self.preloaded]
        if not wanted:
            return []
        with self._lock:
            self.ctrl.send(json.dumps({"cmd": "preload", "modules": wanted}).encode())
            reply = self._read(timeout) or {}
        done = list(reply.get("preloaded", []))
        self.preloaded.update(wanted)
        return done

    def spawn(self, spec: dict[str, Any], timeout: float, mem_bytes: int | None = None,
              source: str | None = None) -> Session:
        with self._lock:
            if not self.alive():
                raise WorkerFailure("crash", "the worker server is gone", log_tail=self.log_tail())
            ours, theirs = socket.socketpair()
            fd, log = tempfile.mkstemp(prefix=f"{spec.get('role', 'worker')}-", suffix=".log", dir=self.log_dir)
            os.close(fd)
            spec = dict(spec, log=log, mem_bytes=mem_bytes)
            spec.setdefault("device", self.device)
            token = os.urandom(6).hex()
            try:
                socket.send_fds(self.ctrl, [json.dumps({"cmd": "spawn", "token": token, "spec": spec}).encode()],
                                [theirs.fileno()])
            finally:
                theirs.close()
            reply = self._read(30.0)
            if not reply or reply.get("spawned") != token:
                ours.close()
                raise WorkerFailure("crash", "the worker server did not fork a worker", log_tail=self.log_tail())
        return Session(self, int(reply["pid"]), ours, Path(log), timeout, mem_bytes)

    def close(self) -> None:
        try:
            if self.alive():
                self.ctrl.send(json.dumps({"cmd": "shutdown"}).encode())
                self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            self.ctrl.close()
        except OSError:
            pass


class Session:
    """A conversation with one worker, under one overall deadline."""

    def __init__(self, zygote: Any, pid: int, sock: socket.socket, log: Path, timeout: float,
                 mem_bytes: int | None, handle: Any = None):
        self.zygote = zygote
        # a sandboxed worker (``sandbox.Handle``): its tree's memory, its kill and exit status
        self.handle = handle
        self.pid = pid
        self.sock = sock
        self.log = log
        self.deadline = time.monotonic() + timeout
        self.mem_bytes = mem_bytes
        self.reader = wire.FrameReader(sock)
        self.dead: WorkerFailure | None = None
        self.peak_rss = 0
        self.pending = False
        # seconds a build may take; the time limit stops while one runs (the worker says so)
        self.compile_allowance = 0.0
        self._paused_remaining: float | None = None
        self._paused_at = 0.0
        self.builds: list[dict[str, Any]] = []

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def restart_clock(self, timeout: float) -> None:
        """A new time limit from now (the probing phase after a long compile)."""
        self.deadline = time.monotonic() + timeout

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

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
                self._died("timeout", "the worker ran past its time limit" if end >= self.deadline
                           else "the worker did not answer in time")
            rss = self.handle.rss() if self.handle is not None else _rss_bytes(self.pid)
            self.peak_rss = max(self.peak_rss, rss)
            if self.mem_bytes and rss > self.mem_bytes:
                whose = "the worker's process tree" if self.handle is not None else "the worker"
                self._died("memory", f"{whose} used {rss / 2**30:.1f} GiB, over the "
                                     f"{self.mem_bytes / 2**30:.1f} GiB limit")
            if self.handle is not None and self.handle.limit.oom_kills():
                # a child killed at the sandbox's limit: the worker may carry on, the finding stands
                self._died("memory", "a process of the worker's tree was killed at its memory limit "
                                     f"({self.mem_bytes / 2**30:.1f} GiB for the whole tree)")

    def _progress(self, event: Any) -> None:
        """A build started or ended in the worker: its time does not count against the limit."""
        if not isinstance(event, dict) or not self.compile_allowance:
            return
        # the worker stamps events with CLOCK_MONOTONIC (shared by all processes): exact even when
        # the parent reads them late, e.g. after the reference's probes
        at = float(event.get("at") or time.monotonic())
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


def nondumpable() -> None:
    """No core dumps of this process, and its memory closed to ptrace and /proc/PID/mem of any
    process without CAP_SYS_PTRACE: it holds the reference's outputs."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


class WorkerPool:
    """Worker launchers by device setting, started on first use and closed at exit.

    ``sandbox`` is ``"required"`` (the default: every worker in its own bubblewrap sandbox, see
    ``sandbox.py``; where none can be built the dynamic stage refuses to run) or ``"off"`` (the
    old forkserver, no walls: only for code you trust, on a machine you can lose)."""

    def __init__(self, sandbox: str | None = None, warm: bool = True, spares: int = 2,
                 cache_root: str | None = None) -> None:
        from .sandbox import MODES

        self.sandbox = sandbox or MODES[0]
        if self.sandbox not in MODES:
            raise ValueError(f"sandbox must be one of {', '.join(MODES)}, not {self.sandbox!r}")
        self.warm = warm
        # sandboxes started ahead per launcher: two per candidate in flight (its reference's and its own)
        self.spares = spares
        # the extension build cache (None: HACKSCAN_CACHE_DIR or ~/.cache/hackscan)
        self.cache_root = cache_root
        # TORCH_CUDA_ARCH_LIST for every worker, the build farm's included (farm.arch_list): set
        # before the first launcher starts
        self.cuda_arch: str | None = None
        # the build farm (farm.BuildFarm), made on first use
        self.farm: Any = None
        nondumpable()
        self._zygotes: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.failures: dict[str, str] = {}

    def _log_dir(self) -> Path:
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="hackscan-dyn-")
        return Path(self._dir.name)

    def zygote(self, device: str, harness: str | None = None, gpu: str | None = None,
               farm: Any = None) -> Any:
        """``device`` is ``cpu`` (GPUs hidden) or ``cuda``/``auto`` (GPUs visible); ``harness`` the
        profile whose working directory, argv and environment a sandboxed worker shows; ``gpu``
        the one GPU its workers see (schedule.py; None: every visible one).  ``farm`` (a
        ``farm.BuildFarm``): the build farm's launcher instead, no GPU, its own spares and
        ``MAX_JOBS``."""
        only = gpu if device != "cpu" and farm is None else None
        gpu = "cpu" if device == "cpu" or farm is not None else "gpu"
        env = {"TORCH_CUDA_ARCH_LIST": self.cuda_arch} if self.cuda_arch else {}
        if farm is not None:
            env.update(farm.env())
        if self.sandbox == "off":
            key = gpu
        else:
            from .shared.profiles import get_profile

            # by the profile's own name: prewarm() (no harness) and the stage (the default) share one
            key = f"{gpu}:{get_profile(harness).name}" + (f":{only}" if only is not None else "")
        if farm is not None:
            key = "farm:" + key
        with self._lock:
            z = self._zygotes.get(key)
            if z is not None and z.alive():
                return z
            if key in self.failures:
                raise WorkerFailure("sandbox", self.failures[key])
            if self.sandbox == "off":
                z = Zygote("cpu" if gpu == "cpu" else "cuda", self._log_dir(), extra_env=env)
            else:
                from .sandbox import Launcher, SandboxUnavailable, load_profile

                try:
                    z = Launcher("cpu" if gpu == "cpu" else "cuda", self._log_dir(), warm=self.warm,
                                 profile=load_profile(harness), gpu=only,
                                 spares=farm.slots if farm is not None else self.spares,
                                 cache_root=Path(self.cache_root) if self.cache_root else None, extra_env=env)
                except SandboxUnavailable as exc:
                    self.failures[key] = f"no sandbox for untrusted code: {exc}"
                    raise WorkerFailure("sandbox", self.failures[key]) from exc
            self._zygotes[key] = z
            return z

    def close(self) -> None:
        with self._lock:
            for z in self._zygotes.values():
                z.close()
            self._zygotes.clear()
            if self._dir is not None:
                self._dir.cleanup()
                self._dir = None


_DEFAULTS: dict[str, WorkerPool] = {}
_DEFAULT_LOCK = threading.Lock()


def default_pool(sandbox: str | None = None) -> WorkerPool:
    """The process-wide pool for a sandbox mode (``None``: the default mode)."""
    from .sandbox import MODES

    mode = sandbox or MODES[0]
    with _DEFAULT_LOCK:
        pool = _DEFAULTS.get(mode)
        if pool is None:
            pool = _DEFAULTS[mode] = WorkerPool(sandbox=mode)
            atexit.register(pool.close)
        return pool
