"""The ``--perf`` mode a scan takes when none is asked for (perf/default_mode.py): ``quick`` on a
small host without a GPU, where five pairs of fresh worker processes per timed candidate made the
demo take minutes; ``target`` wherever a GPU is or cores are many, and whatever is asked for."""

from __future__ import annotations

import pytest

from hackscan.perf.default_mode import default_perf_mode, gpu_visible


@pytest.mark.parametrize("device,cores,gpu,want", [
    ("auto", 2, False, "quick"),
    ("cpu", 4, True, "quick"),      # the CPU asked for on a GPU host: timed on the CPU all the same
    ("auto", 2, True, "target"),    # a GPU host times on the GPU
    ("cuda", 2, False, "target"),
    ("auto", 16, False, "target"),  # a large CPU host can afford the pairs
])
def test_default_by_host_size(device: str, cores: int, gpu: bool, want: str) -> None:
    mode, why = default_perf_mode(device, cores=cores, gpu=gpu)
    assert mode == want
    assert (why is not None) == (want == "quick")
    if why:
        assert "--perf target" in why and f"{cores} cores" in why


def test_hidden_gpus_are_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_visible() is False


@pytest.mark.parametrize("device,cores,gpu,want", [
    ("auto", 2, False, 2),    # builds are CPU work: one candidate per core
    ("auto", 64, False, 4),   # at most four in flight
    ("auto", 2, True, 1),     # a GPU host keeps one (candidates share the GPU through --jobs N)
    ("cpu", 1, True, 1),
])
def test_default_jobs_by_host(device: str, cores: int, gpu: bool, want: int) -> None:
    from hackscan.perf.default_mode import default_jobs_for_host

    assert default_jobs_for_host(device, cores=cores, gpu=gpu) == want
