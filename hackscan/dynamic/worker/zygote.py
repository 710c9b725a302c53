"""The forkserver: imports torch once, then forks one worker per candidate or reference.

Started by the parent as ``python -m hackscan.dynamic.worker.zygote FD`` where FD is its end of a
``SOCK_SEQPACKET`` control socket.  Requests are JSON (``spawn`` with the worker's spec and, as
ancillary data, the worker's end of its own socketpair; ``shutdown``).  Replies: ``ready`` once,
``spawned`` per request, ``exit`` whenever a worker ends (with its raw wait status).

CUDA is never initialised here (``PYTORCH_NVML_BASED_CUDA_CHECK=1`` keeps ``is_available`` from
doing so), because a CUDA context does not survive ``fork``.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
from typing import Any

from .boot import flush_streams, last_words


def _send(ctrl: socket.socket, msg: dict[str, Any]) -> None:
    ctrl.send(json.dumps(msg).encode("utf-8"))


def _preload() -> dict[str, Any]:
    import importlib.util
    import shutil

    import torch
    import torch.nn.functional  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    import torch.utils.deterministic  # noqa: F401
    from torch.utils import _python_dispatch  # noqa: F401

    # ``perf`` imports the perf worker side, whose clock snapshots the timers, before any fork
    from . import base, candidate, census, hidden, perf, reference, serve, values  # noqa: F401

    cuda, count = _cuda_in_a_child()
    return {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cuda": cuda,
        "cuda_devices": count,
        "torch_cuda": torch.version.cuda,
        "triton": importlib.util.find_spec("triton") is not None,
        "cxx": shutil.which("c++") or shutil.which("g++"),
        "nvcc": shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                         if os.environ.get("CUDA_HOME") else None),
        "threads": torch.get_num_threads(),
    }


def _cuda_in_a_child() -> tuple[bool, int]:
    """Ask a throwaway child whether CUDA works: where NVML is missing, the check initialises the
    CUDA runtime, and a zygote that did that could no longer fork workers that use CUDA."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            import torch

            ok = bool(torch.cuda.is_available())
            n = torch.cuda.device_count() if ok else 0
            os.write(w, f"{int(ok)} {n}".encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    try:
        while True:
            chunk = os.read(r, 64)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        ok, n = data.decode().split()
        return bool(int(ok)), int(n)
    except ValueError:
        return False, 0


def _pdeathsig() -> None:
    """Die with the zygote, so no worker outlives an interrupted scan."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _child(ctrl: socket.socket, fd: int, spec: dict[str, Any]) -> None:
    code = 70
    workdir = ""
    try:
        ctrl.close()
        os.setsid()
        _pdeathsig()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Candidates write files (generated .cu sources, build folders, logs) relative to the
        # working directory: give each worker an empty one of its own, removed when it exits, so
        # a candidate never litters (or reads from) the user's folder.
        workdir = tempfile.mkdtemp(prefix="hackscan-worker-")
        os.chdir(workdir)
        # a candidate printing without end must not fill the disk with its log (builds stay far below)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 30, 4 << 30))
        if spec.get("device") == "cpu":
            # Triton kernels run on the CPU through Triton's interpreter (read at decoration time)
            os.environ.setdefault("TRITON_INTERPRET", "1")
        mem = spec.get("mem_bytes")
        if mem and spec.get("device") == "cpu":
            resource.setrlimit(resource.RLIMIT_AS, (int(mem), int(mem)))
        log = spec.get("log")
        if log:
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.close(out)
        sock = socket.socket(fileno=fd)
        threads = spec.get("threads")
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        from .serve import serve

        serve(sock, spec)
        code = 0
    except BaseException:  # noqa: BLE001 - the worker's last words go to its log
        last_words()
    finally:
        flush_streams()
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        os._exit(code)


def main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        info = _preload()
    except BaseException as exc:  # noqa: BLE001
        _send(ctrl, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return
    _send(ctrl, {"ready": True, "info": info})
    children: set[int] = set()
    signal.signal(signal.SIGCHLD, lambda *_: None)  # interrupts select so exits are reported promptly
    while True:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(ctrl, {"exit": pid, "status": status})
        try:
            ready, _, _ = select.select([ctrl], [], [], 0.5)
        except InterruptedError:
            continue
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, 1 << 20, 4)
        except InterruptedError:
            continue
        except OSError:
            data, fds = b"", []
        if not data:  # the parent is gone: take every worker down with us
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            return
        req = json.loads(data.decode("utf-8"))
        if req.get("cmd") == "shutdown":
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            _send(ctrl, {"bye": True})
            return
        if req.get("cmd") == "preload":
            done = []
            for name in req.get("modules", []):
                try:
                    __import__(name)
                    done.append(name)
                except Exception:
                    pass
            _send(ctrl, {"preloaded": done})
            continue
        if req.get("cmd") == "spawn" and fds:
            pid = os.fork()
            if pid == 0:
                _child(ctrl, fds[0], req["spec"])
            os.close(fds[0])
            children.add(pid)
            _send(ctrl, {"spawned": req.get("token"), "pid": pid})
        else:
            for f in fds:
                os.close(f)
            _send(ctrl, {"error": "bad request"})


if __name__ == "__main__":
    main(int(sys.argv[1]))
