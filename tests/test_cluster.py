"""`--ray ADDRESS`: each candidate's dynamic stage as a Ray task, on a local cluster on the loopback
address here; the reports equal a local run's.  Skipped where ray is not installed (the ray extra)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from hackscan.config import Config
from hackscan.inputs import InputOptions, discover
from hackscan.pipeline import ResultStream, RunOptions, run_resumable
from hackscan.resume import load_done

from .conftest import FIXTURES

RELU = FIXTURES / "dynamic" / "relu"
CPP = FIXTURES / "dynamic" / "cpp"
# times, and whether a build compiled or hit the build cache (the run that comes first compiles,
# the other finds its build): neither says anything about the candidate
_VOLATILE = re.compile(r"(_s|_ms|_mb)$|^(timings|seconds|t32|t64|compiled)$")


def _stable(value):
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if not _VOLATILE.search(k)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def test_without_ray_the_option_says_how_to_get_it(monkeypatch) -> None:
    import importlib.util

    from hackscan.cluster import INSTALL_HINT, ray_problem

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    assert ray_problem("auto") == INSTALL_HINT
    assert "needs an address" in ray_problem(" ")


def test_an_unreachable_cluster_keeps_every_static_result_and_fails_closed(tmp_path) -> None:
    """A cluster that takes no connection: refused in seconds (Ray itself retried such an address for
    twelve minutes), each candidate keeps its static findings, and its dynamic stage is marked as
    failed with one line (exit 2), never passed on the static verdict alone."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("torch")
    if ray.is_initialized():
        pytest.skip("a cluster is already joined in this process")
    import time

    from hackscan.cluster import run_on_ray
    from hackscan.model import Verdict
    from hackscan.pipeline import failed_reports

    (tmp_path / "reference.py").write_text((RELU / "reference.py").read_text())
    (tmp_path / "hack_inplace.py").write_text((RELU / "hack_inplace.py").read_text())
    items = list(discover([str(tmp_path)], InputOptions()))
    t0 = time.monotonic()
    reports, _ = run_on_ray("127.0.0.1:1", items, Config(), RunOptions(device="cpu", seed=1), {})
    assert time.monotonic() - t0 < 30
    (rep,) = [r for r in reports if r.path.endswith("hack_inplace.py")]
    assert rep.verdict is Verdict.ERROR and rep.findings, rep  # the static findings are kept
    assert "cannot join the Ray cluster at 127.0.0.1:1" in rep.dynamic["reason"]
    assert failed_reports(reports) == [rep]
    assert not ray.is_initialized()


def test_a_local_token_is_presented_to_an_explicit_address(tmp_path, monkeypatch) -> None:
    """``ray start --head`` uses token authentication when a token exists; ``ray.init`` presents it
    only for ``auto``: hackscan presents it for ``host:port`` too, and leaves a mode the user set."""
    pytest.importorskip("ray")
    from hackscan import cluster

    token = tmp_path / "auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    cluster._auth_for("127.0.0.1:6379")
    assert "RAY_AUTH_MODE" not in os.environ  # no token here: nothing to present
    token.write_text("a" * 64)
    cluster._auth_for("127.0.0.1:6379")
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    cluster._auth_for("127.0.0.1:6379")
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: its start-up (seconds) stays out of every other test."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("torch")
    from hackscan.cluster import connect

    connect("local", num_cpus=2)
    yield ray
    ray.shutdown()


def _items(tmp_path: Path):
    folder = tmp_path / "relu"
    folder.mkdir()
    for name in ("reference.py", "legit.py", "hack_inplace.py"):
        (folder / name).write_text((RELU / name).read_text())
    cpp = tmp_path / "cpp"
    cpp.mkdir()
    for name in ("reference.py", "legit_loop_matmul.py"):
        (cpp / name).write_text((CPP / name).read_text())
    return list(discover([str(folder), str(cpp), str(tmp_path / "missing.py")], InputOptions()))


@pytest.mark.slow
def test_a_ray_run_streams_resumes_and_equals_a_local_run(cluster, tmp_path) -> None:
    from hackscan.cluster import run_on_ray

    items = _items(tmp_path)
    opts = RunOptions(device="cpu", seed=11, perf=False)
    local, _ = run_resumable(items, Config(), opts, {})
    verdicts = {r.verdict.value for r in local}
    assert {"hack", "error"} <= verdicts and verdicts & {"clean", "suspicious"}
    stream = tmp_path / "s.jsonl"
    sink = ResultStream(str(stream))
    remote, reused = run_on_ray("local", items, Config(), opts, {}, sink)
    sink.close()
    assert reused == 0
    assert _stable([r.to_dict() for r in remote]) == _stable([r.to_dict() for r in local])
    not_run = [(r.path, r.dynamic) for r in remote if not r.path.endswith("missing.py")
               and not (r.dynamic and r.dynamic.get("ran"))]
    assert not not_run, not_run
    # everything is on the stream: a resumed Ray run submits nothing
    again, reused = run_on_ray("local", items, Config(), opts, load_done(str(stream)))
    assert reused == len(items) and [r.to_dict() for r in again] == [r.to_dict() for r in remote]


@pytest.mark.slow
def test_the_command_on_ray_writes_the_report_a_local_run_writes(cluster, tmp_path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app

    folder = tmp_path / "relu"
    folder.mkdir()
    for name in ("reference.py", "legit.py", "hack_output_reuse.py"):
        (folder / name).write_text((RELU / name).read_text())
    docs = []
    for extra in ([], ["--ray", "local"]):
        out = tmp_path / f"r{len(docs)}.json"
        res = CliRunner().invoke(app, ["scan", str(folder), "--device", "cpu", "--no-perf", "--seed", "5", "-f", "json",
                                       "-o", str(out), "--fail-on", "never", "--no-progress", *extra])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(out.read_text()))
    assert _stable(docs[0]) == _stable(docs[1])
