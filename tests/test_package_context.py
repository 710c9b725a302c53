"""A submission's package is read from the disk only when it is a file there.

A candidate's own package (the folders above its file that hold ``__init__.py``, and the extensions
the ``setup.py`` beside them builds) decides whether ``import gemm_ops_cuda`` is the package's own
compiled kernel or a library.  A candidate given as a string has no such place: its verdict must not
depend on the folder the caller happens to run from.
"""

from __future__ import annotations

from pathlib import Path

import hackscan

PKG = Path(__file__).resolve().parent.parent / "fixtures" / "python" / "extpkg" / "gemm_ops"
CANDIDATE = PKG / "ok_built_extension.py"


def _rules(report) -> set[str]:
    return {f.rule for f in report.findings}


def test_the_file_on_disk_belongs_to_its_package() -> None:
    """The look-alike: scanned as the file it is, the extension its package builds is its own kernel."""
    (report,) = hackscan.scan_paths([str(CANDIDATE)], str(PKG / "reference.py"))
    assert "HS105" not in _rules(report)


def test_a_string_does_not_take_the_package_of_the_callers_folder(monkeypatch, tmp_path: Path) -> None:
    code, ref = CANDIDATE.read_text(), (PKG / "reference.py").read_text()
    monkeypatch.chdir(tmp_path)
    elsewhere = hackscan.scan_source(code, ref)
    monkeypatch.chdir(PKG)  # a training loop started inside a package folder
    inside = hackscan.scan_source(code, ref)
    assert "HS105" in _rules(elsewhere)  # no kernel of its own is visible from a string
    assert _rules(inside) == _rules(elsewhere) and inside.verdict == elsewhere.verdict
