"""Inputs as users have them: files, folders with a reference, JSONL datasets, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from hackscan.engine import StaticScanner
from hackscan.inputs import InputOptions, InputProblem, Submission, discover
from hackscan.model import Verdict

CANDIDATE = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
REFERENCE = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n\ndef get_inputs():\n    return [torch.rand(4, 8)]\n"


def test_folder_pairs_reference_with_siblings(tmp_path: Path) -> None:
    (tmp_path / "reference.py").write_text(REFERENCE)
    (tmp_path / "a.py").write_text(CANDIDATE)
    (tmp_path / "b.cu").write_text("__global__ void k(float* x) { x[0] = 1; }\n")
    items = list(discover([str(tmp_path)]))
    assert [Path(i.path).name for i in items] == ["a.py", "b.cu"]
    a, b = items
    assert isinstance(a, Submission) and a.reference == REFERENCE and a.reference_path.endswith("reference.py")
    assert b.language == "cuda"


def test_a_file_named_alone_pairs_with_the_reference_beside_it(tmp_path: Path) -> None:
    (tmp_path / "reference.py").write_text(REFERENCE)
    cand = tmp_path / "a.py"
    cand.write_text(CANDIDATE)
    (item,) = discover([str(cand)])
    assert item.reference == REFERENCE and item.reference_path == str(tmp_path / "reference.py")
    # --ref wins over the sibling; a file defining Model stays its own reference
    other = tmp_path / "other_ref.py"
    other.write_text(REFERENCE.replace("x * 2", "x * 3"))
    (item,) = discover([str(cand)], InputOptions(reference=str(other)))
    assert item.reference_path == str(other)
    both = tmp_path / "both.py"
    both.write_text(REFERENCE + "\n" + CANDIDATE)
    (item,) = discover([str(both)])
    assert item.self_reference
    # the reference named alone is not paired with itself
    (item,) = discover([str(tmp_path / "reference.py")])
    assert item.reference is None and not item.self_reference


def test_a_file_alone_without_a_reference_beside_it_has_none(tmp_path: Path) -> None:
    cand = tmp_path / "a.py"
    cand.write_text(CANDIDATE)
    (item,) = discover([str(cand)])
    assert item.reference is None


def test_ref_option_applies_to_every_candidate(tmp_path: Path) -> None:
    ref = tmp_path / "ref_problem.py"
    ref.write_text(REFERENCE)
    cand = tmp_path / "cand.py"
    cand.write_text(CANDIDATE)
    (item,) = discover([str(cand)], InputOptions(reference=str(ref)))
    assert item.reference == REFERENCE


def test_candidate_defining_model_is_its_own_reference(tmp_path: Path) -> None:
    f = tmp_path / "both.py"
    f.write_text(REFERENCE + "\n" + CANDIDATE)
    (item,) = discover([str(f)])
    assert item.self_reference and item.reference == f.read_text()


def test_jsonl_records_with_line_numbers_and_bad_lines(tmp_path: Path) -> None:
    f = tmp_path / "data.jsonl"
    lines = [
        json.dumps({"custom_code": CANDIDATE, "ref_code": REFERENCE, "task_id": 7, "score_default": 1.5}),
        "{not json",
        json.dumps({"custom_code": None, "ref_code": REFERENCE}),
        "",
        json.dumps({"code": CANDIDATE}),
        json.dumps([1, 2]),
    ]
    f.write_text("\n".join(lines) + "\n")
    items = list(discover([str(f)]))
    assert isinstance(items[0], Submission) and items[0].record == 1 and items[0].meta["task_id"] == 7
    assert items[0].meta["claimed"] == {"score_default": 1.5}
    assert isinstance(items[1], InputProblem) and items[1].record == 2 and "invalid JSON" in items[1].reason
    assert isinstance(items[2], InputProblem) and items[2].record == 3
    assert isinstance(items[3], InputProblem) and items[3].record == 5 and "custom_code" in items[3].reason
    assert isinstance(items[4], InputProblem) and "not a JSON object" in items[4].reason
    custom = list(discover([str(f)], InputOptions(code_field="code")))
    assert isinstance(custom[3], Submission) and custom[3].record == 5


def test_bad_inputs_become_error_results_without_losing_others(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(CANDIDATE)
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02garbage")
    latin = tmp_path / "latin.py"
    latin.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    items = list(discover([str(good), str(binary), str(latin), str(tmp_path / "missing.py")]))
    reports = StaticScanner().scan_many(items)
    verdicts = [r.verdict for r in reports]
    assert verdicts[0] is not Verdict.ERROR
    assert verdicts[1:] == [Verdict.ERROR] * 3
    reasons = [r.error for r in reports[1:]]
    assert "binary" in reasons[0] and "UTF-8" in reasons[1] and "no such file" in reasons[2]
    assert all(r.findings[0].rule == "HS006" for r in reports[1:])


def test_unsupported_suffix_is_reported(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    (item,) = discover([str(f)])
    assert isinstance(item, InputProblem) and "unsupported" in item.reason
