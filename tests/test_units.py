"""Source maps: findings inside embedded CUDA strings point at the right host line and column."""

from __future__ import annotations

from hackscan.python.module import HostModule
from hackscan.units import MappedText


def _unit_pos(src: str, needle: str, unit_index: int = -1) -> tuple[int, int, str]:
    mod = HostModule.parse(src)
    unit = mod.units[unit_index]
    off = unit.text.index(needle)
    line, col = unit.position(off)
    host_line = src.splitlines()[line - 1]
    return line, col, host_line[col : col + len(needle)]


def test_triple_quoted_source_maps_exactly() -> None:
    src = 'from torch.utils.cpp_extension import load_inline\ncuda = """\n__global__ void k(float* y) {\n    y[0] = 1.f;\n}\n"""\next = load_inline(name="e", cpp_sources="", cuda_sources=cuda, functions=["k"])\n'
    line, col, text = _unit_pos(src, "y[0] = 1.f")
    assert (line, text) == (4, "y[0] = 1.f")
    assert col == 4


def test_escapes_and_implicit_concatenation() -> None:
    src = (
        "from torch.utils.cpp_extension import load_inline\n"
        "cuda = ('#include <torch/extension.h>\\n'\n"
        "        '__global__ void k(float* y) { y[0] = 2.f; }\\n')\n"
        "ext = load_inline('e', '', cuda)\n"
    )
    line, col, text = _unit_pos(src, "y[0] = 2.f")
    assert line == 3 and text == "y[0] = 2.f"


def test_fstring_fields_and_concatenation_keep_positions() -> None:
    src = (
        "from torch.utils.cpp_extension import load_inline\n"
        "N = 128\n"
        "head = '#include <torch/extension.h>\\n'\n"
        "body = f'''\n"
        "#define N {N}\n"
        "__global__ void k(float* o) {{ o[threadIdx.x] = N; }}\n"
        "'''\n"
        "ext = load_inline(name='e', cpp_sources='', cuda_sources=head + body)\n"
    )
    mod = HostModule.parse(src)
    unit = mod.units[0]
    assert "#define N 128" in unit.text
    assert "{ o[threadIdx.x] = N; }" in unit.text  # doubled braces decoded
    line, col, text = _unit_pos(src, "o[threadIdx.x]")
    assert line == 6 and text == "o[threadIdx.x]"


def test_dedent_keeps_line_mapping() -> None:
    src = (
        "import textwrap\n"
        "from torch.utils.cpp_extension import load_inline\n"
        "cuda = textwrap.dedent('''\n"
        "    __global__ void k(float* y) {\n"
        "        y[0] = 3.f;\n"
        "    }\n"
        "''')\n"
        "ext = load_inline(name='e', cpp_sources='', cuda_sources=[cuda])\n"
    )
    mod = HostModule.parse(src)
    assert mod.units[0].text.startswith("\n__global__")
    line, col, text = _unit_pos(src, "y[0] = 3.f")
    assert line == 5 and text == "y[0] = 3.f"


def test_unresolvable_source_is_recorded_not_raised() -> None:
    src = (
        "from torch.utils.cpp_extension import load_inline\n"
        "def read():\n    return open('k.cu').read()\n"
        "ext = load_inline(name='e', cpp_sources='', cuda_sources=read())\n"
    )
    mod = HostModule.parse(src)
    assert not mod.units
    assert mod.problems and mod.problems[0].argument == "cuda_sources" and mod.problems[0].line == 4


def test_extension_binding_through_function_and_self() -> None:
    src = (
        "from torch.utils.cpp_extension import load_inline\n"
        "import torch.nn as nn\n"
        "def build():\n"
        "    m = load_inline(name='e', cpp_sources='torch::Tensor f(torch::Tensor x);', functions=['f'])\n"
        "    return m\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.ext = build()\n"
        "    def forward(self, x):\n"
        "        return self.ext.f(x)\n"
    )
    mod = HostModule.parse(src)
    ext = mod.extensions[0]
    assert "self.ext" in ext.bound_to and ext.functions == ("f",)
    import ast

    call = [c for c in mod.of_type(ast.Call) if isinstance(c.func, ast.Attribute) and c.func.attr == "f"][0]
    assert mod.extension_for_call(call) == (ext, "f")


def test_mapped_text_slice_and_join() -> None:
    a = MappedText.verbatim("abc\ndef", 10, 4)
    b = MappedText.verbatim("XYZ", 20, 0)
    joined = MappedText.join([a, b], "\n")
    assert joined.text == "abc\ndef\nXYZ"
    assert joined.position(joined.text.index("e")) == (11, 1)
    assert joined.position(joined.text.index("Y")) == (20, 1)
    assert joined.slice(4).position(0) == (11, 0)


def test_non_ascii_host_columns() -> None:
    src = 'from torch.utils.cpp_extension import load_inline\ncuda = "// größe\\n__global__ void k(float* y) { y[0] = 1; }"\next = load_inline(name="e", cpp_sources="", cuda_sources=cuda)\n'
    line, col, text = _unit_pos(src, "y[0] = 1")
    assert line == 2 and text == "y[0] = 1"


def test_load_reads_only_files_beside_the_candidate(tmp_path) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k(float* y) { y[0] = 1.f; }\n")
    outside = tmp_path.parent / "outside_secret.cu"
    outside.write_text("__global__ void z(float* y) { y[0] = 2.f; }\n")
    src = (
        "from torch.utils.cpp_extension import load\n"
        f"a = load(name='a', sources=['k.cu'])\n"
        f"b = load(name='b', sources=['{outside}'])\n"
        "c = load(name='c', sources=['../outside_secret.cu'])\n"
    )
    cand = tmp_path / "cand.py"
    cand.write_text(src)
    mod = HostModule.parse(src, str(cand))
    assert [u.id for u in mod.units] == ["a:k.cu"]
    reasons = sorted(p.reason for p in mod.problems)
    assert len(reasons) == 2 and all("outside the candidate's folder" in r for r in reasons)
    rec = HostModule.parse(src, str(tmp_path / "data.jsonl"))
    assert not rec.units and len(rec.problems) == 3
