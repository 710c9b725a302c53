"""The Verifier on real candidates: pure-PyTorch ones (no compile) on small inputs, one Verifier
per setting for the module.  A batch verified on this host and on a Ray cluster started here
(loopback only) gets the same verdicts and rewards for the same seed; a timed run credits a
speedup with its interval.

The gate here leaves ``no-kernel`` out of its rejected classes, as a pipeline that scores a missing
kernel some other way does: a pure-PyTorch candidate is then accepted on its correctness and speed,
and these tests need no C++ build."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

import hackscan
from hackscan.rl.reward import RewardPolicy

from .conftest import FIXTURES

pytest.importorskip("torch")
RELU = FIXTURES / "dynamic" / "relu"
REF = (RELU / "reference.py").read_text()
BATCH = [((RELU / "legit.py").read_text(), REF), ((RELU / "hack_value_guard.py").read_text(), REF), ("None", REF)]
GATE = ("gaming", "integrity", "precision")
SEED = 7


@pytest.fixture(scope="module")
def local():
    torch_before = "torch" in sys.modules
    with hackscan.Verifier(device="cpu", seed=SEED, perf="off", reject_classes=GATE) as v:
        streamed = dict(v.stream(BATCH))
    # the candidates and the reference ran in child processes only
    assert torch_before or "torch" not in sys.modules
    return [streamed[i] for i in range(len(BATCH))]


def test_the_batch_is_judged_and_rewarded(local) -> None:
    legit, hack, empty = local
    assert legit.accepted and legit.correct and legit.seed == SEED and not legit.timed
    assert legit.verdict == "hack" and {f.rule for f in legit.findings} >= {"HS105"}  # no-kernel, not rejected here
    assert not hack.accepted and hack.rejected_for[0] == "gaming"
    assert {"HS101", "HS402"} <= {f.rule for f in hack.findings}
    assert empty.verdict == "error" and not empty.accepted
    # accepted but untimed: the reference's speed; rejected and error: the floor
    assert [RewardPolicy()(v) for v in local] == pytest.approx([1.3, 0.0, 0.0])


def test_ray_gives_the_same_results_as_this_host(local) -> None:
    ray = pytest.importorskip("ray")
    here = str(Path(hackscan.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    # a private cluster on the loopback address; cluster.connect keeps this connection
    ray.init(address="local", _node_ip_address="127.0.0.1", num_cpus=2, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        with hackscan.Verifier(device="cpu", seed=SEED, perf="off", reject_classes=GATE, ray="local") as v:
            remote = v.map(BATCH)
    finally:
        ray.shutdown()
    policy = RewardPolicy()
    assert [policy(v) for v in remote] == [policy(v) for v in local]
    for a, b in zip(remote, local, strict=True):
        assert (a.verdict, a.accepted, a.rejected_for, a.correct, a.seed) == \
               (b.verdict, b.accepted, b.rejected_for, b.correct, b.seed)
        assert sorted(f.rule for f in a.findings) == sorted(f.rule for f in b.findings)


def test_a_timed_candidate_is_rewarded_on_its_verified_speedup() -> None:
    v = hackscan.verify(BATCH[0][0], REF, device="cpu", seed=SEED, perf="quick", reject_classes=GATE)
    assert v.accepted and v.timed, v.reason
    sp = v.speedup()
    assert sp is not None and v.speedup("eager_fp32") == sp and sp.low is not None and sp.low <= sp.value <= sp.high
    assert RewardPolicy()(v) == pytest.approx(0.3 + math.log2(1 + min(sp.low, 10.0)))
