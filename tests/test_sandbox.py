"""The walls of the sandbox every worker runs in (hackscan/dynamic/sandbox.py), proved from inside.

Each test runs a Python snippet in a fresh sandbox made exactly as a worker's (``Launcher.probe``:
same namespaces, binds, uid, seccomp filter and tree limits) and checks what it could reach.  The
end-to-end attacks (hostile candidates through the whole dynamic stage) are in test_hostile.py.
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
import time

import pytest

from hackscan.dynamic import sandbox, staging

pytestmark = pytest.mark.skipif(bool(sandbox.check().get("problem")),
                                reason=f"no sandbox here: {sandbox.check().get('problem')}")


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    la = sandbox.Launcher("cpu", tmp_path_factory.mktemp("sbx-logs"), warm=False)
    yield la
    la.close()


def _probe(launcher, body: str, **kw) -> dict:
    code = "import json, os, sys\nout = {}\n" + textwrap.dedent(body) + "\nprint('RESULT=' + json.dumps(out))\n"
    rc, text = launcher.probe(code, **kw)
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT=")]
    assert lines, f"the snippet did not finish (exit {rc}): {text[-2000:]}"
    return json.loads(lines[-1][len("RESULT="):])


def test_no_other_process_is_visible_and_the_uid_is_not_root(launcher) -> None:
    out = _probe(launcher, """
        pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
        out['pids'] = pids
        cmds = []
        for p in pids:
            try:
                cmds.append(open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\\0', b' ').decode())
            except OSError:
                pass
        out['cmds'] = cmds
        out['uid'] = os.getuid()
        out['euid'] = os.geteuid()
        out['caps'] = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]
        out['nnp'] = [l for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0].split()[1]
    """)
    assert max(out["pids"]) < 10, f"processes outside the sandbox are visible: {out['pids']}"
    assert os.getpid() not in out["pids"] or max(out["pids"]) < 10
    assert not any("pytest" in c or "hackscan" in c for c in out["cmds"]), out["cmds"]
    assert int(out["caps"], 16) == 0, f"capabilities inside: {out['caps']}"
    assert out["nnp"] == "1", "no_new_privs is not set"
    if os.geteuid() == 0:
        # inside the user namespace the uid may read as anything, but the kernel's view is the
        # sandbox's own unprivileged uid: seen from here, every process in it belongs to that uid
        assert out["uid"] != 0 or out["euid"] != 0 or True


def test_the_process_runs_as_its_own_uid_seen_from_the_host(launcher, tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("uid switching needs root")
    import subprocess
    import threading

    marker = f"uid-probe-{os.urandom(4).hex()}"
    seen: list[int] = []

    def watch() -> None:
        end = time.monotonic() + 20
        while time.monotonic() < end and not seen:
            for p in os.listdir("/proc"):
                if not p.isdigit():
                    continue
                try:
                    if marker.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                        seen.append(os.stat(f"/proc/{p}").st_uid)
                except OSError:
                    pass
            time.sleep(0.05)

    t = threading.Thread(target=watch)
    t.start()
    launcher.probe(f"import time; time.sleep(3)  # {marker}")
    t.join()
    assert seen, "the probe process was never seen"
    assert all(u != 0 for u in seen), f"the sandboxed process runs as root on the host: {seen}"
    del subprocess


def test_no_network_not_even_loopback(launcher) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    out = _probe(launcher, f"""
        import socket
        try:
            socket.create_connection(('127.0.0.1', {port}), timeout=2).close()
            out['connect'] = 'ok'
        except OSError as e:
            out['connect'] = repr(e)
        try:
            socket.getaddrinfo('pypi.org', 443)
            out['dns'] = 'ok'
        except OSError as e:
            out['dns'] = repr(e)
    """)
    try:
        conn, _ = srv.accept()
        conn.close()
        arrived = True
    except (TimeoutError, OSError):
        arrived = False
    srv.close()
    assert out["connect"] != "ok" and not arrived, "the sandbox reached a loopback listener outside it"
    assert out["dns"] != "ok"


def test_the_users_files_and_hackscans_source_are_out_of_sight(launcher, tmp_path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the reference outputs")
    import hackscan

    src = os.path.dirname(hackscan.__file__)
    out = _probe(launcher, f"""
        out['secret'] = os.path.exists({str(secret)!r})
        out['engine'] = os.path.exists({os.path.join(src, 'engine.py')!r})
        out['cwd_files'] = sorted(os.listdir('.'))
        out['home'] = os.path.expanduser('~')
        out['home_files'] = os.listdir(out['home'])
        out['root'] = sorted(os.listdir('/'))
        out['modules'] = sorted(m for m in sys.modules if 'hackscan' in m)
        try:
            open('/usr/hs-write-test', 'w').write('x')
            out['usr_write'] = True
        except OSError:
            out['usr_write'] = False
        try:
            open('/etc/shadow').read()
            out['shadow'] = True
        except OSError:
            out['shadow'] = False
    """)
    assert not out["secret"], "a file of the user's is readable from the sandbox"
    assert not out["engine"], "hackscan's source (the rules, the judge) is readable from the sandbox"
    assert not out["usr_write"], "the system is writable from the sandbox"
    assert not out["shadow"]
    # a lived-in home as a container's root has (sandbox._dress_home), nothing of the user's
    assert set(out["home_files"]) <= {".bashrc", ".profile", ".cache"}, out["home_files"]
    assert not out["modules"]
    assert "work" not in out["root"], out["root"]


def test_writes_stay_in_the_private_tmp(launcher) -> None:
    name = f"hs-escape-{os.urandom(4).hex()}"
    _probe(launcher, f"""
        for d in ('/tmp', os.path.expanduser('~'), '.'):
            try:
                open(os.path.join(d, {name!r}), 'w').write('x')
            except OSError:
                pass
    """)
    assert not os.path.exists(os.path.join("/tmp", name))
    assert not os.path.exists(os.path.join(os.path.expanduser("~"), name))
    assert not os.path.exists(name)


def test_the_environment_is_cleared(launcher, monkeypatch) -> None:
    out = _probe(launcher, "out['env'] = dict(os.environ); out['argv'] = sys.argv; out['cwd'] = os.getcwd(); "
                           "out['flags'] = [sys.flags.isolated, sys.flags.no_site, sys.flags.ignore_environment]")
    env = out["env"]
    leaked = [k for k in env if k.startswith(("PYTEST", "HACKSCAN", "VIRTUAL_ENV", "SSH", "GIT"))]
    assert not leaked, f"the parent's environment leaks into the sandbox: {leaked}"
    assert not any("hackscan" in str(v).lower() for v in env.values()), env
    assert "hackscan" not in out["cwd"].lower()
    assert out["flags"] == [0, 0, 0], f"the interpreter's flags tell a sandbox from a harness: {out['flags']}"


def test_seccomp_refuses_tracing_and_reading_other_processes(launcher) -> None:
    if not sandbox.check().get("seccomp"):
        pytest.skip(sandbox.check().get("seccomp_problem", "no seccomp"))
    out = _probe(launcher, """
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        r = libc.ptrace(0, 0, None, None)           # PTRACE_TRACEME
        out['ptrace'] = (r, ctypes.get_errno())
        r = libc.syscall(310, 1, None, 0, None, 0, 0)  # process_vm_readv (x86-64)
        out['vm_readv'] = (r, ctypes.get_errno())
        r = libc.unshare(0x10000000)                # CLONE_NEWUSER
        out['unshare'] = (r, ctypes.get_errno())
    """)
    import errno

    assert out["ptrace"] == [-1, errno.EPERM], out
    assert out["vm_readv"] == [-1, errno.EPERM], out
    assert out["unshare"][0] == -1, out


def test_the_memory_limit_covers_the_whole_process_tree(launcher) -> None:
    # three children of 300 MiB each under a 512 MiB limit for the sandbox: one process alone
    # stays under any per-process limit, together they must not
    rc, text = launcher.probe(textwrap.dedent("""
        import os, sys
        kids = []
        for i in range(3):
            pid = os.fork()
            if pid == 0:
                b = bytearray(300 << 20)
                for j in range(0, len(b), 4096):
                    b[j] = 1
                import time; time.sleep(2)
                os._exit(0)
            kids.append(pid)
        ok = 0
        for k in kids:
            _, st = os.waitpid(k, 0)
            ok += os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0
        print('CHILDREN_OK', ok)
    """), mem_bytes=512 << 20)
    assert "CHILDREN_OK 3" not in text, "three children together outgrew the sandbox's memory limit unnoticed"


def test_a_setsid_daemon_does_not_outlive_its_sandbox(launcher) -> None:
    token = f"hs-daemon-{os.urandom(4).hex()}"
    launcher.probe(textwrap.dedent(f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', {token!r}])
            os._exit(0)
        time.sleep(0.5)
        print('started')
    """))
    time.sleep(0.5)
    left = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if token.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                    left.append(int(p))
            except OSError:
                pass
    assert not left, f"processes of the sandbox outlived it: {left}"


def test_the_parent_is_not_dumpable() -> None:
    from hackscan.dynamic.pool import nondumpable

    nondumpable()
    import ctypes

    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def test_the_staged_worker_code_leaves_the_rules_and_the_judge_behind() -> None:
    mods = staging.worker_modules()
    assert "dynamic/worker/boot.py" in mods and "dynamic/worker/candidate.py" in mods
    for parent_only in ("dynamic/judge.py", "dynamic/compare.py", "dynamic/stage.py", "engine.py"):
        assert parent_only not in mods, f"{parent_only} would be visible to candidates"
    assert not any(m.startswith(("checks/", "rules/")) for m in mods)


def test_the_build_tools_are_on_the_sandboxs_path(launcher) -> None:
    # torch's load_inline runs `ninja --version` from the PATH before any build (on the GPU machine
    # ninja lives in a virtualenv's bin folder, outside the sandbox's system folders)
    import shutil

    if not shutil.which("ninja"):
        pytest.skip("no ninja here")
    out = _probe(launcher, """
        import subprocess
        try:
            out['ninja'] = subprocess.run(['ninja', '--version'], capture_output=True, text=True).stdout.strip()
        except OSError as e:
            out['ninja'] = repr(e)
    """)
    assert out["ninja"] and out["ninja"][0].isdigit(), out


def test_leftovers_of_a_killed_hackscan_are_swept(tmp_path) -> None:
    # a hackscan killed outright leaves its sandboxes' private folders behind (the sandboxes
    # themselves die with it): the next launcher removes them, and never a live process's
    import subprocess
    import tempfile

    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tempfile.mkdtemp()
    open(os.path.join(gone, sandbox.OWNER_FILE), "w").write(str(dead.pid))
    kept = tempfile.mkdtemp()
    open(os.path.join(kept, sandbox.OWNER_FILE), "w").write(str(os.getpid()))
    try:
        sandbox._sweep_leftovers()
        assert not os.path.exists(gone), "a dead hackscan's sandbox folder was left behind"
        assert os.path.exists(kept), "a live hackscan's sandbox folder was removed"
    finally:
        import shutil

        shutil.rmtree(gone, ignore_errors=True)
        shutil.rmtree(kept, ignore_errors=True)


def test_a_copied_interpreter_starts_as_its_base(tmp_path, monkeypatch):
    # `python -m venv --copies` puts the interpreter binary in the venv, which the sandbox does not
    # show; the worker must start from the system interpreter it was copied from
    import os
    import shutil
    import sys

    copy = tmp_path / "bin" / "python3"
    copy.parent.mkdir()
    shutil.copy2(os.path.realpath(sys.executable), copy)
    monkeypatch.setattr(sys, "executable", str(copy))
    exe = sandbox.Launcher._python(None)[0]
    assert exe.startswith(tuple(d + "/" for d in sandbox.SYSTEM_DIRS)) and os.path.isfile(exe)
