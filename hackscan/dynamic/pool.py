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

from ..util.tail import read_tail
from .session import Session, WorkerFailure


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
        return read_tail(self.log_path, 2000)

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
        # per launcher key, held while that launcher starts (zygote)
        self._starting: dict[str, threading.Lock] = {}
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
            z = self._live_zygote(key)
            if z is not None:
                return z
            starting = self._starting.setdefault(key, threading.Lock())
        # one launcher per key, but launchers of different keys start side by side: a launcher
        # waits for its first sandbox (10-25 s), and the build farm's starts while the GPU's does
        with starting:
            with self._lock:  # asked again: another thread may have started it while this one waited
                z = self._live_zygote(key)
                if z is not None:
                    return z
            z = self._make_zygote(key, gpu, only, harness, farm, env)
            with self._lock:
                self._zygotes[key] = z
            return z

    def _live_zygote(self, key: str) -> Any:
        """The running launcher of ``key``, or None; raises when its start has failed before.
        The caller holds ``self._lock``."""
        z = self._zygotes.get(key)
        if z is not None and z.alive():
            return z
        if key in self.failures:
            raise WorkerFailure("sandbox", self.failures[key])
        return None

    def _make_zygote(self, key: str, gpu: str, only: str | None, harness: str | None, farm: Any,
                     env: dict[str, str]) -> Any:
        with self._lock:
            log_dir = self._log_dir()
        if self.sandbox == "off":
            return Zygote("cpu" if gpu == "cpu" else "cuda", log_dir, extra_env=env)
        from .sandbox import Launcher, SandboxUnavailable, load_profile

        try:
            return Launcher("cpu" if gpu == "cpu" else "cuda", log_dir, warm=self.warm,
                            profile=load_profile(harness), gpu=only,
                            spares=farm.slots if farm is not None else self.spares,
                            cache_root=Path(self.cache_root) if self.cache_root else None, extra_env=env,
                            mode=self.sandbox)
        except SandboxUnavailable as exc:
            with self._lock:
                self.failures[key] = f"no sandbox for untrusted code: {exc}"
            raise WorkerFailure("sandbox", self.failures[key]) from exc

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
