"""What a sandbox is given to run, parent side: the worker side of hackscan (the closure of
``dynamic/worker/boot.py``'s imports, nothing of the rules or the judge) staged under a neutral
package name, and a home folder that looks lived in."""
from __future__ import annotations

import ast
import os
import shutil
import threading
from pathlib import Path

_WORKER_MODULES_LOCK = threading.Lock()


def worker_modules() -> list[str]:
    """Module paths (relative to the package root) the worker side imports, from ``dynamic/worker/boot.py``
    by its relative imports (it has no other kind: tests/test_dynamic_neutral_name.py): only these
    are staged into a sandbox, not the rules, the judge or the thresholds.  One launcher at a time:
    launchers start side by side (pool.py), and CPython 3.11's ``ast.parse`` is not safe in two
    threads at once ("AST constructor recursion depth mismatch", seen here)."""
    with _WORKER_MODULES_LOCK:
        return _worker_modules()


def _worker_modules() -> list[str]:
    root = Path(__file__).resolve().parent.parent
    seen: set[str] = set()
    todo = ["dynamic/worker/boot.py"]
    while todo:
        rel = todo.pop()
        if rel in seen or not (root / rel).exists():
            continue
        seen.add(rel)
        pkg = Path(rel).parent
        for node in ast.walk(ast.parse((root / rel).read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = pkg
            for _ in range(node.level - 1):
                base = base.parent
            if node.module:
                mod = base / node.module.replace(".", "/")
                targets = [mod, *(mod / a.name for a in node.names)]
            else:
                targets = [base / a.name for a in node.names]
            for t in targets:
                todo.extend(str(c) for c in (t.with_suffix(".py"), t / "__init__.py") if (root / c).exists())
    return sorted(seen)


def stage_package(dest: Path, package: str) -> Path:
    """Copy the worker side into ``dest/package`` (``__init__`` files empty unless the worker side
    imports from them), read-only for the sandbox."""
    root = Path(__file__).resolve().parent.parent
    mods = worker_modules()
    for rel in mods:
        target = dest / package / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target)
    for d in {Path(m).parent for m in mods} | {Path(".")}:
        init = dest / package / d / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text("")
    for p in [dest, *dest.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dest


def _dress_home(home: Path) -> None:
    """A lived-in home folder, as root's in a container image is: the shell's start-up files from
    ``/etc/skel`` (or Debian's defaults) and a ``.cache``; an empty home tells a sandbox."""
    for name in (".bashrc", ".profile"):
        skel = Path("/etc/skel") / name
        try:
            text = skel.read_text() if skel.is_file() else ("# ~/.bashrc\n" if name == ".bashrc" else
                                                             "# ~/.profile\nif [ -f ~/.bashrc ]; then . ~/.bashrc; fi\n")
            (home / name).write_text(text)
        except OSError:
            continue
    (home / ".cache").mkdir(exist_ok=True)
