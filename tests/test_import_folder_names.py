"""The sandbox's names for the interpreter's import folders (sandbox.Launcher._python_paths) do not
depend on their place in sys.path.

The case it closes: the names reach every extension's build command (``-isystem
/venv/lib/python3.X/site-packages-N/torch/include``), and a cached build is reused only when that command is
unchanged.  A Ray worker's sys.path holds more entries than the CLI's, so torch's folder was
``site-packages-3`` there and ``site-packages-1`` here, and every build compiled again.  The
look-alike: two different folders keep two different names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hackscan.dynamic.sandbox import Launcher


def test_a_folder_has_the_same_name_wherever_it_sits_in_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site, extra1, extra2 = (tmp_path / n for n in ("site", "ray_thirdparty", "job_dir"))
    for d in (site, extra1, extra2):
        d.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    alone = dict((host, inside) for inside, host in Launcher._python_paths(None))  # type: ignore[arg-type]
    monkeypatch.setattr(sys, "path", [str(extra1), str(extra2), str(site)])
    crowded = dict((host, inside) for inside, host in Launcher._python_paths(None))  # type: ignore[arg-type]
    assert alone[str(site)] == crowded[str(site)]
    assert len(set(crowded.values())) == 3 and all("/site-packages-" in v for v in crowded.values())


def test_the_folder_that_holds_torch_is_the_venvs_site_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a plain install's torch sits in <venv>/lib/pythonX.Y/site-packages, with no suffix; the
    # name must not move when a Ray worker puts folders before it
    site, extra = tmp_path / "site", tmp_path / "ray_thirdparty"
    (site / "torch").mkdir(parents=True)
    extra.mkdir()
    monkeypatch.setattr(sys, "path", [str(extra), str(site)])
    names = dict((host, inside) for inside, host in Launcher._python_paths(None))  # type: ignore[arg-type]
    assert names[str(site)].endswith(f"/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages")
    assert names[str(extra)] != names[str(site)]
