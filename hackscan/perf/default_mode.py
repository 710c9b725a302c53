"""The ``--perf`` mode and ``--jobs`` a scan takes when none is asked for: chosen by the machine.

``target`` spreads each candidate's paired speedup over up to five pairs of fresh worker
processes (about 40 s a timed candidate, several minutes on a small loaded CPU host, where the
figure is also the least worth having: a CPU timing of a GPU kernel's stand-in).  On a host with
no GPU and few cores the default is ``quick``: the same verdicts (timing decides no finding of a
candidate the findings already reject, and ``quick`` skips only those and the fresh pairs), the
speedup from the scan's own pair, the spread between processes stated as unknown.  Anything
that asks for a mode (``--perf``, ``perf_mode`` in the config) gets it.
"""

from __future__ import annotations

import glob
import os

# a CPU-only host with at most this many usable cores gets ``quick``
SMALL_HOST_CORES = 4


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpu_visible() -> bool:
    """Whether an NVIDIA GPU is visible to this process, without importing torch (the parent's
    start stays light): a device node, unless CUDA_VISIBLE_DEVICES hides every card."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def default_perf_mode(device: str, cores: int | None = None, gpu: bool | None = None) -> tuple[str, str | None]:
    """(mode, why) for a scan whose ``--device`` is ``device`` (auto, cpu, cuda); ``why`` is a
    sentence for the log when the mode is not ``target``, None otherwise."""
    cores = usable_cores() if cores is None else cores
    gpu = gpu_visible() if gpu is None else gpu
    on_cpu = device == "cpu" or (device == "auto" and not gpu)
    if on_cpu and cores <= SMALL_HOST_CORES:
        return "quick", (f"--perf quick (the default on a host with no GPU and {cores} core{'s' * (cores != 1)}: "
                         "the speedup from one pair of worker processes, no timing of a candidate already "
                         "rejected); --perf target for the full timing")
    return "target", None


def default_jobs_for_host(device: str, cores: int | None = None, gpu: bool | None = None) -> int:
    """``--jobs`` when none is given: on a host with no GPU (or ``--device cpu``) one candidate per
    core, at most four, because there a candidate's time is mostly its C++ builds (100-230 s each on
    a loaded 2-core host), CPU work that one candidate at a time leaves a core idle for; timing
    stays exclusive (dynamic/schedule.py), so the figures are those of a run with one job.  On a
    GPU host 1, as before: candidates there share the GPU (--jobs N and the build farm)."""
    cores = usable_cores() if cores is None else cores
    gpu = gpu_visible() if gpu is None else gpu
    if device == "cpu" or (device == "auto" and not gpu):
        return max(1, min(cores, 4))
    return 1
