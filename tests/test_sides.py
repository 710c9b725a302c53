"""The parent / worker boundary, checked on the files rather than promised in docstrings.

hackscan runs candidates in workers (``hackscan/dynamic/worker/``, ``hackscan/perf/worker/``) that
may import torch; everything else is the parent, which never imports torch and never runs the
candidate.  Modules both sides use sit in ``hackscan/dynamic/shared/`` (and ``perf/options.py``,
``perf/stats.py``)
and import no torch when imported.  These tests fail when a parent module starts importing torch,
when the staged worker code picks up a parent module (the rules, the judge, the thresholds would
then be readable to a candidate), or when it misses one it needs.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hackscan
from hackscan.dynamic import staging

PKG = Path(hackscan.__file__).resolve().parent
WORKER_PACKAGES = ("dynamic/worker", "perf/worker")
# perf/stats.py: the intervals the worker stops timing on and the parent reports (pure math, no torch)
SHARED = ("dynamic/shared", "perf/options.py", "perf/stats.py")
# worker-side entry points of processes other than the sandboxed worker: the --sandbox off
# forkserver and the standalone timing runner's child; boot.py never imports them
OTHER_PROCESSES = {"dynamic/worker/zygote.py", "perf/worker/child.py"}
HEAVY = ("torch", "triton", "numpy")


def _modules() -> list[str]:
    """Every importable module file under hackscan/, relative to it (not the seed kernels' folders,
    which are data)."""
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG)
        if "__pycache__" in rel.parts:
            continue
        if all((PKG / Path(*rel.parts[:i]) / "__init__.py").exists() for i in range(len(rel.parts))):
            out.append(rel.as_posix())
    return out


def _in(rel: str, places: tuple[str, ...]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in places)


def _dotted(rel: str) -> str:
    name = rel[:-3].replace("/", ".")
    return "hackscan" if name == "__init__" else "hackscan." + name.removesuffix(".__init__")


PROBE = r"""
import importlib, json, sys
heavy = tuple(sys.argv[1].split(","))
numpy_free = set(sys.argv[2].split(","))
out = {}
for name in sys.argv[3:]:
    importlib.import_module(name)
    loaded = [h for h in heavy if h in sys.modules]
    if "numpy" in loaded and name not in numpy_free:
        loaded.remove("numpy")
    if loaded:
        out[name] = loaded
        break
print(json.dumps(out))
"""


def test_the_worker_and_shared_places_exist_and_the_split_is_whole() -> None:
    mods = _modules()
    for place in WORKER_PACKAGES + ("dynamic/shared",):
        assert (PKG / place / "__init__.py").exists(), place
    assert (PKG / "perf/options.py").exists()
    # the old flat names must not come back next to the packages
    for gone in ("dynamic/worker.py", "dynamic/boot.py", "dynamic/wire.py", "perf/worker_side.py"):
        assert gone not in mods, gone


def test_no_parent_side_module_imports_torch() -> None:
    """Import every parent-side module (all of hackscan but the worker packages) in one fresh
    interpreter, one after the other, and name the first that loads torch or triton; the static
    stage (everything outside dynamic/ and perf/) must not load numpy either."""
    mods = [m for m in _modules() if not _in(m, WORKER_PACKAGES) and m != "__main__.py"]
    assert len(mods) > 80 and "dynamic/stage.py" in mods and "dynamic/shared/wire.py" in mods
    static = [_dotted(m) for m in mods if not _in(m, ("dynamic", "perf"))]
    # the static stage first: numpy is the dynamic parent's (compare.py), so it may be loaded only after
    names = static + [_dotted(m) for m in mods if _in(m, ("dynamic", "perf"))]
    out = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), ",".join(static), *names],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    bad = json.loads(out.stdout.strip().splitlines()[-1])
    assert bad == {}, f"a parent-side module imports what only workers may: {bad}"


def test_the_probe_sees_torch_when_a_worker_module_is_imported() -> None:
    """The look-alike: the same check on a worker module does report torch (so the test above can
    fail)."""
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), "", "hackscan.dynamic.worker.census"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"hackscan.dynamic.worker.census": ["torch"]}


def test_the_staged_closure_is_exactly_the_worker_packages_and_the_shared_modules() -> None:
    staged = set(staging.worker_modules())
    worker = {m for m in _modules() if _in(m, WORKER_PACKAGES) and not m.endswith("__init__.py")}
    shared = {m for m in _modules() if _in(m, SHARED) and not m.endswith("__init__.py")}
    code = {m for m in staged if not m.endswith("__init__.py")}
    assert code == (worker - OTHER_PROCESSES) | shared, (
        f"staged but not worker/shared: {sorted(code - worker - shared)}; "
        f"worker/shared but not staged: {sorted((worker - OTHER_PROCESSES) | shared - code)}")
    # package files staged with content are the worker or shared packages' own
    assert all(_in(m, WORKER_PACKAGES + SHARED) for m in staged if m.endswith("__init__.py"))


def test_the_staged_tree_imports_on_its_own_under_a_neutral_name(tmp_path: Path) -> None:
    """What boot.py loads before it serves, from the staged copy alone: a module the closure
    missed (a name imported from a package's __init__, which staging leaves empty) fails here,
    not in a sandbox at scan time."""
    pytest.importorskip("torch")
    staging.stage_package(tmp_path, "src")
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from src.dynamic.worker import boot\n"
        "boot._preload()\n"
        "print(json.dumps({'perf': 'src.perf.worker.measure' in sys.modules,\n"
        "                  'hackscan': sorted(n for n in sys.modules if n.split('.')[0] == 'hackscan')}))\n")
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"perf": True, "hackscan": []}, result


def _relative_imports(rel: str) -> set[str]:
    """The hackscan modules a module imports relatively (anywhere in it, functions included)."""
    pkg = Path(rel).parent
    out = set()
    for node in ast.walk(ast.parse((PKG / rel).read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = pkg
        for _ in range(node.level - 1):
            base = base.parent
        targets = [base / node.module.replace(".", "/")] if node.module else [base / a.name for a in node.names]
        for t in targets:
            for cand in (t.with_suffix(".py"), t / "__init__.py"):
                if (PKG / cand).exists():
                    out.add(cand.as_posix())
    return out


def test_the_worker_side_has_no_import_circle() -> None:
    """``serve`` once sat in the base class's module and imported the two roles that import that
    module; the worker and shared modules now import in one direction only."""
    mods = [m for m in _modules() if _in(m, WORKER_PACKAGES + SHARED)]
    graph = {m: {t for t in _relative_imports(m) if t in mods and t != m} for m in mods}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in mods:
        if m not in state:
            visit(m, [m])
