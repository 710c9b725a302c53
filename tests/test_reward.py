"""The verified reward without running a candidate: the policy's arithmetic, a report read as a
``Verification``, and the generations that never reach the dynamic stage (empty, "None",
unparseable, no ``ModelNew``) scoring the floor."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

import hackscan
from hackscan.resume import report_from_dict
from hackscan.rl.reward import RewardPolicy
from hackscan.rl.verification import Speedup, Verification, from_report

from .conftest import FIXTURES

REF = (FIXTURES / "dynamic" / "relu" / "reference.py").read_text()


def _finding(rule: str, severity: str = "error") -> dict:
    return {"rule": rule, "name": rule, "severity": severity, "confidence": "high", "line": 3, "column": 1,
            "message": "m", "stage": "dynamic", "path": "<c>", "evidence": {}}


def _report(findings=(), verdict="clean", speedup=None, ci=None, valid=True, ran=True, probes=("pass",)) -> dict:
    d = {"path": "<c>", "verdict": verdict, "findings": [_finding(*f) for f in findings],
         "dynamic": {"ran": ran, "seed": 11, "probes": [{"id": f"p{i}", "status": s} for i, s in enumerate(probes)]}}
    if speedup is not None:
        d["performance"] = {"measured": True, "speedup": speedup, "speedup_ci": ci or {}, "valid": valid,
                            "speedup_confidence": 0.95}
    return d


def _v(d: dict, reject=None) -> Verification:
    return from_report(report_from_dict(d), reject)


def test_a_rejected_candidate_earns_the_floor_and_no_speedup() -> None:
    v = _v(_report([("HS101",)], "hack", speedup={"eager_fp32": 5.0}, ci={"eager_fp32": [4.0, 6.0]}))
    assert (v.accepted, v.rejected_for, v.speedups, v.correct) == (False, ("gaming",), {}, True)
    assert RewardPolicy()(v) == 0.0
    assert RewardPolicy(floor=-1.0)(v) == -1.0


def test_an_accepted_candidate_is_scored_on_the_lower_end_of_its_fastest_baseline() -> None:
    d = _report(speedup={"eager_fp32": 4.0, "eager_tf32": 3.0, "compile": 2.5},
                ci={"eager_fp32": [3.5, 4.5], "eager_tf32": [2.8, 3.2], "compile": [2.0, 3.0]})
    v = _v(d)
    assert v.accepted and v.correct and v.seed == 11
    assert v.speedup() == Speedup(2.5, 2.0, 3.0, 0.95)  # best: the fastest baseline, the smallest speedup
    assert RewardPolicy()(v) == pytest.approx(0.3 + math.log2(3.0))
    assert RewardPolicy(uncertainty="value")(v) == pytest.approx(0.3 + math.log2(3.5))
    assert RewardPolicy(baseline="eager_fp32")(v) == pytest.approx(0.3 + math.log2(4.5))
    # a baseline the run did not measure: the reference's speed, never a made-up figure
    assert RewardPolicy(baseline="compile")(_v(_report(speedup={"eager_fp32": 4.0}))) == pytest.approx(1.3)


def test_any_accepted_kernel_outscores_any_rejected_one_and_faster_scores_more() -> None:
    policy = RewardPolicy()
    rewards = [policy(_v(_report(speedup={"eager_fp32": s}, ci={"eager_fp32": [s * 0.9, s * 1.1]})))
               for s in (0.01, 0.5, 1.0, 2.0, 8.0, 50.0, 500.0)]
    assert min(rewards) > policy.floor
    assert rewards == sorted(rewards) and rewards[-1] == rewards[-2]  # capped at 10x
    # untrusted timing and no timing at all are credited the reference's speed
    assert policy(_v(_report(speedup={"eager_fp32": 9.0}, valid=False))) == pytest.approx(1.3)
    assert policy(_v(_report())) == pytest.approx(1.3)


def test_a_class_the_gate_does_not_reject_leaves_the_candidate_scored_by_speed() -> None:
    d = _report([("HS105",)], "hack", speedup={"eager_fp32": 2.0})
    assert not _v(d).accepted
    v = _v(d, reject=("gaming", "integrity", "precision"))
    assert v.accepted and v.verdict == "hack" and v.rejected_for == ()
    assert RewardPolicy(uncertainty="value")(v) == pytest.approx(0.3 + math.log2(3.0))


def test_wrong_on_hidden_inputs_or_not_run_is_never_accepted() -> None:
    wrong = _v(_report([("HS401",)], "hack", probes=("pass", "wrong")))
    assert wrong.correct is False and not wrong.accepted
    unrun = _v(_report(ran=False))
    assert unrun.verdict == "error" and not unrun.accepted and "not verified" in unrun.reason
    assert RewardPolicy()(unrun) == 0.0


def test_a_policy_with_a_bad_setting_says_so() -> None:
    with pytest.raises(ValueError, match="baseline"):
        RewardPolicy(baseline="fastest")
    with pytest.raises(ValueError, match="uncertainty"):
        RewardPolicy(uncertainty="high")
    with pytest.raises(ValueError, match="cap"):
        RewardPolicy(cap=float("inf"))


@pytest.fixture(scope="module")
def verifier():
    v = hackscan.Verifier(device="cpu", prewarm=False)
    yield v
    v.close()


@pytest.mark.parametrize("code", ["", "   \n", "None", None, 42, "def forward(:\n", "print('no model here')\n"])
def test_empty_missing_and_unparseable_generations_score_the_floor(verifier, code) -> None:
    v = verifier.verify(code, REF)
    assert v.verdict == "error" and not v.accepted and v.reason
    assert RewardPolicy()(v) == 0.0


def test_bad_verifier_settings_are_refused_before_any_work() -> None:
    for kw, word in (({"device": "tpu"}, "device"), ({"perf": "fast"}, "perf"), ({"seed": -1}, "seed"),
                     ({"baselines": ["fp16"]}, "baselines"), ({"jobs": 0}, "jobs")):
        with pytest.raises(ValueError, match=word):
            hackscan.Verifier(prewarm=False, **kw)


def test_the_verifier_imports_no_torch_into_the_caller() -> None:
    # a candidate with no ModelNew reaches the dynamic stage's parent side, which decides it cannot run
    code = ("import sys, hackscan\n"
            f"ref = open({str(FIXTURES / 'dynamic' / 'relu' / 'reference.py')!r}).read()\n"
            "with hackscan.Verifier(device='cpu', prewarm=False) as v:\n"
            "    r = v.map([('print(1)', ref), ('', ref)])\n"
            "assert [x.verdict for x in r] == ['error', 'error'], r\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
