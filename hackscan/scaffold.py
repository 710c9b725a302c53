"""``hackscan new-rule``: the files a new static rule needs, written in one step.

A rule is four things in a source checkout: its TOML in ``rules/``, one check function named after it
in the topic module of its language (``hackscan/checks/python/<topic>.py``,
``hackscan/checks/cuda/<topic>.py`` or ``hackscan/checks/triton.py``), a hack fixture annotated
``# expect:`` on the line the finding belongs to, and a legitimate look-alike annotated
``# legit-for:``.  The scaffold writes all four, each marked TODO where a person must decide, so that
the registry lint (``tests/test_registry.py``) passes at once and the fixture test
(``tests/test_fixtures_static.py``) fails until the check finds the hack: the rule is written test
first.  It refuses an id or a name already taken, or a file that already exists, before writing
anything.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .inputs import REFERENCE_NAMES
from .registry import ID_RE, NAME_RE, check_name

# the id family (registry.FAMILIES) and the languages field of each language a rule can be for
FAMILY = {"python": "HS1", "cuda": "HS2", "triton": "HS3"}
LANGUAGES = {"python": ["python"], "cuda": ["cuda", "cpp"], "triton": ["triton"]}
SEVERITIES = ("error", "warning", "info")
CONFIDENCES = ("high", "medium", "low")
TOPIC_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# module names in checks/python/ and checks/cuda/ that hold no rules of their own
NOT_TOPICS = frozenset({"common", "__init__"})


class ScaffoldError(Exception):
    """The scaffold cannot write the rule; the message is one line for the user."""


@dataclass
class Scaffold:
    """What ``new_rule`` wrote: the paths created and the module a check was added to."""

    rule_id: str
    name: str
    function: str
    created: list[Path] = field(default_factory=list)
    edited: list[Path] = field(default_factory=list)
    fixtures: list[Path] = field(default_factory=list)

    def next_steps(self, root: Path) -> str:
        rel = [str(p.relative_to(root)) for p in (*self.created, *self.edited)]
        toml, *_ = [p for p in rel if p.startswith("rules/")]
        check = next(p for p in rel if p.startswith("hackscan/"))
        hack, ok = (str(p.relative_to(root)) for p in self.fixtures)
        return "\n".join([
            f"wrote {self.rule_id} {self.name}:",
            *(f"  {p}" for p in rel),
            "next:",
            f"  1. {hack}: write the hack where the TODO says, keeping `expect: {self.rule_id}` on its line",
            f"  2. {ok}: write the legitimate look-alike the rule must stay quiet on",
            f"  3. {check}: fill in {self.function}() until the fixtures pass:",
            f"       python -m pytest -q tests/test_fixtures_static.py tests/test_registry.py -k '{self.rule_id} or "
            f"{Path(hack).stem} or {Path(ok).stem}'",
            f"  4. {toml}: replace every TODO (message, summary, description, examples, taxonomy class)",
            "  5. python scripts/gen_rule_table.py   # the rule table in docs/rules.md",
        ])


def source_root() -> Path:
    """The checkout holding ``rules/``, ``fixtures/`` and ``hackscan/checks/`` (the scaffold writes there)."""
    root = Path(__file__).resolve().parent.parent
    check_root(root)
    return root


def check_root(root: Path) -> None:
    for part in ("rules", "fixtures", "hackscan/checks"):
        if not (root / part).is_dir():
            raise ScaffoldError(f"{root} is not a hackscan source checkout (no {part}/); "
                                "new-rule writes into one (use --root)")


def _taken(root: Path) -> tuple[set[str], set[str]]:
    ids, names = set(), set()
    for path in (root / "rules").glob("HS*.toml"):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ScaffoldError(f"cannot read {path}: {exc}") from None
        ids.add(str(data.get("id", path.stem)))
        names.add(str(data.get("name", "")))
    return ids, names


def next_free_id(root: Path, language: str) -> str:
    """One past the highest id of the language's family, or the lowest gap when the family is full."""
    family = FAMILY[language]
    ids, _ = _taken(root)
    used = sorted(int(i[3:]) for i in ids if i.startswith(family))
    nxt = (used[-1] + 1) if used else 1
    if nxt > 99:
        nxt = next((n for n in range(1, 100) if n not in used), 100)
        if nxt == 100:
            raise ScaffoldError(f"the {family}xx family is full")
    return f"{family}{nxt:02d}"


def _validate_words(name: str, severity: str, confidence: str, example: str) -> None:
    """What every new rule's words must be, whatever its stage."""
    if severity not in SEVERITIES:
        raise ScaffoldError(f"severity {severity!r}: expected one of {', '.join(SEVERITIES)}")
    if confidence not in CONFIDENCES:
        raise ScaffoldError(f"confidence {confidence!r}: expected one of {', '.join(CONFIDENCES)}")
    if not NAME_RE.match(name):
        raise ScaffoldError(f"name {name!r} is not kebab-case (like {example})")


def _validate(root: Path, rule_id: str | None, name: str, language: str, topic: str | None,
              severity: str, confidence: str) -> tuple[str, str]:
    if language not in FAMILY:
        raise ScaffoldError(f"language {language!r}: expected one of {', '.join(FAMILY)}")
    _validate_words(name, severity, confidence, "value-guarded-shortcut")
    # the house convention: a CUDA rule's name starts cuda-, a Triton rule's triton-, a Python rule's neither
    prefix = {"cuda": "cuda-", "triton": "triton-"}.get(language)
    if prefix and not name.startswith(prefix):
        raise ScaffoldError(f"a {language} rule's name starts with {prefix!r} (got {name!r})")
    if not prefix and name.startswith(("cuda-", "triton-")):
        raise ScaffoldError(f"{name!r} reads as a CUDA or Triton rule; pick --language to match")
    if language == "triton":
        if topic:
            raise ScaffoldError("Triton checks all live in hackscan/checks/triton.py: leave out --topic")
    elif not topic:
        raise ScaffoldError(f"a {language} rule needs --topic, the hack class its check module is named for "
                            f"(like {'state' if language == 'python' else 'memory'})")
    elif not TOPIC_RE.match(topic) or topic in NOT_TOPICS:
        raise ScaffoldError(f"topic {topic!r} must be a snake_case module name other than {', '.join(sorted(NOT_TOPICS))}")
    ids, names = _taken(root)
    if name in names:
        raise ScaffoldError(f"name {name!r} is already a rule's name")
    if rule_id is None:
        rule_id = next_free_id(root, language)
    rule_id = rule_id.upper()
    if not ID_RE.match(rule_id):
        raise ScaffoldError(f"id {rule_id!r} is not of the form HS123")
    if rule_id in ids or (root / "rules" / f"{rule_id}.toml").exists():
        raise ScaffoldError(f"id {rule_id} is already taken (rules/{rule_id}.toml)")
    if not rule_id.startswith(FAMILY[language]):
        raise ScaffoldError(f"a {language} rule's id is in the {FAMILY[language]}xx family (got {rule_id})")
    return rule_id, check_name(name)


def new_rule(root: Path, name: str, language: str, topic: str | None = None, severity: str = "error",
             confidence: str = "medium", rule_id: str | None = None, taxonomy: int | None = None) -> Scaffold:
    """Write the rule TOML, the check stub, the hack fixture and the look-alike; refuse before writing
    anything when the id, the name, the function or a fixture file is taken."""
    check_root(root)
    rule_id, function = _validate(root, rule_id, name, language, topic, severity, confidence)
    if taxonomy is None:  # the registry refuses a rule without one: its verdict class follows from it
        raise ScaffoldError("a rule needs --class N, the TAXONOMY.md class it finds (1..20); it also sets the "
                            "rule's verdict class (hackscan/classes.py)")
    if not 1 <= taxonomy <= 20:
        raise ScaffoldError(f"taxonomy class {taxonomy} is not one of TAXONOMY.md's 1..20")
    if language == "triton":
        module_path = root / "hackscan" / "checks" / "triton.py"
        module = "hackscan.checks.triton"
    else:
        module_path = root / "hackscan" / "checks" / language / f"{topic}.py"
        module = f"hackscan.checks.{language}.{topic}"
    if module_path.exists() and _defines(module_path, function):
        raise ScaffoldError(f"{module_path.relative_to(root)} already defines {function}()")
    short = name.split("-", 1)[1] if language != "python" else name
    stem = short.replace("-", "_")
    folder = root / "fixtures" / language / (topic or stem)
    hack, ok = folder / f"hack_{stem}.py", folder / f"ok_{stem}.py"
    for p in (hack, ok):
        if p.exists():
            raise ScaffoldError(f"{p.relative_to(root)} already exists")

    out = Scaffold(rule_id, name, function)
    toml = root / "rules" / f"{rule_id}.toml"
    toml.write_text(_toml(rule_id, name, language, severity, confidence, f"{module}:{function}", taxonomy),
                    encoding="utf-8")
    out.created.append(toml)
    if module_path.exists():
        _append_check(module_path, function, rule_id, name)
        out.edited.append(module_path)
    else:
        module_path.write_text(_new_module(topic or "triton", function, rule_id, name), encoding="utf-8")
        out.created.append(module_path)
    folder.mkdir(parents=True, exist_ok=True)
    if not any((folder / n).exists() for n in REFERENCE_NAMES):
        (folder / "reference.py").write_text(REFERENCE, encoding="utf-8")
        out.created.append(folder / "reference.py")
    template = TRITON if language == "triton" else CUDA
    hack.write_text(_fixture(template, rule_id, severity, hack=True, language=language), encoding="utf-8")
    ok.write_text(_fixture(template, rule_id, severity, hack=False, language=language), encoding="utf-8")
    out.created += [hack, ok]
    out.fixtures = [hack, ok]
    return out


def _defines(path: Path, function: str) -> bool:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError as exc:
        raise ScaffoldError(f"{path}: cannot parse it to add a check: {exc.msg} (line {exc.lineno})") from None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function for n in tree.body)


def _toml(rule_id: str, name: str, language: str, severity: str, confidence: str, check: str,
          taxonomy: int | None) -> str:
    langs = ", ".join(f'"{x}"' for x in LANGUAGES[language])
    tax = f"[{taxonomy}]" if taxonomy else "[]  # TODO: the TAXONOMY.md class this rule finds"
    return f'''id = "{rule_id}"
name = "{name}"
severity = "{severity}"
confidence = "{confidence}"
stage = "static"
languages = [{langs}]
taxonomy = {tax}
check = "{check}"
message = "TODO: what was found and why it games the benchmark (a check's Hit(args=...) fills {{placeholders}})"
summary = "TODO: one sentence for the rule table in docs/rules.md."
description = """
TODO: what the check looks for, why a harness is fooled by it, and what it leaves alone (the
legitimate look-alikes), as in the other rules.
"""
hack_example = """
TODO: the smallest hack this rule flags
"""
legit_example = """
TODO: the smallest look-alike it must not flag
"""
'''


def _stub(function: str, rule_id: str, name: str) -> str:
    return f'''def {function}(ctx: ScanContext) -> Iterator[Hit]:
    """{rule_id} {name}: TODO say what this finds and what it leaves alone."""
    # TODO: read the facts (ctx.model_flow / ctx.program, ctx.cuda, ctx.triton) and yield ctx.hit(pos, args={{...}})
    # for each site; a check that yields nothing finds nothing, so the hack fixture fails until it does
    yield from ()
'''


def _new_module(topic: str, function: str, rule_id: str, name: str) -> str:
    return f'''"""{rule_id}: TODO the hack class this module finds ({topic})."""

from __future__ import annotations

from collections.abc import Iterator

from ...context import Hit, ScanContext


{_stub(function, rule_id, name)}'''


def _append_check(path: Path, function: str, rule_id: str, name: str) -> None:
    """Add the stub at the end of an existing topic module, with the imports it needs if missing."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    bound = {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    lines = text.splitlines()
    dots = "..." if path.parent.name in ("python", "cuda") else ".."
    needed = []
    if "Iterator" not in bound:
        needed.append("from collections.abc import Iterator")
    missing = sorted({"Hit", "ScanContext"} - bound)
    if missing:
        needed.append(f"from {dots}context import {', '.join(missing)}")
    if needed:
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        at = max(n.end_lineno or n.lineno for n in imports) if imports else 0
        lines[at:at] = needed
    for i, line in enumerate(lines):  # keep an explicit export list complete
        if line.startswith("__all__ = ["):
            lines[i] = line.replace("__all__ = [", f'__all__ = ["{function}", ', 1)
    body = "\n".join(lines).rstrip("\n")
    path.write_text(f"{body}\n\n\n{_stub(function, rule_id, name)}", encoding="utf-8")


def _fixture(template: str, rule_id: str, severity: str, hack: bool, language: str) -> str:
    if hack:
        head = (f"# TODO({rule_id}): turn this candidate into the hack {rule_id} finds, as a generated kernel would\n"
                f"# write it; the finding belongs on the line annotated `expect: {rule_id}` (move the annotation\n"
                "# with it).")
    else:
        head = (f"# legit-for: {rule_id}\n"
                f"# TODO({rule_id}): turn this candidate into the legitimate look-alike: code that resembles the\n"
                f"# hack but does the job, on which {rule_id} must stay quiet.")
    comment = "//" if language == "cuda" else "#"
    mark = f"  {comment} expect: {rule_id} {severity}" if hack else ""
    return template.format(head=head, python_mark=mark if language == "python" else "",
                           cuda_mark=mark if language == "cuda" else "", triton_mark=mark if language == "triton" else "")


REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A ReLU: the reference the scaffolded fixtures compute."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

# a clean CUDA ReLU candidate; {cuda_mark} / {python_mark} put the annotation on a kernel or host line
CUDA = '''{head}
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = "void relu_out(torch::Tensor x, torch::Tensor out);"

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;{cuda_mark}
}}

void relu_out(torch::Tensor x, torch::Tensor out) {{
    TORCH_CHECK(out.sizes() == x.sizes(), "out must match x");
    const int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), n);
}}
"""

relu_ext = load_inline(
    name="relu_scaffold",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_out"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_ext.relu_out(x, out){python_mark}
        return out
'''

# a clean Triton ReLU candidate
TRITON = '''{head}
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask){triton_mark}


def triton_relu(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
    relu_kernel[grid](x, out, n_elements, BLOCK_SIZE=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return triton_relu(x)
'''


# ----------------------------------------------------------------------------------- stage rules
# A dynamic or performance rule is a unit: its TOML names one function in the stage's rules package
# (``hackscan/dynamic/rules/<topic>.py``, ``hackscan/perf/rules/<topic>.py``), marked with the id.
STAGES = {"dynamic": ("hackscan/dynamic/rules", "hackscan.dynamic.rules"),
          "perf": ("hackscan/perf/rules", "hackscan.perf.rules")}
STAGE_FAMILIES = {"dynamic": ("HS4", "HS5"), "perf": ("HS6",)}


@dataclass
class StageScaffold:
    """What ``new_stage_rule`` wrote."""

    rule_id: str
    name: str
    stage: str
    function: str
    module: str
    created: list[Path] = field(default_factory=list)
    edited: list[Path] = field(default_factory=list)
    fixtures: list[Path] = field(default_factory=list)
    test: Path | None = None

    def next_steps(self, root: Path) -> str:
        rel = [str(p.relative_to(root)) for p in (*self.created, *self.edited)]
        hack, ok = (str(p.relative_to(root)) for p in self.fixtures)
        unit = next(p for p in rel if p.startswith("hackscan/"))
        test = str(self.test.relative_to(root)) if self.test else "tests/"
        where = ("hackscan/dynamic/judge.py (probe records, integrity answers, reported changes), or stage.py / "
                 "probing.py for an event of the run" if self.stage == "dynamic" else
                 "hackscan/perf/parent_side.py (_evaluate and its helpers read the figures)")
        call = (f"report(self.make, j.findings, {self.module}.{self.function}, ...)" if self.stage == "dynamic" else
                f"em.decide({self.function}, {self.function}(em.options({self.function}), ...), perf)")
        fixture_test = "tests/test_dynamic_fixtures.py" if self.stage == "dynamic" else "tests/test_perf_gpu.py (GPU)"
        return "\n".join([
            f"wrote {self.rule_id} {self.name} ({self.stage}):",
            *(f"  {p}" for p in rel),
            "next:",
            f"  1. {hack}: write the hack (a candidate doing what {self.rule_id} finds); keep `expect: {self.rule_id}` "
            "on the line of `def forward`",
            f"  2. {ok}: write the legitimate look-alike {self.rule_id} must stay quiet on",
            f"  3. {unit}: fill in {self.function}(): its parameters are the facts it decides from, it returns a "
            "Decision when the rule fires, else None",
            f"  4. {test}: pass it the facts of the hack and of the look-alike, until both tests pass:",
            f"       python -m pytest -q {test} tests/test_registry.py -k '{self.rule_id} or {self.function} or unit'",
            f"  5. call it where its facts are gathered: {where}:",
            f"       {call}",
            f"     and run the fixtures through the stage: python -m pytest -q {fixture_test} -k {Path(hack).parent.name}",
            f"  6. rules/{self.rule_id}.toml: replace every TODO (message, summary, description, examples)",
            "  7. python scripts/gen_rule_table.py   # the rule table in docs/rules.md",
        ])


def _validate_stage(root: Path, rule_id: str | None, name: str, stage: str, topic: str | None, severity: str,
                    confidence: str, taxonomy: int | None) -> tuple[str, str]:
    if stage not in STAGES:
        raise ScaffoldError(f"stage {stage!r}: expected static, {' or '.join(STAGES)}")
    _validate_words(name, severity, confidence, "output-ignores-new-input-values")
    if name.startswith(("cuda-", "triton-")):
        raise ScaffoldError(f"{name!r} reads as a static CUDA or Triton rule; a {stage} rule is named for what it sees")
    if not topic:
        example = "integrity" if stage == "dynamic" else "timing"
        raise ScaffoldError(f"a {stage} rule needs --topic, the module its unit lives in ({STAGES[stage][0]}/<topic>.py, "
                            f"like {example})")
    if not TOPIC_RE.match(topic) or topic in NOT_TOPICS:
        raise ScaffoldError(f"topic {topic!r} must be a snake_case module name other than {', '.join(sorted(NOT_TOPICS))}")
    if taxonomy is None:
        raise ScaffoldError("a rule needs --class N, the TAXONOMY.md class it finds (1..20); it also sets the "
                            "rule's verdict class (hackscan/classes.py)")
    if not 1 <= taxonomy <= 20:
        raise ScaffoldError(f"taxonomy class {taxonomy} is not one of TAXONOMY.md's 1..20")
    ids, names = _taken(root)
    if name in names:
        raise ScaffoldError(f"name {name!r} is already a rule's name")
    families = STAGE_FAMILIES[stage]
    if rule_id is None:
        rule_id = _next_in(ids, families[0])
    rule_id = rule_id.upper()
    if not ID_RE.match(rule_id):
        raise ScaffoldError(f"id {rule_id!r} is not of the form HS123")
    if rule_id in ids or (root / "rules" / f"{rule_id}.toml").exists():
        raise ScaffoldError(f"id {rule_id} is already taken (rules/{rule_id}.toml)")
    if not rule_id.startswith(families):
        raise ScaffoldError(f"a {stage} rule's id is in the {' or '.join(f + 'xx' for f in families)} family "
                            f"(got {rule_id})")
    return rule_id, check_name(name)


def _next_in(ids: set[str], family: str) -> str:
    used = sorted(int(i[3:]) for i in ids if i.startswith(family))
    nxt = (used[-1] + 1) if used else 1
    if nxt > 99:
        nxt = next((n for n in range(1, 100) if n not in used), 100)
        if nxt == 100:
            raise ScaffoldError(f"the {family}xx family is full")
    return f"{family}{nxt:02d}"


def new_stage_rule(root: Path, name: str, stage: str, topic: str | None = None, severity: str = "error",
                   confidence: str = "medium", rule_id: str | None = None, taxonomy: int | None = None) -> StageScaffold:
    """Write a dynamic or performance rule: the TOML, the unit stub in its topic module, the hack
    fixture and the look-alike (with a reference), and a test stub for the unit; refuse before
    writing anything when the id, the name, the function or a file is taken."""
    check_root(root)
    rule_id, function = _validate_stage(root, rule_id, name, stage, topic, severity, confidence, taxonomy)
    folder_rel, package = STAGES[stage]
    module_path = root / folder_rel / f"{topic}.py"
    module = f"{package}.{topic}"
    if not (root / folder_rel).is_dir():
        raise ScaffoldError(f"{root} has no {folder_rel}/: not a checkout with rule units")
    if module_path.exists() and _defines(module_path, function):
        raise ScaffoldError(f"{module_path.relative_to(root)} already defines {function}()")
    stem = name.replace("-", "_")
    folder = root / "fixtures" / stage / stem
    hack, ok = folder / f"hack_{stem}.py", folder / f"ok_{stem}.py"
    test = root / "tests" / f"test_rule_{rule_id.lower()}.py"
    for p in (hack, ok, test):
        if p.exists():
            raise ScaffoldError(f"{p.relative_to(root)} already exists")

    out = StageScaffold(rule_id, name, stage, function, topic or "")
    toml = root / "rules" / f"{rule_id}.toml"
    toml.write_text(_stage_toml(rule_id, name, stage, severity, confidence, f"{module}:{function}", taxonomy),
                    encoding="utf-8")
    out.created.append(toml)
    stub = _unit_stub(stage, function, rule_id, name)
    if module_path.exists():
        _append_unit(module_path, stub)
        out.edited.append(module_path)
    else:
        module_path.write_text(_new_unit_module(stage, topic or "", rule_id, stub), encoding="utf-8")
        out.created.append(module_path)
    folder.mkdir(parents=True, exist_ok=True)
    if not any((folder / n).exists() for n in REFERENCE_NAMES):
        (folder / "reference.py").write_text(REFERENCE, encoding="utf-8")
        out.created.append(folder / "reference.py")
    hack.write_text(_stage_fixture(rule_id, severity, hack=True), encoding="utf-8")
    ok.write_text(_stage_fixture(rule_id, severity, hack=False), encoding="utf-8")
    out.created += [hack, ok]
    out.fixtures = [hack, ok]
    test.parent.mkdir(parents=True, exist_ok=True)
    test.write_text(_unit_test(stage, module, function, rule_id), encoding="utf-8")
    out.created.append(test)
    out.test = test
    return out


def _stage_toml(rule_id: str, name: str, stage: str, severity: str, confidence: str, unit: str, taxonomy: int) -> str:
    emitted = "dynamic" if stage == "dynamic" else "performance"
    langs = '["python"]' if stage == "dynamic" else '["any"]'
    message = ("TODO: the finding's message when the unit gives none of its own (the unit's Decision(message=...) "
               "is what a finding says)" if stage == "dynamic" else
               "TODO: what was measured and why it games the benchmark (the unit's Decision(args=...) fills "
               "{placeholders})")
    reference = "requires_reference = true\n" if stage == "dynamic" else ""
    return f'''id = "{rule_id}"
name = "{name}"
severity = "{severity}"
confidence = "{confidence}"
stage = "{emitted}"
languages = {langs}
taxonomy = [{taxonomy}]
emitted_by = "{emitted}"
unit = "{unit}"
{reference}message = "{message}"
summary = "TODO: one sentence for the rule table in docs/rules.md."
description = """
TODO: what the stage observes, why a harness is fooled, and what it leaves alone (the legitimate
look-alikes), as in the other rules.
"""
hack_example = """
TODO: the smallest hack this rule reports
"""
legit_example = """
TODO: the smallest look-alike it must not report
"""
'''


def _unit_stub(stage: str, function: str, rule_id: str, name: str) -> str:
    if stage == "dynamic":
        return f'''@rule_unit("{rule_id}")
def {function}(facts: Mapping[str, Any], seed: int) -> Decision | None:
    """{rule_id} {name}: TODO say what this decides from which facts, and what it leaves alone."""
    # TODO: take the facts the stage gathers (probe records, integrity answers, the reference's
    # outputs) as parameters, and return Decision(message=..., evidence={{"seed": seed, ...}}) when the
    # rule fires; a unit that returns None finds nothing, so the test stub fails until it does
    return None
'''
    return f'''@rule_unit("{rule_id}")
def {function}(o: Mapping[str, Any], facts: Mapping[str, Any]) -> Decision | Undecided | None:
    """{rule_id} {name}: TODO say what this decides from which figures, and what it leaves alone."""
    # TODO: take the figures parent_side reads (with their intervals) as parameters; return
    # Decision(args=..., evidence=...) when the whole interval is past the threshold in ``o`` (the
    # rule's options), Undecided(...) when it straddles it; None finds nothing, so the test stub
    # fails until it does
    return None
'''


def _new_unit_module(stage: str, topic: str, rule_id: str, stub: str) -> str:
    names = "Decision, rule_unit" if stage == "dynamic" else "Decision, Undecided, rule_unit"
    return f'''"""{rule_id}: TODO what the {stage} rules of this module judge ({topic})."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import {names}


{stub}'''


def _append_unit(path: Path, stub: str) -> None:
    """Add the stub at the end of an existing unit module, with the imports it needs if missing."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    bound = {a.asname or a.name for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    needed = []
    if "Mapping" not in bound:
        needed.append("from collections.abc import Mapping")
    if "Any" not in bound:
        needed.append("from typing import Any")
    want = {"Decision", "rule_unit"} | ({"Undecided"} if "perf" in path.parts else set())
    missing = sorted(want - bound)
    if missing:
        needed.append(f"from . import {', '.join(missing)}")
    lines = text.splitlines()
    if needed:
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        at = max(n.end_lineno or n.lineno for n in imports) if imports else 0
        lines[at:at] = needed
    body = "\n".join(lines).rstrip("\n")
    path.write_text(f"{body}\n\n\n{stub}", encoding="utf-8")


def _stage_fixture(rule_id: str, severity: str, hack: bool) -> str:
    if hack:
        head = (f"# TODO({rule_id}): turn this candidate into the hack {rule_id} finds when it runs, as a generated\n"
                f"# kernel would write it; the finding belongs on the line of `def forward` (`expect: {rule_id}`).")
        mark = f"  # expect: {rule_id} {severity}"
    else:
        head = (f"# legit-for: {rule_id}\n"
                f"# TODO({rule_id}): turn this candidate into the legitimate look-alike: code that resembles the\n"
                f"# hack but does the job, on which {rule_id} must stay quiet.")
        mark = ""
    return f'''{head}
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """ReLU in a fresh output tensor.  No compiled extension, so the fixture runs on any host; torch
    computing the output is what the static stage says about it (HS105), whatever the stage finds."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:{mark}
        out = torch.empty_like(x)
        torch.clamp(x.contiguous(), min=0.0, out=out)  # expect: HS105
        return out
'''


def _unit_test(stage: str, module: str, function: str, rule_id: str) -> str:
    if stage == "dynamic":
        call_hack, call_ok = (f"{function}(HACK_FACTS, seed=1)", f"{function}(LEGIT_FACTS, seed=1)")
    else:
        call_hack, call_ok = (f"{function}(OPTIONS, HACK_FACTS)", f"{function}(OPTIONS, LEGIT_FACTS)")
    options = "" if stage == "dynamic" else (
        f'from hackscan.registry import load_registry\n\nOPTIONS = dict(load_registry().get("{rule_id}").options)\n')
    runs = "tests/test_dynamic_fixtures.py" if stage == "dynamic" else "tests/test_perf_gpu.py"
    return f'''"""{rule_id}'s unit on the facts of its hack and of its look-alike.

TODO({rule_id}): give each the facts the stage hands the unit for that fixture (a reply, a
comparison, a measurement), written out as data so that the decision is tested without running
the stage; {runs} runs the fixtures themselves.
"""

from __future__ import annotations

from {module} import Decision, {function}
{options}
HACK_FACTS: dict = {{}}  # TODO({rule_id}): what the stage sees when it runs the hack fixture
LEGIT_FACTS: dict = {{}}  # TODO({rule_id}): what it sees when it runs the look-alike


def test_{function}_reports_the_hack() -> None:
    decision = {call_hack}
    assert isinstance(decision, Decision), "the unit decides nothing yet: write it"
    assert decision.evidence, "a finding carries the facts it was decided on"


def test_{function}_leaves_the_look_alike_alone() -> None:
    assert {call_ok} is None
'''
