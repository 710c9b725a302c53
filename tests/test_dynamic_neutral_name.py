"""The worker side imports under any top-level package name (the sandbox mounts it under a
neutral one), so nothing in the candidate's process is named or located after hackscan.

The hack it closes: ``any("hackscan" in m for m in sys.modules)`` or a look at
``sys.modules[...].__file__`` tells a candidate it is being checked.  The look-alike: the same
package imported as ``hackscan`` (the parent's view) still works, which every other test covers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import hackscan  # noqa: E402

PROBE = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
# what the interpreter loaded on its own (an editable install's path hook is named after the
# project: the sandbox's interpreter has no such install); what the worker side imports is judged
before = set(sys.modules)
import kbutil.dynamic.worker.candidate, kbutil.dynamic.worker.reference
from kbutil.dynamic.worker import perf  # noqa: F401  (imports the perf worker side)
# located after hackscan: loaded from the package's own folder (argv[2]).  Not the word anywhere in
# the path: a clone in a folder named hackscan (git's default) puts it in every path of its venv
src = os.path.realpath(sys.argv[2]) + os.sep
bad = sorted(n for n, m in list(sys.modules.items())
             if (n not in before or n.split(".")[0] == "hackscan")
             and ("hackscan" in n.lower() or os.path.realpath(str(getattr(m, "__file__", None) or "")).startswith(src)))
print(json.dumps({"bad": bad, "perf": "kbutil.perf.worker.measure" in sys.modules,
                  "watched": [w for w in sys.modules["kbutil.perf.worker.clock"].WATCHED if w.startswith("kbutil.")]
                  if "kbutil.perf.worker.clock" in sys.modules else None}))
"""


def test_worker_side_imports_under_a_neutral_name_with_no_hackscan_module(tmp_path: Path) -> None:
    src = Path(hackscan.__file__).parent
    shutil.copytree(src, tmp_path / "kbutil", ignore=shutil.ignore_patterns("__pycache__"))
    # the copy first on the path; -I keeps PYTHONPATH and the user's site out.  The editable
    # install can still resolve "hackscan" if anything asks for it by name: the module list below
    # is what shows whether anything did
    out = subprocess.run([sys.executable, "-I", "-c", PROBE, str(tmp_path), str(src)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["bad"] == [], result["bad"]
    assert result["perf"], "the perf worker side did not import under the neutral name"
    # the perf clock watches its own functions under the name it was imported as
    assert result["watched"] and all(w.startswith("kbutil.perf.worker.") for w in result["watched"])
