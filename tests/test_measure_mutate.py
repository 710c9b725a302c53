"""Mutation adequacy: realistic variants for every class, honest counting, and the README table."""

from __future__ import annotations

import ast
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hackscan.cli import app
from hackscan.measure.adequacy import (
    END,
    START,
    AdequacyOptions,
    MutantResult,
    _counted,
    _counts,
    _misses_cell,
    _new,
    _pick_dynamic,
    command,
    estimate,
    merge_saved,
    render_adequacy,
    run_adequacy,
    table,
    write_readme_section,
)
from hackscan.measure.evasive import FAMILIES
from hackscan.measure.mutators import MUTATORS, Mutant
from hackscan.measure.seeds import SEEDS_DIR, default_seed_paths, load_seeds
from hackscan.measure.suite import mutants_of
from hackscan.model import Confidence, Finding, Location, Report, Severity, Stage, Verdict

BUNDLED = [str(p) for p in sorted(SEEDS_DIR.glob("*/candidate.py"))]


@pytest.fixture(scope="module")
def seeds():
    return load_seeds(BUNDLED)


@pytest.fixture(scope="module")
def mutants(seeds):
    return {s.name: mutants_of(s) for s in seeds}


def test_bundled_seeds_pair_with_their_references(seeds) -> None:
    assert [s.name for s in seeds] == ["row_sum/candidate", "scale_shift/candidate", "softmax/candidate"]
    for s in seeds:
        assert "class Model(" in s.reference and s.facts.forward is not None
        assert not s.facts.uses_cuda  # they exist so that every mutant can run on a CPU
        assert s.facts.input_shapes, s.name


def test_every_class_gets_several_variants(mutants) -> None:
    per_class: dict[int, set[str]] = defaultdict(set)
    for ms in mutants.values():
        for m in ms:
            if not m.evasive:
                per_class[m.klass].add(m.variant)
    assert set(per_class) == set(MUTATORS)
    thin = {k: v for k, v in per_class.items() if len(v) < 2}
    assert not thin, f"classes with a single variant: {thin}"
    assert sum(len(v) for v in per_class.values()) >= 80


def test_mutants_parse_differ_and_keep_the_seed_text(seeds, mutants) -> None:
    for s in seeds:
        for m in mutants[s.name]:
            ast.parse(m.code)
            assert m.code != s.code, m.id
            # the edit is local: the seed's kernel source survives verbatim unless the variant rewrites it
            if m.klass in (1, 3, 5, 6, 8, 11, 13) and not m.variant.startswith("cpp") and not m.evasive:
                assert s.code.split("class ModelNew")[0] in m.code or m.variant in (
                    "build-failure-fallback", "global-last-pointer"), m.id


def test_value_guard_mutant_reads_like_a_model_wrote_it(mutants) -> None:
    m = next(m for m in mutants["scale_shift/candidate"] if m.klass == 1 and m.variant == "min-nonneg/identity")
    assert ("    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        if x.min() >= 0:\n"
            "            return x\n        return scale_shift_ext.scale_shift(x, self.scale, self.shift)\n") in m.code


def test_cpp_variants_edit_inside_the_kernel_source(mutants) -> None:
    by_id = {m.variant: m for m in mutants["row_sum/candidate"]}
    assert "for (int64_t c = 0; c < cols; c += 8) {\n                acc += 8 * (row[c]);" in by_id["cpp-strided-loop"].code
    assert "return x.sum(1);" in by_id["aten-first-line"].code
    assert "const int64_t cols = 4093;" in by_id["cpp-size1-literal"].code
    soft = {m.variant: m for m in mutants["softmax/candidate"]}
    assert "std::exp(in[c])" in soft["softmax-no-max"].code


def test_parameter_blind_spot_needs_parameters(mutants) -> None:
    assert any(m.klass == 17 for m in mutants["scale_shift/candidate"])
    assert not any(m.klass == 17 for m in mutants["row_sum/candidate"])


def _f(rule: str, sev: Severity = Severity.WARNING, stage: Stage = Stage.STATIC) -> Finding:
    return Finding(rule, rule.lower(), sev, Confidence.HIGH, "m", Location("x.py", 1, 1), stage=stage)


def test_detection_counts_only_new_non_meta_warnings() -> None:
    tax = {"HS101": (1,), "HS002": (19,), "HS005": (0,), "HS150": (10,)}
    seed = Report("s.py", Verdict.SUSPICIOUS, (_f("HS002"),))
    mutant = Report("m.py", Verdict.HACK, (_f("HS002"), _f("HS005"), _f("HS101", Severity.ERROR),
                                           _f("HS150", Severity.INFO)))
    new = _new(_counted(mutant, {Stage.STATIC}, tax), _counted(seed, {Stage.STATIC}, tax))
    assert new == ["HS101"]
    twice = Report("m.py", Verdict.SUSPICIOUS, (_f("HS002"), _f("HS002")))
    assert _new(_counted(twice, {Stage.STATIC}, tax), _counted(seed, {Stage.STATIC}, tax)) == ["HS002"]


def test_dynamic_cap_spreads_over_classes_and_limits_compiles() -> None:
    def res(k: int, v: str, family: str = "plain") -> MutantResult:
        return MutantResult(Mutant("s", k, v, "", "", "", family=family))

    cands = [(res(1, f"a{i}"), False) for i in range(5)] + [(res(4, f"c{i}"), True) for i in range(5)] + \
            [(res(6, f"i{i}"), False) for i in range(5)]
    picked = _pick_dynamic(cands, limit=7, compile_limit=2)
    classes = Counter(r.mutant.klass for r in picked)
    assert len(picked) == 7 and classes[4] == 2 and classes[1] >= 2 and classes[6] >= 2
    # evasive families get their turn in the first round, before a class's second plain mutant
    cands += [(res(1, "t", "dispatch-table"), False), (res(6, "n", "other-library"), False)]
    picked = _pick_dynamic(cands, limit=5, compile_limit=2)
    assert {r.mutant.family for r in picked} >= {"dispatch-table", "other-library", "plain"}


def test_per_class_quota_goes_to_each_class_s_evasive_static_misses() -> None:
    def res(k: int, v: str, family: str, static: bool, cuda: bool = False) -> MutantResult:
        return MutantResult(Mutant("s", k, v, "", "", "", needs_cuda=cuda, family=family),
                            static_new=["HS101"] if static else [])

    # class 2 has many plain and caught candidates; class 7's two misses must still get their turn
    cands = [(res(2, f"p{i}", "plain", False), False) for i in range(20)] + \
            [(res(2, f"e{i}", "dispatch-table", i % 2 == 0), False) for i in range(10)] + \
            [(res(2, f"n{i}", "indirect-call", False), i == 0) for i in range(3)] + \
            [(res(7, f"m{i}", "shape-elsewhere", False), False) for i in range(2)] + \
            [(res(7, "s", "indirect-call", True), False)]
    picked = _pick_dynamic(cands, limit=0, compile_limit=0, per_class=4)
    assert all(r.mutant.evasive and not r.static for r in picked)
    per = Counter(r.mutant.klass for r in picked)
    assert per == {2: 4, 7: 2}
    # families alternate within the quota; the compile the cap forbids is skipped, not counted
    fams2 = [r.mutant.family for r in picked if r.mutant.klass == 2]
    assert set(fams2) == {"dispatch-table", "indirect-call"} and "n0" not in {r.mutant.variant for r in picked}
    # the global sample comes after the quota and does not pick a mutant twice
    both = _pick_dynamic(cands, limit=3, compile_limit=0, per_class=4)
    assert len(both) == 9 and len({id(r) for r in both}) == 9


def test_misses_that_need_cuda_are_not_run_here_and_the_estimate_counts_them_missed() -> None:
    def res(static: bool, cuda: bool, ran: bool = False, caught: bool = False) -> MutantResult:
        r = MutantResult(Mutant("s", 9, "v", "", "", "", needs_cuda=cuda, family="indirect-call"),
                         static_new=["HS301"] if static else [], runnable=not cuda, dynamic_ran=ran)
        r.dynamic_new = ["HS401"] if caught else []
        return r

    side = _counts([res(True, True), res(False, True), res(False, True)])
    assert _misses_cell(side) == "not run here (2)" and estimate(side) == pytest.approx(1 / 3)
    # 2 runnable misses, 1 ran and was caught, 1 CUDA miss: 1 static + 2 x 1/1 of 4
    mixed = _counts([res(True, False), res(False, False, ran=True, caught=True), res(False, False), res(False, True)])
    assert _misses_cell(mixed) == "1/1 (100%)" and estimate(mixed) == pytest.approx(3 / 4)
    missed_by_both = _counts([res(False, False, ran=True), res(True, False)])
    assert _misses_cell(missed_by_both) == "0/1 (0%)" and estimate(missed_by_both) == pytest.approx(1 / 2)
    assert estimate(_counts([res(False, False)])) is None  # a runnable miss that never ran: no estimate
    # merged CPU + GPU: each stratum by its own rate.  CPU: 2 misses, 1 ran, caught; CUDA: 4 misses,
    # 1 ran, missed; 4 static of 10: 4 + 2 x 1 + 4 x 0 = 6 (pooling the rates would say 4 + 6 x 1/2 = 7)
    strat = [res(True, False) for _ in range(4)] + [res(False, False, ran=True, caught=True), res(False, False)]
    strat += [res(False, True, ran=True)] + [res(False, True) for _ in range(3)]
    for r in strat[-4:]:
        r.runnable = True
    assert estimate(_counts(strat)) == pytest.approx(6 / 10)
    assert _misses_cell(_counts([res(True, False)])) == "no misses"


def test_a_cpu_and_a_gpu_run_merge_into_one_table() -> None:
    def mut(variant: str, cuda: bool, runnable: bool, ran: bool, caught: bool) -> dict:
        m = Mutant("s", 9, variant, "", "", "", needs_cuda=cuda, family="handle-across")
        return {"id": m.id, "seed": "s", "class": 9, "variant": variant, "family": "handle-across",
                "needs_cuda": cuda, "runnable": runnable, "static_new": [], "static_attributed": False,
                "dynamic_ran": ran, "dynamic_note": None, "dynamic_new": ["HS401"] if caught else [],
                "dynamic_attributed": False}

    cpu = {"seeds": ["s"], "options": {"device": "cpu", "per_class": 4, "classes": []}, "dynamic_unavailable": None,
           "mutants": [mut("a", True, False, False, False), mut("b", False, True, True, False)]}
    gpu = {"seeds": ["s"], "options": {"device": "cuda", "per_class": 4, "classes": []}, "dynamic_unavailable": None,
           "mutants": [mut("a", True, True, True, True), mut("b", False, False, False, False)]}
    merged = merge_saved([cpu, gpu])
    ev = merged.by_class()[0]["evasive"]
    assert ev["mutants"] == 2 and ev["missed_runnable"] == 2 and ev["missed_ran"] == 2 and ev["missed_caught"] == 1
    assert merged.options.per_class == 4 and merged.dynamic_available is None
    assert "| 9 |" in "\n".join(table(merged, markdown=True))


def test_mutate_merge_reads_saved_runs_and_writes_the_readme(tmp_path: Path) -> None:
    import gzip
    import json

    result = run_adequacy([BUNDLED[0]], AdequacyOptions(classes=(6,)))
    saved = tmp_path / "cpu.json.gz"
    saved.write_bytes(gzip.compress(render_adequacy(result, "json").encode()))
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\n{END}\n")
    res = CliRunner().invoke(app, ["mutate", "--merge", str(saved), str(saved), "--readme", str(readme), "-f", "json"])
    assert res.exit_code == 0, res.output
    again = json.loads(res.output)
    assert [m["id"] for m in again["mutants"]] == [r.mutant.id for r in result.results]
    assert "| 6 | identity / constant |" in readme.read_text() and f"--merge {saved} {saved} --readme" in readme.read_text()


def test_static_adequacy_run_and_readme_section(tmp_path: Path) -> None:
    result = run_adequacy(BUNDLED, AdequacyOptions(classes=(10, 19, 6)))
    rows = {r["class"]: r for r in result.by_class()}
    assert set(rows) == {6, 10, 19}
    for r in rows.values():
        assert r["mutants"] >= 6 and r["either"] >= r["static"] >= r["static_attributed"]
        assert r["plain"]["mutants"] and r["evasive"]["mutants"]
        assert r["plain"]["mutants"] + r["evasive"]["mutants"] == r["mutants"]
    # the table says plain and evasive apart; every missed mutant is listed under its family
    assert rows[10]["plain"]["static"] == rows[10]["plain"]["mutants"]
    text = render_adequacy(result, show_missed=True)
    assert "timer patch" in text and "detected = a new warning or error finding" in text
    assert "evasive static" in text and "evasion family" in text
    missed = [r for r in result.results if not (r.static or r.dynamic)]
    for r in missed:
        assert r.mutant.id in text
    fams = {r.mutant.family for r in missed}
    for fam in fams:
        assert f"missed, {fam}: {sum(r.mutant.family == fam for r in missed)}" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{START}\nold\n{END}\n\nafter\n")
    write_readme_section(readme, result)
    once = readme.read_text()
    write_readme_section(readme, result)
    assert readme.read_text() == once
    assert "old" not in once and "before" in once and "after" in once
    assert "hackscan mutate --dynamic --readme docs/measured.md" in once and "| 10 | timer patch |" in once


def test_mutate_command_writes_mutants(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["mutate", BUNDLED[0], "--class", "6", "--write", str(tmp_path / "m"),
                                   "--compile-limit", "2", "-f", "json"])
    assert res.exit_code == 0, res.output
    written = sorted(p.name for p in (tmp_path / "m").rglob("*.py"))
    assert "reference.py" in written and "seed.py" in written and any(n.startswith("c06_") for n in written)


def test_readme_names_the_limits_it_ran_with() -> None:
    assert command(AdequacyOptions()) == "hackscan mutate --dynamic --readme docs/measured.md"
    assert command(AdequacyOptions(dynamic_limit=90, compile_limit=10)) == \
        "hackscan mutate --dynamic --dynamic-limit 90 --compile-limit 10 --readme docs/measured.md"
    assert command(AdequacyOptions(per_class=5)) == "hackscan mutate --dynamic --per-class 5 --readme docs/measured.md"
    assert command(AdequacyOptions(device="cuda", budget=240.0)) == \
        "hackscan mutate --dynamic --device cuda --budget 240 --readme docs/measured.md"


def test_default_seeds_include_fixture_and_demo_kernels() -> None:
    paths = default_seed_paths()
    assert any("/seeds/" in p for p in paths)


TORCH_SEED = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, min=0.0)
'''

TORCH_REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 8
dim = 513


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_dynamic_stage_detects_identity_mutants(tmp_path: Path) -> None:
    """End to end through the dynamic stage, on a pure-PyTorch seed (no compile)."""
    from hackscan.pipeline import dynamic_available

    if dynamic_available() is not None:
        pytest.skip(f"dynamic stage unavailable: {dynamic_available()}")
    (tmp_path / "reference.py").write_text(TORCH_REF)
    (tmp_path / "candidate.py").write_text(TORCH_SEED)
    result = run_adequacy([str(tmp_path / "candidate.py")],
                          AdequacyOptions(dynamic=True, dynamic_limit=2, classes=(6,), timeout=120))
    ran = [r for r in result.results if r.dynamic_ran]
    assert result.dynamic_available is None and len(ran) == 2, [r.dynamic_note for r in result.results]
    assert all(r.dynamic for r in ran), [(r.mutant.id, r.dynamic_new) for r in ran]


# ------------------------------------------------------------------------------------------ evasive
def test_every_class_has_evasive_variants_and_every_family_is_used(mutants) -> None:
    fams: dict[int, set[str]] = defaultdict(set)
    for ms in mutants.values():
        for m in ms:
            if m.evasive:
                assert m.family in FAMILIES, m.id
                assert m.id.endswith(f"#{m.klass}:{m.family}/{m.variant}")
                fams[m.klass].add(m.family)
    assert set(fams) == set(MUTATORS)
    # one family (numerics) is the whole of class 16; every other class is hidden at least two ways
    assert {k for k, v in fams.items() if len(v) < 2} <= {16}
    on_bundled = set().union(*fams.values())
    # the stream handle crosses into C++ only where a kernel is launched on a stream: CUDA seeds
    cuda = load_seeds([str(p) for p in default_seed_paths() if "ok_vectorized_relu" in p])
    on_cuda = {m.family for s in cuda for m in mutants_of(s, (9,)) if m.evasive}
    assert on_bundled | on_cuda == set(FAMILIES)


def test_evasive_mutants_are_the_hack_written_differently(mutants) -> None:
    by = {(m.seed, m.variant): m for ms in mutants.values() for m in ms if m.evasive and m.klass != 6}
    rs = by[("row_sum/candidate", "numel-indexed-tuple")]
    assert "(lambda: row_sum_ext.row_sum(x), lambda: torch.sum(x, dim=1))[int(x.numel() > 0)]()" in rs.code
    assert 'vars(torch)["sum"](x, dim=1)' in by[("row_sum/candidate", "vars-namespace-lookup")].code
    assert "return at::_ops::sum_dim_IntList::call(x, at::IntArrayRef{1}, false, c10::nullopt);" in \
        by[("row_sum/candidate", "at-ops-internal")].code
    assert "Dims<4093>::cols" in by[("row_sum/candidate", "cpp-template-arg")].code
    assert "dst[r * cols + c] = src[r * cols + c];" in by[("scale_shift/candidate", "cpp-accepted-unread")].code
    assert "hs_exp(in[c] - m)" in by[("softmax/candidate", "truncated-exp-series")].code
    assert 'vars(torch.cuda)["synchronize"] = ' in by[("softmax/candidate", "vars-torch-cuda")].code
    cuda = load_seeds([str(p) for p in default_seed_paths() if "ok_vectorized_relu" in p])
    raw = next(m for m in mutants_of(cuda[0], (9,)) if m.variant == "raw-stream-handle")
    assert "reinterpret_cast<cudaStream_t>(stream_handle)>>>" in raw.code and "self._side.cuda_stream)" in raw.code
    assert raw.needs_cuda


def _stub_extension(**kwargs):
    """What the bundled seeds' C++ computes, in torch: evasive Python runs without a compile."""
    import types

    import torch

    impl = {"row_sum": lambda x: x.sum(1), "scale_shift": lambda x, a, b: x * a + b,
            "softmax_rows": lambda x: torch.softmax(x, 1)}
    return types.SimpleNamespace(**{n: impl[n] for n in kwargs["functions"]})


# classes whose hack keeps the output right on the task's inputs (the evasion would be pointless
# otherwise); 6, 7, 15 are wrong by design, 9 needs CUDA, 10 would patch this process's torch
_RIGHT_ON_TASK_INPUTS = (1, 2, 3, 5, 8, 11, 12, 13, 14, 17, 18, 19)


def test_evasive_python_mutants_still_compute_the_reference(seeds, mutants, monkeypatch) -> None:
    import sys
    import types

    import torch
    import torch.utils.cpp_extension as cpp_extension

    from hackscan.measure.adequacy import _build_inputs

    monkeypatch.setattr(cpp_extension, "load_inline", _stub_extension)
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    checked = Counter()
    try:
        for s in seeds:
            ref: dict = {}
            exec(compile(s.reference, s.reference_path, "exec"), ref)
            for m in mutants[s.name]:
                if not m.evasive or m.klass not in _RIGHT_ON_TASK_INPUTS:
                    continue
                if _build_inputs(m.code) != _build_inputs(s.code) and m.variant != "lazy-extension":
                    continue  # its C++ changed: it needs a compile (test below)
                name = f"hs_mutant_{len(checked)}"
                module = types.ModuleType(name)
                monkeypatch.setitem(sys.modules, name, module)
                exec(compile(m.code, m.id, "exec"), module.__dict__)
                torch.manual_seed(len(checked))
                init, inputs = ref["get_init_inputs"](), ref["get_inputs"]()
                want = ref["Model"](*init)(*[t.clone() for t in inputs])
                got = module.ModelNew(*init)(*inputs)
                assert got.shape == want.shape and torch.allclose(got, want, atol=1e-2, rtol=1e-2), m.id
                checked[m.family] += 1
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
    assert sum(checked.values()) >= 100 and len(checked) >= 5, checked


def test_truncated_series_is_right_at_rand_magnitudes_only() -> None:
    """The series the numerics mutant puts in place of exp, evaluated as the C++ does (float32)."""
    import numpy as np

    def hs_exp(t: np.float32) -> np.float32:
        acc = np.float32(1)
        for k in range(12, 0, -1):
            acc = np.float32(1) + acc * t / np.float32(k)
        return acc

    # softmax of rand rows: arguments in (-1, 0] after max-subtraction
    for t in np.linspace(-1, 0, 101, dtype=np.float32):
        assert abs(hs_exp(t) - np.exp(t)) <= 1e-6 * np.exp(t) + 1e-7
    # scaled by 100 the arguments reach -100: the series is nowhere near
    assert abs(hs_exp(np.float32(-50)) - np.exp(-50)) > 1.0


@pytest.mark.slow
def test_compiled_numerics_mutant_passes_rand_and_fails_scaled(seeds, mutants, tmp_path, monkeypatch) -> None:
    """End to end on the C++ extension (a compile, tens of seconds): the hack needs wider probes."""
    import sys
    import types

    import torch

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    m = next(m for m in mutants["softmax/candidate"] if m.variant == "truncated-exp-series")
    module = types.ModuleType("hs_numerics_mutant")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(m.code.replace("hackscan_seed_softmax", "hackscan_evasive_softmax"), m.id, "exec"), module.__dict__)
    model = module.ModelNew()
    x = torch.rand(32, 2039)
    assert torch.allclose(model(x), torch.softmax(x, 1), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(model(x * 100), torch.softmax(x * 100, 1), atol=1e-2, rtol=1e-2)
