"""A candidate's functions keep their source inside the worker (``@triton.jit`` needs it).

The worker runs in a private temporary directory, so the candidate's path, usually relative to
where the user ran hackscan, names no file there.  ``inspect.getsource`` must still work: Triton's
``@jit`` reads its function's source and refused every Triton candidate on an H200 before this.
"""

from __future__ import annotations

import inspect
import os

import pytest

from hackscan.dynamic.worker.base import import_source

CODE = '''
def kernel(x_ptr, n):
    """a stand-in for a @triton.jit function"""
    return n + 1


SOURCE = None
'''


def test_source_of_a_candidate_function_is_found_from_another_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # as the worker does: the relative path below names no file here
    path = "kernels/softmax/candidate_that_is_elsewhere.py"
    assert not os.path.exists(path)
    mod = import_source(CODE, path, "hackscan_test_candidate_src")
    src = inspect.getsource(mod.kernel)
    assert src.startswith("def kernel(x_ptr, n):") and "return n + 1" in src
    assert inspect.getsourcefile(mod.kernel) == path


def test_without_the_entry_the_lookup_fails(tmp_path, monkeypatch) -> None:
    # the control: compiling under a path that names no file loses the source
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(CODE, "no/such/file_for_hackscan.py", "exec"), ns)  # noqa: S102
    with pytest.raises(OSError):
        inspect.getsource(ns["kernel"])
