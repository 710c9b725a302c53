"""Probe planning: a time budget, reported skips, replayable seeds, and steering by static findings."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")

from hackscan.dynamic.compare import Tolerance  # noqa: E402
from hackscan.dynamic.judge import Judge, ProbeRecord  # noqa: E402
from hackscan.dynamic.plan import Steering, make_plan, steering_from  # noqa: E402
from hackscan.dynamic.shared.probes import probe_seed, shape_value  # noqa: E402
from hackscan.model import Confidence, Finding, Location, Severity, Stage  # noqa: E402
from hackscan.registry import load_registry  # noqa: E402

LOAD = {"t32": 0.001, "t64": 0.002, "input_numel": 262144,
        "dims": {"batch_size": {"value": 16, "changes_init": False}, "dim": {"value": 16384, "changes_init": False}}}


def _ids(plan):
    return [p["id"] for p in plan.probes]


def test_a_cheap_task_gets_every_probe() -> None:
    plan = make_plan(LOAD, 1, Steering(), 2.0, has_params=True, census=False)
    ids = _ids(plan)
    for want in ("original", "original_b", "params", "shape_smaller_odd", "shape_near", "shape_larger", "randn",
                 "sign_flip", "single_negative", "shift_up", "needle", "sparse_negatives", "large", "offset", "scale_10", "small",
                 "strided"):
        assert want in ids
    assert {i["kind"] for i in plan.integrity} == {"follow", "poison", "vary", "repeat", "decoy"}
    assert not plan.skipped


def test_the_environment_check_draws_its_conditions_from_the_seed() -> None:
    a = make_plan(LOAD, 1, Steering(), 2.0, has_params=False, census=False)
    b = make_plan(LOAD, 1, Steering(), 2.0, has_params=False, census=False)
    c = make_plan(LOAD, 2, Steering(), 2.0, has_params=False, census=False)
    vary = [next(i for i in p.integrity if i["kind"] == "vary")["conditions"] for p in (a, b, c)]
    assert vary[0] == vary[1]  # --seed replays them
    assert vary[0] != vary[2]
    names = [x["name"] for x in vary[0]]
    assert sorted(names) == sorted(["grad", "inference", "deterministic", "threads", "rng", "frames", "flush",
                                    "thread", "gc", "copy"])
    assert names[-1] == "inference"  # a tensor cached under inference mode must not break the others
    gpu = make_plan(LOAD, 1, Steering(), 2.0, has_params=False, census=False, device="cuda")
    on_gpu = [x["name"] for x in next(i for i in gpu.integrity if i["kind"] == "vary")["conditions"]]
    assert set(on_gpu) - set(names) == {"stream", "graph"} and on_gpu[-1] == "inference"


def test_an_expensive_task_stays_within_budget_and_says_what_it_skipped() -> None:
    heavy = dict(LOAD, t32=0.4, t64=0.8)
    plan = make_plan(heavy, 1, Steering(), 2.0, has_params=False)
    assert {"original", "original_b"} <= set(_ids(plan))
    assert plan.skipped and all("time budget" in s["reason"] for s in plan.skipped)
    # measured costs: the smaller shape is cheap, so value probes move there instead of vanishing
    plan = make_plan(heavy, 1, Steering(), 2.0, has_params=False, measured={"full": 1.6, "small": 0.02})
    small = [p for p in plan.probes if p["id"].endswith("@small")]
    assert small and all(p["dims"] == {"batch_size": 9, "dim": 8193} for p in small)
    assert all(p["reduced_from"] for p in small)


def test_probe_seeds_replay_and_differ() -> None:
    a = make_plan(LOAD, 42, Steering(), 2.0, has_params=False)
    b = make_plan(LOAD, 42, Steering(), 2.0, has_params=False)
    c = make_plan(LOAD, 43, Steering(), 2.0, has_params=False)
    assert [p["seed"] for p in a.probes] == [p["seed"] for p in b.probes]
    assert [p["seed"] for p in a.probes] != [p["seed"] for p in c.probes]
    assert len({p["seed"] for p in a.probes if not p["id"].startswith("shape")}) > 5
    assert probe_seed(42, "randn") == probe_seed(42, "randn") != probe_seed(42, "sign_flip")


def test_shape_variants_are_odd_and_not_powers_of_two() -> None:
    for v in (16, 1024, 16384, 4096, 3, 255):
        near = shape_value("near", v)
        assert near != v and near % 2 == 1 and near & (near - 1)
        assert shape_value("smaller_odd", v) % 2 == 1 and shape_value("smaller_odd", v) <= v
        assert shape_value("larger", v) > v


def _finding(rule: str, line: int, **evidence) -> Finding:
    return Finding(rule=rule, name=rule.lower(), severity=Severity.ERROR, confidence=Confidence.HIGH, message="m",
                   location=Location("c.py", line, 1), stage=Stage.STATIC, evidence=evidence)


def test_static_suspicions_steer_the_probes() -> None:
    registry = load_registry()
    by_class = {}
    for r in registry:
        for c in r.taxonomy:
            if r.stage is Stage.STATIC:
                by_class.setdefault(c, r.id)
    if not {1, 2, 8} <= set(by_class):
        pytest.skip("static rules for classes 1, 2 and 8 are not in the registry yet")
    st = steering_from([_finding(by_class[1], 10), _finding(by_class[2], 20, dim=16384), _finding(by_class[8], 30)],
                       registry)
    assert st.has(1) and st.dims == {16384: [f"{by_class[2]}@20"]}
    heavy = dict(LOAD, t32=0.3, t64=0.6)
    plan = make_plan(heavy, 1, st, 2.0, has_params=False)
    ids = _ids(plan)
    # the value guard's flips run at full size whatever the budget, with an extra draw
    assert {"sign_flip", "single_negative", "single_negative_2"} <= set(ids)
    assert "shape_dim" in ids  # the hardcoded dim changed alone
    by_id = {p["id"]: p for p in plan.probes}
    assert f"{by_class[1]}@10" in by_id["single_negative_2"]["steered_by"]
    follow = next(i for i in plan.integrity if i["kind"] == "follow")
    assert follow["cycles"] == 4  # a cache gets repeated calls with changed contents


def _judge(self_reference: bool = False) -> tuple[Judge, list]:
    made = []

    def make(rule, message, evidence=None, severity=None, confidence=None, stage="dynamic"):
        made.append((rule, severity, message))
        return Finding(rule=rule, name=rule.lower(), severity=severity or Severity.WARNING,
                       confidence=confidence or Confidence.MEDIUM, message=message, location=Location("c.py", 5, 1),
                       stage=Stage.DYNAMIC, evidence=evidence or {})

    return Judge(make, Tolerance(), 1, self_reference, False, {}), made


def _ref(values: np.ndarray) -> dict:
    return {"out32": [values.astype(np.float32)], "out64": [values.astype(np.float64)], "structure": "T"}


def test_outputs_that_differ_between_identical_calls_beyond_tolerance_are_an_error() -> None:
    judge, made = _judge()
    x = np.linspace(1, 2, 64)
    refs = {"original": _ref(x)}
    spec = {"id": "original", "family": "original", "description": "d", "seed": 1}
    records = {"original": ProbeRecord(spec, "pass")}
    integrity = [{"kind": "repeat", "probe": "original",
                  "outs": [[x.astype(np.float32)], [(x * 1.5).astype(np.float32)], [x.astype(np.float32)]]}]
    judge.judge(records, refs, {}, integrity, {}, [])
    assert [(r, s) for r, s, _ in made] == [("HS504", None)]  # the rule's own severity: error


def test_flag_changes_the_reference_makes_itself_are_not_the_candidates() -> None:
    change = {"name": "torch.get_num_threads()", "kind": "flag", "before": "2", "after": "1", "phase": "import"}
    benign = {"name": "torch.backends.cudnn.benchmark", "kind": "flag", "before": "False", "after": "True",
              "phase": "import"}
    judge, made = _judge()
    judge.judge({}, {}, {}, [], {"changes": [change, benign]}, [change])
    assert not made
    judge, made = _judge()
    judge.judge({}, {}, {}, [], {"changes": [change, benign]}, [])
    assert [r for r, _, _ in made] == ["HS507"] and "cudnn" not in made[0][2]
    # when the reference is the candidate's own file, its changes are the candidate's
    judge, made = _judge(self_reference=True)
    judge.judge({}, {}, {}, [], {"changes": [change]}, [change])
    assert [r for r, _, _ in made] == ["HS507"]


def test_settings_that_rig_the_baseline_are_an_error_and_others_a_warning() -> None:
    def one(name: str, before: str, after: str, kind: str = "flag"):
        judge, made = _judge()
        change = {"name": name, "kind": kind, "before": before, "after": after, "phase": "import"}
        judge.judge({}, {}, {}, [], {"changes": [change]}, [])
        assert [r for r, _, _ in made] == ["HS507"], made
        return made[0][1]

    # fewer threads, a fast backend off, a precision flag: the shared baseline runs slower or less precise
    assert one("torch.get_num_threads()", "2", "1") is Severity.ERROR
    assert one("torch.backends.mkldnn.enabled", "True", "False") is Severity.ERROR
    assert one("torch.backends.cuda.matmul.allow_tf32", "False", "True", "precision-flag") is Severity.ERROR
    # the look-alikes: more threads, a backend switched on: the rule's own severity (warning)
    assert one("torch.get_num_threads()", "2", "8") is None
    assert one("torch.backends.mkldnn.enabled", "False", "True") is None


def test_the_traded_shape_keeps_the_element_count_and_leaves_the_module_alone() -> None:
    from hackscan.dynamic.plan import _traded_dims

    assert _traded_dims({"batch_size": {"value": 128, "changes_init": False},
                         "input_shape": {"value": [4000], "changes_init": False}}) == \
        {"batch_size": 256, "input_shape": [2000]}
    # a constant the module is built from (its weights' shape) is never traded
    assert _traded_dims({"batch_size": {"value": 16, "changes_init": False},
                         "features": {"value": 64, "changes_init": True}}) is None
    # one odd dimension alone: nothing to trade with
    assert _traded_dims({"n": {"value": 7, "changes_init": False}}) is None
