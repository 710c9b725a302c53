"""Parent side: the build farm, where a candidate's extensions are compiled before it gets a device.

A candidate that builds a C++/CUDA extension at import (``load_inline``, ``load``) spends 35-105 s
compiling.  Compiled by its own worker, that time was spent holding its device's gate shared
(schedule.py), so no other candidate could be timed on that GPU meanwhile (on a batch of eight,
the first timing could start only after 108 s).  The farm runs the candidate first in a sandbox of
its own, while its reference loads (``stage.DynamicRun._start_prebuild``): it imports it,
constructs ModelNew with the reference's init inputs and, if nothing was built yet, calls it once
on the CPU, with ``torch.cuda.is_available()`` reading True (``worker/prebuild.py``), so that
builds made in ``__init__``, on first use or behind ``is_available()`` are reached too (real
candidates build there as often as at import):

- the same walls as every worker (bubblewrap, cgroup, seccomp, its own uid; ``sandbox.py``), but
  no GPU visible and no device gate held (on a GPU host; on the CPU the builds are CPU work, so
  they hold the CPU's gate shared like any other work there);
- the same build cache, by source: the farm's sandbox is seeded with and harvested into
  ``<cache>/sandboxed/<hash of the candidate's source>/`` (``buildcache.BuildCache``), exactly the
  folder the candidate's real worker is seeded from, so the real worker finds the build and
  ninja has nothing to do.  A candidate can only ever plant builds under its own source's hash;
- the same compiler flags: torch picks the CUDA architectures from the visible GPUs, and with none
  visible it builds for every one (slow, and different flags would make the real worker rebuild).
  ``TORCH_CUDA_ARCH_LIST`` is therefore set in the farm's and the device workers' environment
  alike (``arch_list``: ``--cuda-arch``, the caller's own setting, or the visible GPUs' compute
  capability as ``nvidia-smi`` reports it, the way torch would spell it);
- bounded: at most ``slots`` farm builds at once, each with ``MAX_JOBS`` = cores / slots.

A farm build that fails with a compile error is not trusted as a verdict: the real worker imports
the candidate as before and torch's error is raised again there, with the same message, at the
same call (``extcache.ExtensionCache.known_failures``), so the report reads exactly as if the
worker had compiled it itself.  Anything else the farm sees (a crash, a time-out, an import error
before or after the build) is ignored: the real worker simply builds what is missing, under the
gate, as before.  The farm never adds a finding and never makes a candidate clean.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

from .session import WorkerFailure
from .spill import total_memory

# extension kinds the static stage finds (python/module.py) that compile at import
BUILD_KINDS = ("load_inline", "load")
MODES = ("auto", "on", "off")
# a farm build's memory: nvcc and cc1plus on a CUDA translation unit reach 2-3 GiB
FARM_BUILD_BYTES = 4 << 30


def arch_list(gpus: list[str], requested: str | None = None) -> str | None:
    """The ``TORCH_CUDA_ARCH_LIST`` every worker of this run builds with.  ``requested``
    (``--cuda-arch``) first, then the caller's own environment, then the compute capabilities of
    ``gpus`` (the run's visible GPUs, ``schedule.visible_gpus``) as ``nvidia-smi`` reports them (the
    highest gets ``+PTX``, as torch does when it reads them from the devices itself).  None on the
    CPU or when it cannot be learnt."""
    if requested:
        return requested
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if not gpus:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    listed: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        idx, _, cap = (x.strip() for x in line.partition(","))
        major, _, minor = cap.partition(".")
        if major.isdigit() and minor.isdigit():
            listed[idx] = (int(major), int(minor))
    # the run's GPUs by index; GPUs named otherwise (CUDA_VISIBLE_DEVICES=GPU-<uuid>): all listed
    caps = {c for i, c in listed.items() if i in gpus} or set(listed.values())
    if not caps:
        return None
    names = [f"{a}.{b}" for a, b in sorted(caps)]
    names[-1] += "+PTX"
    return ";".join(names)


def builds_at_import(target: Any) -> bool:
    """Whether the candidate compiles an extension when imported (what the static stage found)."""
    kinds = set(getattr(target, "extension_kinds", ()))
    return bool(kinds & set(BUILD_KINDS)) or "cxx" in getattr(target, "needs", ())


class BuildFarm:
    """At most ``slots`` builds at once, each with ``MAX_JOBS`` = cores / slots."""

    def __init__(self, jobs: int = 1, cores: int | None = None, memory: int | None = None):
        cores = max(int(cores or os.cpu_count() or 1), 1)
        by_memory = max(int((memory or total_memory()) // FARM_BUILD_BYTES), 1)
        # a load_inline build is two translation units and a link: two cores each is what ninja
        # can use; more candidates than that wait for a slot rather than thrash
        self.slots = max(1, min(int(jobs), cores // 2 or 1, by_memory))
        self.max_jobs = max(1, cores // self.slots)
        self._sem = threading.BoundedSemaphore(self.slots)

    def env(self) -> dict[str, str]:
        return {"MAX_JOBS": str(self.max_jobs)}

    def build(self, pool: Any, code: str, path: str, harness: str | None, profile: dict[str, Any],
              timeout: float, compile_allowance: float, mem_bytes: int | None,
              gate: Any = None, reference: str | None = None, seed: int = 0, gpu: bool = True) -> dict[str, Any]:
        """Import ``code`` in a farm sandbox (which builds its extensions into the cache; with
        ``reference``, also constructs ModelNew with its init inputs and, if that built nothing,
        calls it once: ``worker/prebuild.py``) and say what it built: ``builds`` (as the worker's
        ExtensionCache lists them), ``failures`` (build key -> torch's error, compile errors only),
        ``exercised`` (what the farm worker ran), ``seconds``, ``waited_s``; ``error`` when the
        farm could not run (the real worker then builds as before)."""
        t0 = time.perf_counter()
        with self._sem:
            waited = time.perf_counter() - t0
            held = gate() if gate is not None else None
            if held is not None:
                held.__enter__()
            try:
                out = self._build(pool, code, path, harness, profile, timeout, compile_allowance, mem_bytes,
                                  reference, seed, gpu)
            finally:
                if held is not None:
                    held.__exit__(None, None, None)
        out["waited_s"] = round(waited, 3)
        out["seconds"] = round(time.perf_counter() - t0 - waited, 3)
        return out

    def _build(self, pool: Any, code: str, path: str, harness: str | None, profile: dict[str, Any],
               timeout: float, compile_allowance: float, mem_bytes: int | None, reference: str | None,
               seed: int, gpu: bool) -> dict[str, Any]:
        try:
            launcher = pool.zygote("cpu", harness, farm=self)
            drawn = _draw(launcher, reference, seed, timeout, mem_bytes) if reference else None
            session = launcher.spawn({"role": "candidate", "path": path, "device": "cpu", "threads": 1,
                                      "perf": False, "build_only": True}, timeout=timeout, mem_bytes=mem_bytes, source=code)
        except WorkerFailure as exc:
            return {"error": f"the build farm could not start a worker: {exc}", "builds": [], "failures": {}}
        from .protocol import CheckedSession

        session.compile_allowance = compile_allowance
        session = CheckedSession(session, "candidate")
        try:
            msg: dict[str, Any] = {"cmd": "load", "code": code, "setups": [], "profile": profile}
            if drawn is not None:
                # values, never the reference's source (ReferenceWorker.draw); gpu: the real worker
                # sees a GPU, so the farm's must read as if it did (prebuild.py)
                msg["prebuild"] = {"init_inputs": drawn.get("init_inputs"), "inputs": drawn.get("inputs"),
                                   "seed": int(seed), "gpu": bool(gpu)}
            reply = session.request(msg)
        except WorkerFailure as exc:
            # the builds it finished are harvested all the same (close below)
            return {"error": f"the farm worker {exc.kind}: {exc}", "builds": list(session.builds), "failures": {}}
        finally:
            session.close()  # destroys the sandbox: its finished builds go into the cache
        if not isinstance(reply, dict):
            return {"error": "a load reply that is not an object", "builds": [], "failures": {}}
        builds = [b for b in reply.get("builds") or [] if isinstance(b, dict)]
        failures: dict[str, str] = {}
        for b in builds:
            # a compile error, as torch reports one; not a kill, a time-out or anything before it
            msg = b.get("error_text")
            if isinstance(msg, str) and b.get("error_type") == "RuntimeError" and \
                    msg.startswith("Error building extension") and isinstance(b.get("key"), str):
                failures[b["key"]] = msg
        out = {"builds": [{k: v for k, v in b.items() if k != "error_text"} for b in builds], "failures": failures}
        if isinstance(reply.get("prebuild"), dict):
            out["exercised"] = {str(k): str(v)[:200] for k, v in reply["prebuild"].items()}
        return out


# the largest get_inputs() draw the farm's candidate worker is called on (worker/prebuild.py's
# MAX_FORWARD_BYTES; the parent never imports the worker side)
FORWARD_BYTES = 1 << 30


def _draw(launcher: Any, reference: str, seed: int, timeout: float, mem_bytes: int | None) -> dict[str, Any] | None:
    """The reference's init inputs and one ``get_inputs()`` draw, from a reference worker of the
    farm's own (a sandbox the candidate never runs in); None when that fails (the farm then only
    imports the candidate, and the real worker builds what that misses)."""
    from .protocol import CheckedSession

    try:
        ref = launcher.spawn({"role": "reference", "path": "<reference>", "device": "cpu", "threads": 1,
                              "perf": False}, timeout=timeout, mem_bytes=mem_bytes, source=reference)
    except WorkerFailure:
        return None
    try:
        reply = CheckedSession(ref, "reference").request({"cmd": "draw", "code": reference, "seed": int(seed),
                                                          "max_bytes": FORWARD_BYTES})
    except WorkerFailure:
        return None
    finally:
        ref.close()
    return reply if isinstance(reply, dict) and reply.get("ok", True) and "init_inputs" in reply else None
