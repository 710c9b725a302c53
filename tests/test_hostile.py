"""Hostile candidates against the dynamic stage (issue 13): the sandbox and the fail-closed verdict.

Each fixture in ``fixtures/hostile/`` is a ModelNew for the ReLU reference written by an adversary.
Those whose own kernel is 1% low can pass only through their attack (reading other processes'
memory, forging the worker's replies, rewriting the worker, killing the reference, detecting the
harness, reading files), so the verdict must reject.  Those whose harm is a side effect (writes,
sockets, memory held by children, daemons, terminal escapes) are checked for that effect.  A
benign candidate runs in the same suite so that the sandbox is also held to no false rejection.

The static rule families (HS1, HS2, HS3) are ignored throughout: several of them flag these files
on sight (ctypes, sys.modules, frame walks, subprocess), and the suite must prove what the
dynamic stage guarantees when static analysis is evaded, not what the static stage catches.

Side-effect fixtures take the paths, port and token they use by text substitution of ``@@NAME@@``
placeholders (the sandbox may clear the environment), and do nothing when left unsubstituted.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("numpy")

from hackscan.config import Config  # noqa: E402
from hackscan.engine import StaticScanner  # noqa: E402
from hackscan.inputs import Submission  # noqa: E402
from hackscan.model import Report, Verdict  # noqa: E402
from hackscan.pipeline import RunOptions  # noqa: E402

from .conftest import FIXTURES, ROOT  # noqa: E402

HOSTILE = FIXTURES / "hostile"
REFERENCE_FILE = HOSTILE / "reference.py"
REFERENCE = REFERENCE_FILE.read_text()
SEED = 1313
TIMEOUT = 20.0
# the dynamic stage alone decides (see the module docstring); meta and dynamic rules stay on
DYNAMIC_ONLY = Config(ignore=("HS1", "HS2", "HS3"))
REJECTED = (Verdict.HACK, Verdict.ERROR)
EXT_CACHE = Path(os.environ.get("HACKSCAN_CACHE_DIR") or Path.home() / ".cache" / "hackscan") / "ext"


@pytest.fixture(scope="module")
def pool():
    from hackscan.dynamic.pool import WorkerPool

    p = WorkerPool()
    yield p
    p.close()


def _source(name: str, **subs: object) -> str:
    text = (HOSTILE / name).read_text()
    for key, value in subs.items():
        assert f"@@{key}@@" in text, f"{name} has no placeholder @@{key}@@"
        text = text.replace(f"@@{key}@@", str(value))
    return text


def _place(folder: Path, name: str, code: str) -> Path:
    """The candidate as a user's file, with the task's reference.py beside it (a user's tree)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(REFERENCE_FILE, folder / "reference.py")
    path = folder / name
    path.write_text(code)
    return path


def _scan(pool, path: Path, code: str | None = None, timeout: float = TIMEOUT, config: Config = DYNAMIC_ONLY,
          perf: bool = False, **extra) -> Report:
    from hackscan.dynamic import run_dynamic_stage

    code = path.read_text() if code is None else code
    sub = Submission(path=str(path), code=code, file=str(path), reference=REFERENCE,
                     reference_path=str(path.parent / "reference.py"))
    report = StaticScanner(config).scan(sub)
    opts = RunOptions(seed=SEED, perf=perf, timeout=timeout, device="cpu",
                      extra={"dynamic": extra} if extra else {})
    return run_dynamic_stage(sub, report, opts, config, pool=pool)


def _describe(report: Report) -> str:
    dyn = report.dynamic or {}
    lines = [f"verdict {report.verdict.value}; dynamic ran={dyn.get('ran')} reason={dyn.get('reason')!r}"]
    lines += [f"  {f.rule} [{f.severity.value}] {f.message[:200]!r}" for f in report.findings]
    return "\n".join(lines)


def _procs_with(token: str) -> list[int]:
    """Processes whose command line carries ``token`` (only the test's candidates put it there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_token(token: str) -> None:
    """Clean-up: end what a candidate of this test started, by pid, whatever the verdict said."""
    for pid in _procs_with(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# ------------------------------------------------------------------------------------ no false rejection
@pytest.mark.slow
@pytest.mark.parametrize("path", [HOSTILE / "benign.py", FIXTURES / "dynamic" / "relu" / "legit.py"],
                         ids=["benign", "relu-legit"])
def test_a_benign_candidate_stays_clean(pool, tmp_path, path) -> None:
    report = _scan(pool, _place(tmp_path, path.name, path.read_text()))
    assert (report.dynamic or {}).get("ran"), "no false rejection: the sandbox must still run a benign candidate\n" + \
        _describe(report)
    assert report.verdict is Verdict.CLEAN, "no false rejection: a benign candidate comes out clean\n" + \
        _describe(report)


# ------------------------------------------------------------------------------------ wrong unless the attack works
# fixture -> the guarantee a clean verdict would break
WRONG_UNLESS_ATTACK = {
    "proc_mem_parent.py": "the parent's memory is out of the candidate's reach (/proc/PID/mem of the hackscan parent)",
    "proc_mem_reference.py": "the reference worker's memory is out of the candidate's reach (/proc/PID/mem)",
    "forged_frames.py": "the parent only trusts results the checked model produced (no forged frames on the "
                        "worker's socket)",
    "sys_modules_worker.py": "the checking code is out of the candidate's reach (CandidateWorker rewritten through "
                             "sys.modules)",
    "kill_reference.py": "the reference worker cannot be killed by the candidate, and a stage that did not finish "
                         "rejects (fail closed)",
    "kill_zygote.py": "the worker server cannot be killed by the candidate, and a stage that did not finish "
                      "rejects (fail closed)",
    "raise_system_exit.py": "a candidate that raises SystemExit on every call never passes (fail closed)",
    "raise_keyboard_interrupt.py": "a candidate that raises KeyboardInterrupt on every call never passes "
                                   "(fail closed)",
    "detect_module_name.py": "the harness is undetectable: the candidate's module is not named hackscan_candidate",
    "detect_cwd.py": "the harness is undetectable: the working directory does not look like a hackscan worker's",
    "detect_sys_modules.py": "the harness is undetectable: no hackscan module is visible in the candidate's "
                             "sys.modules",
    "detect_env.py": "the harness is undetectable: no hackscan-specific environment variable reaches the candidate",
    "detect_frames.py": "the harness is undetectable: the candidate's caller frames do not name hackscan or the probe",
    "read_hackscan_source.py": "hackscan's own source is not readable from the sandbox",
    "rewrite_in_place.py": "the candidate process's rewritten worker code (its __code__, globals and module dict, "
                           "its own guard) cannot make wrong outputs pass: the parent compares them itself",
    "detect_referee.py": "the harness is undetectable: uid, hostname, environment, home, interpreter paths and the "
                         "extension build folder look like a container's KernelBench run",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WRONG_UNLESS_ATTACK), ids=lambda n: n[:-3])
def test_a_wrong_kernel_cannot_pass_through_its_attack(pool, tmp_path, name) -> None:
    path = _place(tmp_path / "user", name, _source(name))
    report = _scan(pool, path)
    assert report.verdict in REJECTED, f"{name}: {WRONG_UNLESS_ATTACK[name]}\n{_describe(report)}"


@pytest.mark.slow
def test_a_worker_rewritten_in_place_is_caught_by_the_outside_comparison(pool, tmp_path) -> None:
    # the guard is silenced too: what rejects must be the parent's own comparison of the outputs
    path = _place(tmp_path / "user", "rewrite_in_place.py", _source("rewrite_in_place.py"))
    report = _scan(pool, path)
    wrong = [f for f in report.findings if f.rule in ("HS401", "HS402", "HS403") and not f.suppressed]
    assert report.verdict is Verdict.HACK and wrong, ("the outputs compared in the parent reject a worker rewritten in "
                                                      "place\n" + _describe(report))
    changes = [f for f in report.findings if "harness code" in f.message]
    assert not changes, "the fixture must silence the in-process guard (else it tests the guard)\n" + _describe(report)


@pytest.mark.slow
def test_a_claimed_missing_driver_is_error_not_the_static_verdict(pool, tmp_path) -> None:
    path = _place(tmp_path / "user", "fake_no_driver.py", _source("fake_no_driver.py"))
    report = _scan(pool, path)
    dyn = report.dynamic or {}
    assert report.verdict is Verdict.ERROR and dyn.get("failed") and dyn.get("cannot_run_here"), (
        "a candidate that says it cannot run here (no CUDA driver) was not checked: error, never the static "
        "verdict\n" + _describe(report))


@pytest.mark.slow
def test_forged_extension_counts_never_soften_a_static_fallback(pool, tmp_path) -> None:
    from hackscan.model import Severity

    # the static fallback finding (HS108) stays on, as an error, beside the dynamic rules
    config = Config(select=("HS108", "HS4", "HS5"), severity={"HS108": Severity.ERROR})
    path = _place(tmp_path / "user", "forged_census.py", _source("forged_census.py"))
    report = _scan(pool, path, config=config)
    facts = (report.dynamic or {}).get("custom_code") or {}
    assert facts.get("called_on_every_probe"), ("the fixture's forgery must reach the parent (else this tests "
                                                "nothing)\n" + _describe(report) + f"\n{facts}")
    fallback = [f for f in report.findings if f.rule == "HS108"]
    assert fallback and all(f.severity is Severity.ERROR and not f.cleared_by for f in fallback), (
        "the candidate process's counts never soften a static finding\n" + _describe(report))
    assert report.verdict is Verdict.HACK, _describe(report)


@pytest.mark.slow
def test_forged_timings_are_floored_by_the_parents_clock(pool, tmp_path) -> None:
    # one pair of processes (quick), short rounds: enough paired blocks for the floor
    path = _place(tmp_path / "user", "forged_timing.py", _source("forged_timing.py"))
    report = _scan(pool, path, timeout=60.0, perf=True, perf_mode="quick", perf_budget_s=0.5,
                   perf_pair_cap_s=4.0)
    perf = report.performance or {}
    bound = (perf.get("paired") or {}).get("outside_bound") or {}
    assert bound.get("rounds", 0) >= 3, "the paired blocks were timed\n" + _describe(report) + f"\n{perf.get('paired')}"
    assert bound.get("contradicts") and any(f.rule == "HS609" for f in report.findings), (
        "claims far below the parent's clock are HS609\n" + _describe(report) + f"\n{bound}")
    head = perf.get("headline_speedup")
    assert head is not None and head < 1.0, (f"the speedup stated is the parent's, not the claimed one: {head}\n"
                                             + _describe(report))
    assert report.verdict in REJECTED, _describe(report)


@pytest.mark.slow
def test_the_users_files_are_not_readable(pool, tmp_path) -> None:
    token = uuid.uuid4().hex
    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(f"api-key {token}\n")
    path = _place(tmp_path / "user", "read_user_file.py",
                  _source("read_user_file.py", SECRET_PATH=secret, SECRET_TOKEN=token))
    report = _scan(pool, path)
    assert report.verdict in REJECTED, f"a file of the user's ({secret}) is not readable from the sandbox\n" + \
        _describe(report)


@pytest.mark.slow
def test_the_reference_file_beside_the_candidate_is_not_readable(pool, tmp_path) -> None:
    path = _place(tmp_path / "user", "read_reference.py", _source("read_reference.py"))
    report = _scan(pool, path)
    assert report.verdict in REJECTED, ("the user's tree (reference.py beside the candidate) is not readable from "
                                        "the sandbox\n" + _describe(report))


# ------------------------------------------------------------------------------------ side effects
@pytest.mark.slow
def test_no_file_is_written_outside_the_sandbox(pool, tmp_path) -> None:
    unique = f"hs-hostile-{uuid.uuid4().hex}"
    user = tmp_path / "user"
    markers = {
        "MARKER_TMP": Path("/tmp") / f"{unique}.marker",
        "MARKER_USER": tmp_path / f"{unique}.marker",
        "MARKER_CACHE": EXT_CACHE / unique / "marker",
    }
    own = user / f"{unique}.own"
    path = _place(user, "write_outside.py", _source("write_outside.py", MARKER_NAME=own.name, **markers))
    try:
        report = _scan(pool, path)
        written = [str(p) for p in [*markers.values(), own] if p.exists()]
        assert not written, f"no file is written outside the sandbox: the candidate wrote {written}\n" + \
            _describe(report)
    finally:
        markers["MARKER_TMP"].unlink(missing_ok=True)
        shutil.rmtree(EXT_CACHE / unique, ignore_errors=True)


@pytest.mark.slow
def test_no_socket_reaches_the_host(pool, tmp_path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    arrived: list[str] = []
    done = threading.Event()

    def accept() -> None:
        # accepted at once, so that a candidate's connect never waits on a full backlog
        while not done.is_set():
            try:
                conn, peer = listener.accept()
            except (TimeoutError, OSError):
                continue
            arrived.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    watcher = threading.Thread(target=accept, daemon=True)
    watcher.start()
    try:
        path = _place(tmp_path / "user", "loopback_socket.py", _source("loopback_socket.py", PORT=port))
        report = _scan(pool, path)
        time.sleep(0.3)
    finally:
        done.set()
        watcher.join(timeout=2.0)
        listener.close()
    assert not arrived, (f"no socket opened from the sandbox: the test's listener on 127.0.0.1:{port} got "
                         f"{len(arrived)} connection(s)\n" + _describe(report))


@pytest.mark.slow
def test_children_cannot_escape_the_memory_limit(pool, tmp_path) -> None:
    # a 1 GiB limit; three children of 640 MiB each hold about 1.9 GiB together
    token = f"hs-hostile-{uuid.uuid4().hex}"
    path = _place(tmp_path / "user", "memory_children.py",
                  _source("memory_children.py", TOKEN=token, CHILD_MB=640, HOLD_S=15))
    try:
        report = _scan(pool, path, memory_gb=1.0)
        left = _procs_with(token)
    finally:
        _kill_token(token)
    broken = []
    if report.verdict not in REJECTED:
        broken.append("the memory limit covers the candidate's children too: together they held about twice the "
                      "limit, and the verdict did not reject")
    if left:
        broken.append(f"no process left behind: the memory hogs {left} outlived the scan")
    assert not broken, "\n".join(broken) + "\n" + _describe(report)


@pytest.mark.slow
def test_no_daemon_outlives_the_scan(pool, tmp_path) -> None:
    token = f"hs-hostile-{uuid.uuid4().hex}"
    marker = tmp_path / f"{token}.daemon"
    delay = 3.0
    path = _place(tmp_path / "user", "setsid_daemon.py",
                  _source("setsid_daemon.py", TOKEN=token, MARKER=marker, DELAY_S=delay))
    try:
        report = _scan(pool, path)
        time.sleep(0.5)  # the sandbox's teardown
        left = _procs_with(token)
        time.sleep(delay + 1.0)  # past the daemon's delay: a survivor writes its marker now
        late = marker.exists()
    finally:
        _kill_token(token)
    broken = []
    if left:
        broken.append(f"no process left behind: the daemon {left} outlived the scan")
    if late:
        broken.append(f"no process left behind: the daemon wrote {marker} after the scan")
    assert not broken, "\n".join(broken) + "\n" + _describe(report)


# ------------------------------------------------------------------------------------ the command line
def _cli(*args: str, timeout: float = 150.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "hackscan", *args, "--device", "cpu", "--no-perf",
                           "--seed", str(SEED), "--timeout", str(TIMEOUT), "--ignore", "HS1", "--ignore", "HS2",
                           "--ignore", "HS3"],
                          capture_output=True, text=True, errors="replace", timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.slow
def test_terminal_escapes_never_reach_the_text_report(tmp_path) -> None:
    path = _place(tmp_path / "user", "terminal_escape.py", _source("terminal_escape.py"))
    # --no-color: an ESC in the report can then only come from the candidate's message
    run = _cli(str(path), "--ref", str(path.parent / "reference.py"), "--no-color", "-f", "text")
    broken = []
    if "\x1b" in run.stdout:
        broken.append("no raw ESC from a candidate's message reaches the text report")
    if run.returncode != 1:
        broken.append(f"the CLI rejects a candidate that never returns a result (exit code {run.returncode}, not 1)")
    assert not broken, "\n".join(broken) + "\n" + ascii(run.stdout[-1500:]) + run.stderr[-1000:]


@pytest.mark.slow
def test_the_command_line_fails_closed_when_the_reference_is_killed(tmp_path) -> None:
    path = _place(tmp_path / "user", "kill_zygote.py", _source("kill_zygote.py"))
    run = _cli(str(path), "--ref", str(path.parent / "reference.py"), "--no-color", "-f", "text")
    assert run.returncode != 0, ("the CLI's exit code is non-zero when the dynamic stage could not finish "
                                 f"(fail closed), got {run.returncode}:\n" + run.stdout[-2000:] + run.stderr[-1000:])


# ------------------------------------------------------------------------------------ the parent's own walls
# Attacks on the parent itself (a worker's channel, its log, its build folders, the static stage),
# run at the parent's code paths directly: a fake worker writes the fixture's hostile frames into a
# socket the parent reads, with no sandbox or torch start.  Each fixture does its attack at import
# only when armed (``@@ARM@@``); unarmed, it is imported here for its frames and helpers.
def _fixture(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"hostile_{name}", HOSTILE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Limit:
    def oom_kills(self) -> int:
        return 0


class _FakeHandle:
    """What a ``Session`` asks of a sandbox, for a fake worker that is a socket in this process."""

    def __init__(self, private: Path | None = None, status: int | None = 9):
        self.limit = _Limit()
        self.private = private
        self._disk_at = 0.0
        self.status = status
        self.killed = False

    def rss(self) -> int:
        return 0

    def disk_over(self):
        if self.private is None:
            return None
        from hackscan.dynamic.sandbox import Handle

        return Handle.disk_over(self)

    def kill(self) -> None:
        self.killed = True

    def exit_status(self, wait: float = 1.0):
        return self.status

    def destroy(self) -> None:
        pass


def _session(tmp_path: Path, timeout: float, handle: _FakeHandle | None = None, log: Path | None = None):
    from hackscan.dynamic.session import Session

    ours, theirs = socket.socketpair()
    log = log or tmp_path / "worker.log"
    log.touch()
    s = Session(None, -1, ours, log, timeout, None, handle=handle or _FakeHandle())
    s.pending = True
    return s, theirs


def _recv_failure_peak(sess):
    """The failure the parent's ``recv`` ends in, and the peak of the parent's heap meanwhile."""
    import tracemalloc

    from hackscan.dynamic.session import WorkerFailure

    tracemalloc.start()
    try:
        with pytest.raises(WorkerFailure) as info:
            sess.recv()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return info, peak


def test_a_huge_frame_header_reserves_only_what_arrives(tmp_path, monkeypatch) -> None:

    from hackscan.dynamic import spill

    monkeypatch.setenv("HACKSCAN_SPILL_DIR", str(tmp_path / "spill"))
    fx = _fixture("huge_frame_header")
    sess, worker = _session(tmp_path, timeout=1.5)
    for frame in fx.frames():
        worker.sendall(frame)
    info, peak = _recv_failure_peak(sess)
    assert info.value.kind == "timeout", info.value.describe()
    # the announced 30 GiB: neither the heap nor the spill file took more than what was sent
    assert peak < 8 << 20, f"the parent allocated {peak >> 20} MiB for a frame of {fx.SENT} bytes sent"
    sink = sess.reader._payload
    assert isinstance(sink, spill.FileSink) and sink.got == fx.SENT
    assert os.fstat(sink.fd).st_blocks * 512 <= 1 << 20, "the spill file was reserved ahead of the data"
    worker.close()


def test_a_frame_fitting_neither_disk_nor_memory_is_refused_before_it_is_read(tmp_path, monkeypatch) -> None:
    from hackscan.dynamic import spill
    from hackscan.dynamic.session import WorkerFailure

    monkeypatch.setenv("HACKSCAN_SPILL_DIR", str(tmp_path / "no" / "such"))
    monkeypatch.setattr(spill, "spill_dir", lambda: Path("/proc/no-spill-here"))
    monkeypatch.setattr(spill, "MEMORY_FRAME_BYTES", 1 << 30)
    sess, worker = _session(tmp_path, timeout=5.0)
    worker.sendall(_fixture("huge_frame_header").frames()[0])
    t = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        sess.recv()
    assert info.value.kind == "protocol" and "fits neither" in str(info.value), info.value.describe()
    assert time.monotonic() - t < 3.0
    worker.close()


@pytest.mark.parametrize("index", range(10))
def test_a_malformed_frame_is_the_workers_fault(tmp_path, index) -> None:
    """A frame the candidate caused is a protocol failure of its worker (HS411 in the stage),
    never an exception of the parent's own (an internal error, exit 2)."""
    from hackscan.dynamic.session import WorkerFailure

    frames = _fixture("malformed_frames").frames()
    sess, worker = _session(tmp_path, timeout=5.0)
    worker.sendall(frames[index])
    with pytest.raises(WorkerFailure) as info:
        sess.recv()
    assert info.value.kind == "protocol", info.value.describe()
    worker.close()


def test_a_protocol_failure_of_the_candidate_is_a_forged_reply_finding() -> None:
    from hackscan.dynamic.session import WorkerFailure
    from hackscan.dynamic.stage import DynamicRun

    class _Run:
        seed = 1

        def make(self, rule, message, evidence, **kw):
            return rule

    exc = WorkerFailure("protocol", "the worker sent a malformed frame: a bare NaN in a frame")
    assert DynamicRun._crash_finding(_Run(), exc, "loading") == "HS411"


def test_build_notices_cannot_extend_the_candidates_wall_clock(tmp_path) -> None:
    from hackscan.dynamic.session import WorkerFailure

    fx = _fixture("clock_forward")
    sess, worker = _session(tmp_path, timeout=1.0)
    sess.compile_allowance = 1000.0  # a build may take long: only the wall deadline is left to end it
    sess.bound(2.5)
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            try:
                for frame in fx.frames():
                    worker.sendall(frame)
            except OSError:
                return
            time.sleep(0.05)

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    start = time.monotonic()
    try:
        with pytest.raises(WorkerFailure) as info:
            sess.recv()
        # restarting the clock later does not move the wall deadline either
        sess.dead = None
        sess.restart_clock(3600.0)
        assert sess.deadline <= sess.wall_deadline
    finally:
        stop.set()
        worker.close()
        t.join(5)
    elapsed = time.monotonic() - start
    assert info.value.kind == "timeout" and "wall-clock deadline" in str(info.value), info.value.describe()
    assert elapsed < 2.5 + 1.0, f"the worker ran {elapsed:.1f} s past a 2.5 s wall deadline"


def test_a_future_stamp_is_held_to_now(tmp_path) -> None:
    sess, worker = _session(tmp_path, timeout=5.0)
    sess.compile_allowance = 10.0
    before = time.monotonic()
    sess._progress({"build": "start", "at": before + 1e9})
    assert sess.deadline <= time.monotonic() + 10.0 + 0.01
    for bad in (float("nan"), float("inf"), "later", None, [1]):
        sess._progress({"build": "end", "at": bad})
        sess._progress({"build": "start", "at": bad})
        assert sess.deadline == sess.deadline and sess.deadline < time.monotonic() + 11.0
    worker.close()


def test_a_dying_workers_huge_log_is_read_by_its_tail(tmp_path) -> None:


    fx = _fixture("loud_death")
    log = tmp_path / "worker.log"
    with open(log, "wb") as fh:
        fx.shout(fh.fileno(), 3 << 30)  # sparse: 3 GiB long, nothing on disk
    sess, worker = _session(tmp_path, timeout=5.0, log=log, handle=_FakeHandle(status=9))
    worker.close()  # the worker dies
    info, peak = _recv_failure_peak(sess)
    assert fx.LAST_WORDS in info.value.log_tail
    assert peak < 8 << 20, f"the parent took {peak >> 20} MiB to show the tail of a 3 GiB log"


def test_a_full_private_tmp_stops_the_worker(tmp_path, monkeypatch) -> None:
    from hackscan.dynamic.session import WorkerFailure

    monkeypatch.setenv("HACKSCAN_SANDBOX_DISK", str(8 << 20))
    private = tmp_path / "private"
    (private / "tmp").mkdir(parents=True)
    _fixture("fill_disk").fill(str(private / "tmp"), 16 << 20)
    sess, worker = _session(tmp_path, timeout=10.0, handle=_FakeHandle(private=private))
    t = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        sess.recv()
    assert info.value.kind == "disk" and "over the" in str(info.value), info.value.describe()
    assert time.monotonic() - t < 3.0
    worker.close()


def test_the_sandbox_caps_every_file_it_writes(monkeypatch) -> None:
    """RLIMIT_FSIZE is set in the process that becomes the sandbox (its log is capped with it)."""

    from hackscan.dynamic import sandbox

    monkeypatch.setenv("HACKSCAN_SANDBOX_DISK", str(16 << 20))
    seen = {}

    class _L:
        def join_fn(self):
            return lambda: None

    class _Fake(sandbox.Launcher):
        def __init__(self):
            self._bpf_path = None

        def _command(self, private):
            return []

        def _popen(self, cmd, **kw):
            # the preexec in a child of its own, as Popen runs it
            probe = "import resource; print(*resource.getrlimit(resource.RLIMIT_FSIZE))"
            seen["out"] = subprocess.run([sys.executable, "-c", probe], preexec_fn=kw["preexec_fn"],
                                         capture_output=True, text=True, timeout=60).stdout.split()
            return None

    _Fake()._launch(Path("/nonexistent"), _L(), ["x"], [], None)
    assert seen["out"] == [str(16 << 20)] * 2, seen


@pytest.mark.parametrize("whole", [False, True], ids=["links-inside", "whole-folder-a-link"])
def test_the_harvest_follows_no_link_out_of_the_sandbox(tmp_path, whole) -> None:
    from hackscan.dynamic.sandbox import BuildCache, _ext_rel

    target = tmp_path / "host"
    target.mkdir()
    secret = b"host secret " + uuid.uuid4().hex.encode()
    (target / "secret.txt").write_bytes(secret)
    # what a link to the host would bring in: a finished-looking build of another source
    (target / "other_0123").mkdir()
    (target / "other_0123" / "other.so").write_bytes(b"\x7fELF" + secret)
    private = tmp_path / "private"
    (private / "tmp").mkdir(parents=True)
    # a plain finished build beside the lures: still kept (no false rejection)
    ext = private.joinpath("home", ".cache", "torch_extensions", _ext_rel(private)[-1])  # the worker's build folder
    plain = ext / "plain_0123"
    plain.mkdir(parents=True)
    (plain / "plain.so").write_bytes(b"\x7fELF plain")
    (plain / "build.ninja").write_text("rule cxx\n")
    os.utime(plain / "plain.so", ns=(2_000_000_000 * 10**9, 2_000_000_000 * 10**9))  # newer than its inputs
    (plain / "src").mkdir()  # ``load`` pins its sources here
    (plain / "src" / "k.cpp").write_text("int k;\n")
    os.symlink(target, plain / "src" / "up")
    _fixture("harvest_link").plant(str(ext), str(target), whole=whole)
    cache = BuildCache(tmp_path / "cache")
    out = cache.harvest("k", private, rel=_ext_rel(private))
    root = tmp_path / "cache" / "sandboxed" / "k" / "ext"
    got = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) if root.exists() else []
    for p in root.rglob("*") if root.exists() else []:
        assert not p.is_symlink(), f"a link reached the cache: {p}"
        if p.is_file():
            assert secret not in p.read_bytes(), f"host bytes reached the cache: {p}"
    if whole:
        assert got == [], f"the cache took {got} through a linked build folder"
    else:
        # the lure's own regular .so is a build of this source: kept, its links are not
        assert got == ["lure_0123456789", "lure_0123456789/lure.so", "plain_0123", "plain_0123/build.ninja",
                       "plain_0123/plain.so", "plain_0123/src", "plain_0123/src/k.cpp"], got
        # the build's times kept: ninja would rebuild a .so older than its sources
        assert (root / "plain_0123" / "plain.so").stat().st_mtime_ns == 2_000_000_000 * 10**9
        refused = {r["name"]: r["why"] for r in out["refused"]}
        assert "other_source_builds" in refused and "big_0123456789" in refused, out


def test_the_static_stage_ends_on_constant_string_arithmetic(monkeypatch) -> None:
    """The resolver's bounds (sizes and work) end the scan; the deadline stays unused."""
    from hackscan.config import Config as _Config

    monkeypatch.setenv("HACKSCAN_STATIC_DEADLINE", "60")
    path = HOSTILE / "static_blowup.py"
    t = time.monotonic()
    report = StaticScanner(_Config()).scan(Submission(path=str(path), code=path.read_text(), file=str(path)))
    elapsed = time.monotonic() - t
    assert report.verdict is not Verdict.ERROR, report.error
    assert any(f.rule == "HS002" and "too large" in f.message for f in report.findings), \
        [f.message for f in report.findings]
    assert elapsed < 20.0, f"{elapsed:.1f} s"


def test_a_static_deadline_ends_one_submission_alone(monkeypatch) -> None:
    from hackscan.config import Config as _Config
    from hackscan.python import resolve

    monkeypatch.setenv("HACKSCAN_STATIC_DEADLINE", "1")
    original = resolve.Resolver._eval

    def slow(self, e, *a):
        if isinstance(e, __import__("ast").Constant) and e.value == "// pad\n":
            time.sleep(30)
        return original(self, e, *a)

    monkeypatch.setattr(resolve.Resolver, "_eval", slow)
    blow, benign = HOSTILE / "static_blowup.py", HOSTILE / "benign.py"
    scanner = StaticScanner(_Config())
    t = time.monotonic()
    # a text of its own: the parse and the facts of a file scanned before are cached by its text
    code = blow.read_text() + f"# {uuid.uuid4().hex}\n"
    first = scanner.scan(Submission(path=str(blow), code=code, file=str(blow)))
    assert time.monotonic() - t < 5.0
    assert first.verdict is Verdict.ERROR and "deadline" in (first.error or ""), first.error
    second = scanner.scan(Submission(path=str(benign), code=benign.read_text(), file=str(benign)))
    assert second.verdict is not Verdict.ERROR


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "json", "sarif"])
def test_invisible_characters_never_reach_a_report_raw(fmt) -> None:
    from hackscan.model import Confidence, Finding, Location, Severity, Stage
    from hackscan.output import render

    message = _fixture("invisible_text").MESSAGE
    f = Finding(rule="HS408", name="does-not-run", severity=Severity.ERROR, confidence=Confidence.HIGH,
                message=f"ModelNew raises RuntimeError: {message}", location=Location("c.py", 1, 1),
                stage=Stage.DYNAMIC, evidence={"exception": message})
    out = render([Report(path="c.py", verdict=Verdict.HACK, findings=(f,), error=message)], fmt)
    raw = [hex(ord(c)) for c in set(out) if c in "\u200b\u2060\u00ad" or 0xE0000 <= ord(c) <= 0xE007F]
    assert not raw, f"{fmt}: raw invisible characters {sorted(raw)[:6]}"


# ------------------------------------------------------------------------------------ fail closed on a missing wall
def _no_seccomp(monkeypatch) -> None:
    from hackscan.dynamic import sandbox

    facts = dict(sandbox.check(), seccomp=False, seccomp_problem="ModuleNotFoundError: No module named 'pyseccomp'")
    facts.pop("problem", None)
    monkeypatch.setattr(sandbox, "check", lambda: facts)


def test_sandbox_required_fails_closed_without_the_syscall_filter(monkeypatch, tmp_path) -> None:
    from typer.testing import CliRunner

    from hackscan.cli import app
    from hackscan.dynamic import sandbox

    _no_seccomp(monkeypatch)
    path = _place(tmp_path / "user", "benign.py", _source("benign.py"))
    run = CliRunner().invoke(app, [str(path), "--ref", str(path.parent / "reference.py"), "--device", "cpu"])
    lines = [ln for ln in run.output.splitlines() if ln.strip()]
    assert run.exit_code == 2, run.output
    assert len(lines) == 1 and "--sandbox required" in lines[0] and "seccomp" in lines[0], run.output
    # the library refuses as well (a pipeline that builds its own pool), before any sandbox starts
    with pytest.raises(sandbox.SandboxUnavailable, match="syscall filter"):
        sandbox.Launcher("cpu", tmp_path, mode="required")


def test_a_weaker_sandbox_is_asked_for_by_name_and_said_on_every_run(monkeypatch, capsys) -> None:
    """The CLI calls this on every run that runs candidates (not ``--static``), before any."""
    from hackscan.cli import _sandbox_walls

    _no_seccomp(monkeypatch)
    for mode, words in (("no-seccomp", "without its syscall filter"), ("off", "no sandbox at all")):
        _sandbox_walls(mode)
        err = capsys.readouterr().err
        assert err.startswith(f"hackscan: warning: --sandbox {mode}: ") and words in err, err


@pytest.mark.slow
def test_a_malformed_frame_from_a_sandboxed_candidate_rejects_it(pool, tmp_path) -> None:
    """End to end, once: the candidate's own frame on its worker's channel is its fault (a
    rejection), not an internal error of hackscan's."""
    path = _place(tmp_path / "user", "malformed_frames.py", _source("malformed_frames.py", ARM="yes"))
    report = _scan(pool, path)
    assert report.verdict is Verdict.HACK, _describe(report)
    assert "internal error" not in (report.error or "") and "internal error" not in _describe(report)
