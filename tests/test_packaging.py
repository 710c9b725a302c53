"""The package builds without setuptools warnings and ships what it reads at run time: every code
folder as a package, the rules, PROTOCOL.md and the seed kernels as data (never as packages)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_code_folder_is_a_listed_package() -> None:
    listed = set(_config()["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "hackscan").rglob("__init__.py")}
    assert found - listed == set()
    assert "hackscan.rules" in listed
    assert not any("seeds" in p for p in listed)  # seed kernels are data


@pytest.mark.slow
def test_the_wheel_builds_quietly_and_holds_the_data(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "hackscan", src / "hackscan", ignore=ignore)
    shutil.copytree(ROOT / "rules", src / "rules", ignore=ignore)
    out = subprocess.run([sys.executable, "-c", "from setuptools import build_meta as b; print(b.build_wheel('dist'))"],
                         cwd=src, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    log = out.stdout + out.stderr
    # the seed folders once drew ~175 lines of these on every install
    assert "would be ignored" not in log and "Package would" not in log, log[-2000:]
    wheel = src / "dist" / out.stdout.strip().splitlines()[-1]
    names = set(zipfile.ZipFile(wheel).namelist())
    seeds = [n for n in names if n.startswith("hackscan/measure/seeds/")]
    assert "hackscan/measure/seeds/README.md" in names and len([n for n in seeds if n.endswith(".py")]) >= 6
    assert "hackscan/dynamic/PROTOCOL.md" in names and "hackscan/rules/HS001.toml" in names
    assert "hackscan/measure/seeds.py" in names
