"""patterns.py (the shared facts of the HS13x-HS19x rules) and rule edges the fixtures do not pin down."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from hackscan.config import Config
from hackscan.engine import StaticScanner
from hackscan.inputs import Submission
from hackscan.model import Severity
from hackscan.python.module import HostModule
from hackscan.python.patterns import MiscFacts, object_names, value_names
from hackscan.registry import load_registry, rules_dir

FAMILIES = ("HS00", "HS13", "HS14", "HS15", "HS16", "HS17", "HS18", "HS19", "HS3")

RELU_REF = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.rand(16, 16384)]
def get_init_inputs():
    return []
'''
MM_REF = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
def get_inputs():
    return [torch.rand(1024, 4096), torch.rand(4096, 2048)]
def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def scanner(tmp_path_factory) -> StaticScanner:
    d = tmp_path_factory.mktemp("rules")
    for f in rules_dir().glob("HS*.toml"):
        if f.name.startswith(FAMILIES):
            shutil.copy(f, d / f.name)
    return StaticScanner(Config(), registry=load_registry(Path(d)))


def _found(scanner, code: str, ref: str | None = RELU_REF) -> list[tuple[str, int, Severity]]:
    rep = scanner.scan(Submission(path="c.py", code=code, reference=ref))
    assert not [f for f in rep.findings if f.rule == "HS005"], rep.findings
    return [(f.rule, f.location.line, f.severity) for f in rep.findings]


# ---------------------------------------------------------------------- facts
SRC = '''
import torch
import torch.cuda as tc
import torch.nn as nn

def helper(t, scale):
    y = t.view(-1)
    return y * scale

class Block(nn.Module):
    def forward(self, z):
        return self._inner(z)
    def _inner(self, z):
        return z

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
    def forward(self, x, w):
        n = x.shape[0]
        a = x.contiguous()
        b = helper(a, 2.0)
        c = torch.empty_like(x)
        if n > 4:
            c.copy_(b)
        return self.block(c)
    def unused(self):
        return 1
'''


@pytest.fixture(scope="module")
def facts():
    return MiscFacts(HostModule.parse(SRC, "s.py"))


def test_reachability_follows_methods_module_functions_and_submodules(facts) -> None:
    names = {f.name for f in facts.reachable}
    assert names == {"forward", "helper", "_inner"}  # Block.forward and its self._inner
    assert facts.model.name == "ModelNew"


def test_value_and_alias_taint(facts) -> None:
    fwd = facts.forward
    assert facts.input_params[fwd] == {"x", "w"}
    values = facts.input_values(fwd)
    assert {"a", "b"} <= values and "n" not in values  # a shape is not a value
    assert "c" in values  # the allocation is filled from b by c.copy_(b)
    aliases = facts.input_aliases(fwd)
    assert "a" in aliases and "b" not in aliases
    helper = facts.module_functions["helper"]
    assert facts.input_params[helper] == {"t"}  # scale gets a constant


def test_value_names_skip_metadata_and_allocations() -> None:
    expr = ast.parse("torch.empty_like(x) + y.shape[0] + z.data_ptr() + len(u) + v", mode="eval").body
    assert value_names(expr) == {"v"}


def test_dominating_prefix_drops_one_armed_ifs(facts) -> None:
    fwd = facts.forward
    ret = [n for n in ast.walk(fwd) if isinstance(n, ast.Return)][0]
    prefix = facts.dominating_prefix(ret, fwd)
    assert not any(isinstance(p, ast.If) for p in prefix)  # only the test of `if n > 4`
    assert any(isinstance(p, ast.Compare) for p in prefix)


def test_object_names_follow_aliases_getattr_and_import_module() -> None:
    host = HostModule.parse('''
import importlib
import torch
import torch.cuda as tc
cuda = torch.cuda
ev = getattr(cuda, "Ev" + "ent")
t = importlib.import_module("ti" + "me")
''', "o.py")
    names = object_names(MiscFacts(host))
    body = host.tree.body
    assert names.resolve(ast.parse("tc.synchronize").body[0].value, None) == "torch.cuda.synchronize"
    assert names.resolve(ast.Name(id="ev"), None) == "torch.cuda.Event"
    assert names.resolve(ast.Name(id="t"), None) == "time"
    assert names.resolve(ast.Name(id="self"), None) == ""
    assert len(body) == 6


# ---------------------------------------------------------------------- rule edges
def test_eval_method_and_shadowed_compile_are_not_builtins(scanner) -> None:
    code = '''
from re import compile
import torch.nn as nn
pat = compile(r"sm_(\\d+)")
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.eval()
    def forward(self, x):
        return self.ext.run(x)
'''
    assert [f for f in _found(scanner, code) if f[0] == "HS190"] == []


def test_literal_exec_is_a_warning_and_computed_exec_an_error(scanner) -> None:
    code = '''
exec("x = 1")
src = "y" + " = 2"
exec(src)
'''
    got = [(r, ln, s) for r, ln, s in _found(scanner, code) if r == "HS190"]
    assert got == [("HS190", 2, Severity.WARNING), ("HS190", 4, Severity.ERROR)]


def test_env_read_without_branch_is_not_flagged(scanner) -> None:
    code = '''
import os
BLOCK = int(os.environ.get("RELU_BLOCK", "256"))
'''
    assert [f for f in _found(scanner, code) if f[0] == "HS161"] == []


def test_harness_named_env_branch_is_an_error(scanner) -> None:
    code = '''
import os
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        if os.getenv("PYTEST_CURRENT_TEST"):
            return self.ext.slow(x)
        return self.ext.fast(x)
'''
    assert ("HS161", 6, Severity.ERROR) in _found(scanner, code)


def test_autocast_disabled_and_no_reference_cases(scanner) -> None:
    code = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        with torch.autocast("cuda", enabled=False):
            return self.ext.run(x.half())
'''
    got = _found(scanner, code)
    assert not [f for f in got if f[0] == "HS171"]
    assert ("HS170", 7, Severity.ERROR) in got
    # without a reference the half cast cannot be judged: the rule is skipped, not guessed
    assert not [f for f in _found(scanner, code, ref=None) if f[0] == "HS170"]


def test_tf32_flag_in_reference_is_not_a_downgrade(scanner) -> None:
    ref = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n" + MM_REF
    code = "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
    assert not [f for f in _found(scanner, code, ref=ref) if f[0] == "HS172"]
    assert [(r, s) for r, _, s in _found(scanner, code, ref=MM_REF) if r == "HS172"] == [("HS172", Severity.ERROR)]
    assert [(r, s) for r, _, s in _found(scanner, code, ref=None) if r == "HS172"] == [("HS172", Severity.WARNING)]


def test_get_inputs_in_main_block_is_not_flagged(scanner) -> None:
    code = '''
import torch
def get_inputs():
    return [torch.rand(16, 16384)]
if __name__ == "__main__":
    print(get_inputs())
'''
    assert not [f for f in _found(scanner, code) if f[0] == "HS180"]


def test_joined_side_stream_through_helper_is_clean(scanner) -> None:
    code = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = torch.cuda.Stream()
    def _sync(self):
        torch.cuda.current_stream().wait_stream(self.s)
    def forward(self, x):
        with torch.cuda.stream(self.s):
            y = self.ext.run(x)
        self._sync()
        return y
'''
    assert not [f for f in _found(scanner, code) if f[0] == "HS140"]


def test_weight_snapshot_cache_is_not_an_output_cache(scanner) -> None:
    code = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 8))
        self._wt = None
    def _weight_t(self):
        if self._wt is None:
            self._wt = self.weight.t().contiguous()
        return self._wt
    def forward(self, x):
        return self.ext.mm(x, self._weight_t())
'''
    assert not [f for f in _found(scanner, code) if f[0].startswith("HS13")]


def test_seeded_warmup_dummy_is_only_a_warning(scanner) -> None:
    code = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        dummy = torch.rand(16, 16384)
        self.ext.run(dummy)
    def forward(self, x):
        return self.ext.run(x)
'''
    assert [(r, s) for r, _, s in _found(scanner, code) if r == "HS181"] == [("HS181", Severity.WARNING)]


def test_half_helper_called_only_under_dtype_dispatch_is_clean(scanner) -> None:
    code = '''
import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def _forward_half(self, x):
        return self.ext.run_half(x.contiguous().half())
    def forward(self, x):
        if x.dtype == torch.float16:
            return self._forward_half(x)
        return self.ext.run(x)
'''
    assert not [f for f in _found(scanner, code) if f[0] == "HS170"]
