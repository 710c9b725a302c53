"""Worker side: the first code a sandboxed worker runs (see ``sandbox.py``).

It runs before anything untrusted: makes the process non-dumpable, imports torch and the worker
code, says it is ready, imports what the parent asks it to preload while it waits as a spare, and
then serves the one spec it is given.  The socket to the parent is the one socket among its open
descriptors (the sandbox passes nothing else), so nothing on the command line or in the
environment names it.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import stat
import sys
import traceback
from typing import Any

from ..shared import wire


def _channel() -> socket.socket:
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        if fd <= 2:
            continue
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                return socket.socket(fileno=fd)
        except OSError:
            continue
    raise RuntimeError("no channel to the parent")


def _nondumpable() -> None:
    """No core dumps, and /proc/PID/mem of this process closed to everything but itself."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _info() -> dict[str, Any]:
    import importlib.util
    import shutil

    import torch

    ok = bool(torch.cuda.is_available())
    return {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cuda": ok,
        "cuda_devices": torch.cuda.device_count() if ok else 0,
        "torch_cuda": torch.version.cuda,
        "triton": importlib.util.find_spec("triton") is not None,
        "cxx": shutil.which("c++") or shutil.which("g++"),
        "nvcc": shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                         if os.environ.get("CUDA_HOME") else None),
        "threads": torch.get_num_threads(),
    }


def _preload() -> None:
    import torch  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    import torch.utils.deterministic  # noqa: F401
    from torch.utils import _python_dispatch  # noqa: F401

    from . import base, candidate, census, hidden, perf, reference, serve, values  # noqa: F401



def _import(names: list[str]) -> list[str]:
    done = []
    for name in names:
        try:
            __import__(str(name))
            done.append(str(name))
        except Exception:
            pass
    return done


def main() -> None:
    code = 70
    sock = None
    try:
        _nondumpable()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 30, 4 << 30))
        # what a plain ``python script.py`` has (whatever the launching process left): SIGINT
        # raises KeyboardInterrupt, SIGPIPE is ignored (a write to a closed socket raises), SIGTERM
        # ends the process; other dispositions would tell the candidate it is not in a plain run
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sock = _channel()
        try:
            sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except Exception:
            pass
        # Two workers share the cores (the reference probes while the candidate compiles), often with
        # other work: spinning OpenMP barriers then cost 100x on small ops.  libgomp reads this when
        # torch loads it; it is set here, not in the sandbox's environment, and removed again, so
        # the candidate sees the environment a harness has.
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        try:
            _preload()
            info = _info()
        except BaseException as exc:  # noqa: BLE001
            wire.send(sock, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
            raise
        os.environ.pop("OMP_WAIT_POLICY", None)
        wire.send(sock, {"ready": True, "info": info})
        while True:
            msg = wire.recv(sock, None, side="worker")
            if not isinstance(msg, dict):
                continue
            if msg.get("cmd") == "preload":
                _import(list(msg.get("modules") or []))
                continue
            if msg.get("cmd") == "spec":
                spec = dict(msg.get("spec") or {})
                break
        _import(list(spec.get("preload") or []))
        mem = spec.get("mem_bytes")
        if mem and spec.get("device") == "cpu" and not spec.get("build_only"):
            # CUDA maps huge virtual ranges, so the address-space limit is for the CPU only; the
            # sandbox's cgroup limits the whole tree on every device.  Not for the build farm
            # (farm.py): its compilers inherit the limit, and a GPU worker, whose builds it
            # stands in for, has none
            resource.setrlimit(resource.RLIMIT_AS, (int(mem), int(mem)))
        threads = spec.get("threads")
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        from .serve import serve

        serve(sock, spec)
        code = 0
    except wire.PeerClosed:
        code = 0
    except BaseException:  # noqa: BLE001 - the worker's last words go to its log
        last_words()
    finally:
        flush_streams()
        os._exit(code)


def last_words() -> None:
    """The traceback of what ended a worker, into its log (which the parent quotes); never raises."""
    try:
        traceback.print_exc()
    except Exception:
        pass


def flush_streams() -> None:
    """Flush stdout and stderr before ``os._exit`` (which skips the interpreter's own flush)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
