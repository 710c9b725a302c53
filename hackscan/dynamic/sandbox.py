"""Parent side: one single-use OS sandbox per worker (bubblewrap, seccomp, cgroups, its own uid).

Every process that runs candidate (or reference) code is started here, never forked from a process
that holds anything of the parent's.  What one sandbox is:

* **namespaces** (``bwrap --unshare-all``): its own PID namespace (no other process visible, so no
  ``/proc/PID/mem`` of the parent or of the other worker, no signals to them; when the worker's
  turn ends the namespace's init dies and the kernel kills every process in it, ``setsid()``
  daemons included), no network at all (a loopback of its own, down), its own mount, IPC and UTS
  namespaces, and no further user namespaces (``--disable-userns``);
* **filesystem**: a read-only view of the system directories (``/usr``, ``/etc``, ...) and of the
  Python installation, nothing of the user's home or project; the interpreter's paths are mounted
  at neutral places; a private writable ``/tmp`` (a host folder of this worker alone, removed at
  the end); extension builds cached per source (see ``BuildCache``); ``/dev`` minimal plus the
  NVIDIA device nodes when the GPU is used;
* **identity**: when hackscan runs as root, the worker runs as a uid of its own (one per sandbox,
  never root), with no capabilities and ``no_new_privs``;
* **seccomp**: a filter (libseccomp through ``pyseccomp``) that makes the system calls a kernel
  benchmark never needs fail with EPERM (``ptrace``, ``process_vm_readv``, ``mount``, ``bpf``,
  ``kexec_*``, module loading, ``keyctl``, ``setns``/``unshare``, ``userfaultfd``, ...);
* **limits on the whole process tree**: a cgroup (v1 or v2) per worker with a memory and a pid
  limit; without cgroups, ``RLIMIT_NPROC`` on the worker's own uid and the parent's watch of the
  summed RSS of every process of that uid;
* **looks like the benchmark**: a cleared environment (only what torch and the compilers need),
  the harness profile's working directory, argv and ``__main__`` script, and hackscan's worker code
  under a neutral package name; the parent's sys.path and site hooks are not used.

Workers are single-use: a sandbox serves one worker and is destroyed.  Start-up (an ``import
torch``, about 2-3 s) is paid ahead of time by a spare sandbox that waits for its work.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import os
import queue
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util.tail import read_tail
from .session import Session, WorkerFailure
from .shared import wire

# --sandbox: the first is the default.  required: every wall, the syscall filter included (a
# missing one fails closed); no-seccomp: every wall but the filter, asked for by name and said on
# every run; off: no walls (the zygote)
MODES = ("required", "no-seccomp", "off")
WEAKER = {"no-seccomp": "candidates run in the sandbox without its syscall filter (seccomp)",
          "off": "candidates run with no sandbox at all"}


def seccomp_problem() -> str | None:
    """Why this host cannot give a sandbox its syscall filter (None when it can), in one line."""
    c = check()
    if c.get("seccomp"):
        return None
    return ("no syscall filter for the sandbox: pyseccomp and the system's libseccomp.so.2 are needed "
            f"({c.get('seccomp_problem') or 'unknown'}); `make install` installs both, "
            "or `pip install pyseccomp` and `apt-get install libseccomp2`; "
            "--sandbox no-seccomp runs without the filter, by name")

# the package name hackscan's worker-side code runs under inside a sandbox: KernelBench's own
# package is ``src`` (its harness frame is ``src.eval``, see profiles.py)
INNER_PACKAGE = "src"

# syscalls a benchmark never needs; they fail with EPERM (not a kill: a library probing for a
# feature gets an error it handles)
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "pidfd_open",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
    "fspick", "mount_setattr", "setns", "unshare", "bpf", "perf_event_open", "userfaultfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "keyctl", "add_key", "request_key", "syslog",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "open_by_handle_at",
    "name_to_handle_at", "lookup_dcookie", "fanotify_init", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "personality",
)

# environment variables torch, the compilers and the CUDA stack read; everything else is dropped
PASSED_ENV = (
    "LANG", "LC_ALL", "TZ", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST",
    "LD_LIBRARY_PATH", "CC", "CXX", "MAX_JOBS", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH",
)

SYSTEM_DIRS = ("/usr", "/etc", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/opt", "/sys")

# where the interpreter's import path and build tools found outside the system folders are bound:
# a virtualenv's layout, as a benchmark's container often has one (not a folder named for hackscan)
VENV_DIR = "/venv"
# build tools found outside the system folders are bound here, one file each
TOOL_DIR = f"{VENV_DIR}/bin"
TOOLS = ("ninja",)

# torch's default extension build folder under the home folder; a sandboxed worker builds there
EXT_HOME = ".cache/torch_extensions"

PIDS_MAX = 1024          # threads count too (torch's pools, the compilers' jobs)


def disk_cap() -> int:
    """What one sandbox may write: its private /tmp, home and checkout together, and any one file
    (its log included).  ``HACKSCAN_SANDBOX_DISK`` bytes, 4 GiB by default: a build of a few
    kernels writes tens of MiB; a candidate that fills the disk (the private folders are a real
    disk, and the log folder the parent's) stops every scan on the host."""
    try:
        return int(os.environ.get("HACKSCAN_SANDBOX_DISK") or 0) or 4 << 30
    except ValueError:
        return 4 << 30


# how often the parent measures a sandbox's private folders (a walk of a few hundred files), and
# the most entries it walks before it counts the tree as over its cap
DISK_EVERY_S = 1.0
DISK_ENTRIES = 200_000


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be built here: the dynamic stage refuses to run untrusted code."""


@dataclass(frozen=True)
class Profile:
    """How the scoring harness looks from inside (from ``profiles.py``, see ``load_profile``)."""

    name: str = "kernelbench"
    root: str = "/workspace/KernelBench"
    cwd: str = "/workspace/KernelBench"
    script: str = "/workspace/KernelBench/scripts/eval_from_generations.py"
    argv: tuple[str, ...] = ("scripts/eval_from_generations.py",)
    env: tuple[tuple[str, str], ...] = ()
    home: str = "/root"
    hostname: str = "localhost"


def load_profile(name: str | None) -> Profile:
    """The sandbox's side of a harness profile (``profiles.py``): working directory, argv, env."""
    from .shared.profiles import get_profile

    view = get_profile(name).sandbox_view()
    cwd = str(view["cwd"])
    argv = tuple(str(a) for a in view["argv"]) or ("eval.py",)
    script = argv[0] if argv[0].startswith("/") else os.path.join(cwd, argv[0])
    return Profile(name=get_profile(name).name, root=cwd, cwd=cwd, script=script, argv=argv,
                   env=tuple(sorted((str(k), str(v)) for k, v in (view.get("env") or {}).items())))


# ----------------------------------------------------------------------------------- host facts
_CHECKED: dict[str, Any] = {}


def check() -> dict[str, Any]:
    """What this host gives a sandbox (cached): bwrap and whether it starts, uid switching,
    cgroups, seccomp.  ``problem`` is set when no sandbox can be built at all."""
    if _CHECKED:
        return _CHECKED
    out: dict[str, Any] = {"platform": sys.platform, "bwrap": shutil.which("bwrap"), "root": os.geteuid() == 0}
    if not sys.platform.startswith("linux"):
        out["problem"] = f"the sandbox needs Linux namespaces; this is {sys.platform}"
    elif not out["bwrap"]:
        out["problem"] = ("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (Debian/Ubuntu), "
                          "`dnf install bubblewrap` (Fedora); or run with --sandbox off on a machine you can lose")
    else:
        probe = [out["bwrap"], "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"]
        try:
            r = subprocess.run(probe, capture_output=True, text=True, timeout=20,
                               preexec_fn=(lambda: _become(_uid_base())) if out["root"] else None)
            if r.returncode != 0:
                out["problem"] = f"bubblewrap cannot create namespaces here: {r.stderr.strip()[:300]}"
        except (OSError, subprocess.SubprocessError) as exc:
            out["problem"] = f"bubblewrap does not start: {exc}"
    out["cgroup"] = _cgroup_kind()
    try:
        _seccomp_bpf()
        out["seccomp"] = True
    except Exception as exc:  # noqa: BLE001 - missing library: say so in every report
        out["seccomp"] = False
        out["seccomp_problem"] = f"{type(exc).__name__}: {exc}"[:200]
    _CHECKED.update(out)
    return _CHECKED


def guarantees() -> dict[str, Any]:
    """The short statement each report carries under ``dynamic.sandbox``."""
    c = check()
    return {"kind": "bubblewrap", "namespaces": ["pid", "net", "mount", "ipc", "uts", "user"],
            "own_uid": c["root"], "seccomp": c.get("seccomp", False),
            "tree_limits": c.get("cgroup") or "rlimits+uid-watch",
            **({"seccomp_problem": c["seccomp_problem"]} if c.get("seccomp_problem") else {})}


def _uid_base() -> int:
    # a block of uids no account uses; the pid keeps concurrent hackscan processes apart
    return 600_000_000 + (os.getpid() % 100_000) * 1000


def _become(uid: int) -> None:
    """In a forked child before exec: no groups, ``uid`` as every user and group id."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _cgroup_kind() -> str | None:
    if os.geteuid() != 0:
        return None
    if os.access("/sys/fs/cgroup/memory", os.W_OK) and os.access("/sys/fs/cgroup/pids", os.W_OK):
        return "v1"
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers") and os.access("/sys/fs/cgroup", os.W_OK):
        return "v2"
    return None


# ----------------------------------------------------------------------------------- seccomp
_BPF: bytes | None = None


def _seccomp_bpf() -> bytes:
    """The filter, compiled once: default allow, ``DENIED_SYSCALLS`` fail with EPERM."""
    global _BPF
    if _BPF is not None:
        return _BPF
    import pyseccomp as sc  # type: ignore[import-not-found]

    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except Exception:  # noqa: BLE001 - a call this architecture or libseccomp does not know
            continue
    with tempfile.TemporaryFile() as fh:
        f.export_bpf(fh)
        fh.seek(0)
        _BPF = fh.read()
    return _BPF


# ----------------------------------------------------------------------------------- cgroups
class TreeLimit:
    """Memory and pid limits on a worker's whole process tree, and a way to kill all of it."""

    def __init__(self, name: str, uid: int | None):
        self.kind = _cgroup_kind()
        self.uid = uid
        # without cgroups and without a uid of its own (hackscan not run as root), the tree is
        # found from bwrap's pid by parent links (set once the sandbox is started)
        self.root_pid: int | None = None
        self.paths: list[Path] = []
        if self.kind == "v1":
            for ctl in ("memory", "pids"):
                p = Path("/sys/fs/cgroup") / ctl / "hackscan" / name
                p.mkdir(parents=True, exist_ok=True)
                self.paths.append(p)
        elif self.kind == "v2":
            base = Path("/sys/fs/cgroup/hackscan")
            base.mkdir(exist_ok=True)
            try:
                (Path("/sys/fs/cgroup") / "cgroup.subtree_control").write_text("+memory +pids")
                (base / "cgroup.subtree_control").write_text("+memory +pids")
            except OSError:
                pass
            p = base / name
            p.mkdir(exist_ok=True)
            self.paths.append(p)
        self._procs = [str(p / "cgroup.procs") for p in self.paths]
        self.set_pids(PIDS_MAX)

    def _write(self, rel: str, value: str) -> bool:
        for p in self.paths:
            f = p / rel
            if f.exists():
                try:
                    f.write_text(value)
                    return True
                except OSError:
                    return False
        return False

    def _read_int(self, rel: str) -> int | None:
        for p in self.paths:
            f = p / rel
            if f.exists():
                try:
                    return int(f.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    return None
        return None

    def set_memory(self, nbytes: int | None) -> None:
        if not nbytes:
            return
        if self.kind == "v1":
            self._write("memory.limit_in_bytes", str(int(nbytes)))
            self._write("memory.memsw.limit_in_bytes", str(int(nbytes)))
        elif self.kind == "v2":
            self._write("memory.max", str(int(nbytes)))
            self._write("memory.swap.max", "0")

    def set_pids(self, n: int) -> None:
        self._write("pids.max", str(n))

    def join_fn(self) -> Any:
        """For ``preexec_fn``: the child enters the cgroups before it execs bwrap (so every process
        it makes is counted), then drops to the sandbox's uid.  Only raw syscalls here: the parent
        may have threads."""
        procs = [p.encode() for p in self._procs]
        uid = self.uid

        def pre() -> None:
            for path in procs:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            if uid is not None:
                _become(uid)

        return pre

    def _stat(self) -> dict[str, int]:
        for p in self.paths:
            f = p / "memory.stat"
            if f.exists():
                try:
                    return {k: int(v) for k, v in (ln.split() for ln in f.read_text().splitlines())}
                except (OSError, ValueError):
                    return {}
        return {}

    def memory_bytes(self) -> int:
        """Resident memory of the whole tree, counted as the old per-process VmRSS was (anonymous
        plus mapped files), not the page cache a build leaves behind."""
        st = self._stat()
        if self.kind == "v1" and st:
            return st.get("total_rss", 0) + st.get("total_mapped_file", 0)
        if self.kind == "v2" and st:
            return st.get("anon", 0) + st.get("file_mapped", 0)
        if self.uid is not None:
            return _uid_rss(self.uid)
        return sum(_rss(pid) for pid in _tree(self.root_pid)) if self.root_pid else 0

    def oom_kills(self) -> int:
        """Processes of the tree the kernel killed at the cgroup's memory limit."""
        for p in self.paths:
            for name in ("memory.oom_control", "memory.events"):
                f = p / name
                if f.exists():
                    try:
                        for line in f.read_text().splitlines():
                            k, _, v = line.partition(" ")
                            if k == "oom_kill":
                                return int(v)
                    except (OSError, ValueError):
                        pass
        return 0

    def pids(self) -> set[int]:
        out: set[int] = set()
        for path in self._procs:
            try:
                out.update(int(x) for x in Path(path).read_text().split())
            except (OSError, ValueError):
                pass
        if not self.paths and self.uid is not None:
            out.update(_uid_pids(self.uid))
        elif not self.paths and self.root_pid:
            out.update(_tree(self.root_pid))
        return out

    def kill_all(self) -> None:
        for _ in range(20):
            left = self.pids()
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for p in self.paths:
            for _ in range(50):
                try:
                    p.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


OWNER_FILE = ".hackscan-owner"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _sweep_leftovers() -> None:
    """What a hackscan killed outright (SIGKILL, OOM) left behind: its sandboxes died with it
    (``--die-with-parent``), but their private folders and empty cgroups stay.  Removed here when
    the process that made them is gone."""
    tmp = Path(tempfile.gettempdir())
    try:
        for owner in tmp.glob(f"tmp*/{OWNER_FILE}"):
            try:
                pid = int(owner.read_text().strip())
            except (OSError, ValueError):
                continue
            if pid != os.getpid() and not _alive(pid):
                shutil.rmtree(owner.parent, ignore_errors=True)
    except OSError:
        pass
    for base in (Path("/sys/fs/cgroup/memory/hackscan"), Path("/sys/fs/cgroup/pids/hackscan"),
                 Path("/sys/fs/cgroup/hackscan")):
        try:
            for d in base.iterdir():
                head = d.name.split("-")[0]
                if d.is_dir() and head.isdigit() and not _alive(int(head)):
                    try:
                        d.rmdir()
                    except OSError:
                        pass
        except OSError:
            continue


def _uid_pids(uid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                out.append(int(name))
        except OSError:
            pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _uid_rss(uid: int) -> int:
    return sum(_rss(pid) for pid in _uid_pids(uid))


def _tree(root: int) -> set[int]:
    """``root`` and every process below it, by the parent links in /proc (a daemon that
    ``setsid()``s away is reparented to the sandbox's init, the worker, so it stays below)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


# ----------------------------------------------------------------------------------- staging
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


# ----------------------------------------------------------------------------------- the build cache
# where the harvest looks when not told (a tree laid out by hand); a sandbox's own builds are in
# its home's torch_extensions folder (``_ext_rel``)
EXT_REL = ("tmp", ".cache", "ext")
# what the parent takes back from one sandbox into the build cache: a build folder of at most
# this many bytes and files, and this many bytes in all (a build of a few kernels is a few MiB of
# objects and one .so; a candidate that builds more keeps its builds for this run only)
HARVEST_FOLDER_BYTES = 256 << 20
HARVEST_FILES = 256
HARVEST_DEPTH = 2
HARVEST_SOURCE_BYTES = 512 << 20


class BuildCache:
    """Extension builds, cached per source: ``<cache>/sandboxed/<source hash>/ext/<build key>``.

    A worker never sees the shared cache.  Before it starts its work, the parent copies the builds
    of the same source into the worker's private folder; after it ends, the parent takes the
    folders it built back.  A candidate can therefore only ever plant a build for its own source,
    which is the code it runs anyway; it cannot reach another candidate's builds.
    """

    def __init__(self, root: Path):
        self.root = Path(root) / "sandboxed"

    def _dir(self, source_key: str) -> Path:
        return self.root / source_key / "ext"

    def seed(self, source_key: str, private_ext: Path, uid: int | None) -> None:
        src = self._dir(source_key)
        if not src.is_dir():
            return
        for entry in src.iterdir():
            if entry.is_dir():
                shutil.copytree(entry, private_ext / entry.name, symlinks=True, dirs_exist_ok=True)
        if uid is not None:
            _chown_tree(private_ext, uid)

    def harvest(self, source_key: str, private: Path, rel: tuple[str, ...] = EXT_REL) -> dict[str, Any]:
        """Take the worker's finished builds back into the cache.  The parent runs as root and the
        worker's tree is the candidate's to arrange, so no step follows a link: a planted link
        made the parent copy a host folder (another source's builds, a virtualenv, a secret) into
        the cache, which the next run of the same source then read.  Kept: the build folders one
        level below ``rel`` (below ``private``) that hold a compiled extension (a regular ELF
        ``.so``), their regular files only, within ``HARVEST_FOLDER_BYTES`` and ``HARVEST_FILES``
        each and ``HARVEST_SOURCE_BYTES`` in all.  Returns what was kept and what was refused."""
        out: dict[str, Any] = {"kept": [], "refused": []}
        try:
            fds = [os.open(private, os.O_RDONLY | os.O_DIRECTORY)]
        except OSError:
            return out
        try:
            for name in rel:
                try:
                    fds.append(os.open(name, _DIR_NOFOLLOW, dir_fd=fds[-1]))
                except OSError:
                    out["refused"].append({"name": "/".join(rel), "why": "not a plain folder (a link?)"})
                    return out
            total = 0
            for entry in sorted(os.listdir(fds[-1])):
                why = self._take_folder(source_key, fds[-1], entry, HARVEST_SOURCE_BYTES - total)
                if isinstance(why, str):
                    out["refused"].append({"name": entry, "why": why})
                else:
                    total += why
                    out["kept"].append({"name": entry, "bytes": why})
        finally:
            for fd in reversed(fds):
                os.close(fd)
        return out

    def _take_folder(self, source_key: str, ext: int, name: str, room: int) -> int | str:
        """Copy build folder ``name`` (below the open folder ``ext``) into the cache: its size, or
        why it was not kept."""
        if name.startswith("."):
            return "a hidden entry"
        try:
            fd = os.open(name, _DIR_NOFOLLOW, dir_fd=ext)
        except OSError:
            return "not a plain folder (a link?)"
        dest = self._dir(source_key)
        tmp = dest / f".{name}.{os.getpid()}.{time.monotonic_ns()}"
        opened: list[int] = [fd]
        try:
            if "lock" in os.listdir(fd):
                return "a build killed half-way (its lock is there)"
            # regular files, in plain folders down to HARVEST_DEPTH (``load`` pins its sources in
            # ``src/``); links, fifos and devices are never followed nor copied
            files: list[tuple[str, int, str, int]] = []
            stack: list[tuple[int, str, int]] = [(fd, "", 0)]
            while stack:
                dfd, rel, depth = stack.pop()
                for n in sorted(os.listdir(dfd)):
                    st = os.lstat(n, dir_fd=dfd)
                    if stat.S_ISREG(st.st_mode):
                        files.append((rel + n, dfd, n, st.st_size))
                    elif stat.S_ISDIR(st.st_mode) and depth < HARVEST_DEPTH:
                        sub = os.open(n, _DIR_NOFOLLOW, dir_fd=dfd)
                        opened.append(sub)
                        stack.append((sub, rel + n + "/", depth + 1))
                    if len(files) + len(opened) > HARVEST_FILES:
                        return f"over {HARVEST_FILES} entries"
            cap = min(HARVEST_FOLDER_BYTES, room)
            size = sum(f[3] for f in files)
            if size > cap:
                return f"{size >> 20} MiB, over {cap >> 20} MiB"
            if not any(rel.endswith(".so") and "/" not in rel and _elf_at(dfd, n) for rel, dfd, n, _ in files):
                return "no compiled extension (a regular ELF .so) in it"
            dest.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            for rel, dfd, n, nbytes in files:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                _copy_plain(dfd, n, tmp / rel, nbytes)
            old = dest / name
            if old.is_symlink() or old.is_file():
                old.unlink()
            elif old.exists():
                shutil.rmtree(old, ignore_errors=True)
            tmp.rename(old)
            return size
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            return f"not copied: {exc.strerror or exc}"
        finally:
            for f in reversed(opened):
                os.close(f)


_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _elf_at(folder: int, name: str) -> bool:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, 4, 0) == b"\x7fELF"
    finally:
        os.close(fd)


def _copy_plain(folder: int, name: str, dest: Path, size: int) -> None:
    """Copy regular file ``name`` (below the open ``folder``), at most ``size`` bytes, without
    following a link: what is opened must still be the regular file that was measured."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{name} is no longer a regular file")
        with open(dest, "wb") as out:
            left = size
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
        # the build's own times: ninja rebuilds an output older than its inputs, and a copy made
        # in name order would leave main.cpp newer than the .so built from it
        st = os.fstat(fd)
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def _chown_tree(path: Path, uid: int) -> None:
    for p in [path, *path.rglob("*")]:
        try:
            os.lchown(p, uid, uid)
        except OSError:
            pass


def key_for(code: str) -> str:
    """The build-cache namespace of a source (hash of its text and of this interpreter)."""
    h = hashlib.sha256()
    h.update(f"{sys.version_info[:2]}|".encode())
    h.update(code.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:24]


# ----------------------------------------------------------------------------------- one sandbox
@dataclass
class Handle:
    """A started sandbox: the bwrap process, its private folder, its tree limit."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket
    private: Path
    limit: TreeLimit
    uid: int | None
    log: Path
    started: float
    ready: dict[str, Any] | None = None
    preloaded: set[str] = field(default_factory=set)
    source_key: str | None = None
    cache: BuildCache | None = None
    _disk_at: float = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        return self.limit.memory_bytes()

    def disk_over(self) -> str | None:
        """Why the sandbox's private folders are over ``disk_cap()`` (None when they are not), at
        most once per ``DISK_EVERY_S``.  Each file is also capped by ``RLIMIT_FSIZE`` (SIGXFSZ),
        so what a second's writes can add is bounded by the cap times the files written at once."""
        now = time.monotonic()
        if now - self._disk_at < DISK_EVERY_S:
            return None
        self._disk_at = now
        used, entries = _tree_bytes(self.private)
        cap = disk_cap()
        if entries > DISK_ENTRIES:
            return f"the sandbox's private folders hold over {DISK_ENTRIES} files"
        if used > cap:
            return f"the sandbox's private folders hold {used / 2**30:.1f} GiB, over the {cap / 2**30:.1f} GiB cap"
        return None

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.limit.kill_all()

    def exit_status(self, wait: float = 1.0) -> int | None:
        """A wait status as ``os.waitpid`` gives it: bwrap exits with 128+N when the worker died of
        signal N, turned back into a signal death here."""
        try:
            code = self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None
        if code < 0:
            return -code
        if code > 128 and code - 128 < 65:
            return code - 128
        return code << 8

    def destroy(self) -> None:
        self.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.limit.remove()
        if self.cache is not None and self.source_key:
            try:
                self.cache.harvest(self.source_key, self.private, rel=_ext_rel(self.private))
            except OSError:
                pass
        shutil.rmtree(self.private, ignore_errors=True)


def _tree_bytes(root: Path) -> tuple[int, int]:
    """Disk blocks in use below ``root`` (a sparse file counts what it holds) and the entries
    walked; links are not followed."""
    used = entries = 0
    stack = [str(root)]
    while stack and entries <= DISK_ENTRIES:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    entries += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return used, entries


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


def _ext_rel(private: Path) -> tuple[str, ...]:
    """Where a sandbox's builds are, below its private folder: its home's
    ``.cache/torch_extensions/<tag>``, where the worker builds as torch does by default
    (``extcache.ExtensionCache.plain_dir``).  The tag (``py311_cpu``, ``py311_cu124``) is the worker's
    torch's: the one plain folder there, or the interpreter's with the parent's torch's CUDA tag
    before the first build.  Read without following a link (the tree is the candidate's to
    arrange); the harvest opens every step with ``O_NOFOLLOW`` again."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}_{_cuda_tag()}"
    names: list[str] = []
    plain: list[str] = []
    try:
        with os.scandir(private / "home" / EXT_HOME) as it:
            for e in it:
                names.append(e.name)
                if e.is_dir(follow_symlinks=False):
                    plain.append(e.name)
    except OSError:
        pass
    if tag not in names and len(plain) == 1:
        tag = plain[0]
    return ("home", *Path(EXT_HOME).parts, tag)


def _cuda_tag() -> str:
    """torch's build tag for its CUDA version, read without importing torch (the parent never
    does): ``torch/version.py``'s ``cuda = '12.4'`` line."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return "cpu"
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return "cpu"
    for line in text.splitlines():
        if line.startswith("cuda"):
            value = line.split("=", 1)[1].split("#")[0].strip().strip("'\"")
            return "cu" + value.replace(".", "") if value and value != "None" else "cpu"
    return "cpu"


def _start_at_once() -> int:
    """Spare sandboxes starting at the same time: ``HACKSCAN_START_AT_ONCE`` (unset or 0: no
    bound).  Measured on the 2-core CI box (docs/measured.md), a bound of two was not faster than
    none, so none is the default until a GPU host shows otherwise.  A worker a candidate waits for
    is started at once all the same."""
    try:
        n = int(os.environ.get("HACKSCAN_START_AT_ONCE", "0"))
    except ValueError:
        n = 0
    return n if n > 0 else 1 << 16


STARTING = threading.BoundedSemaphore(_start_at_once())


class Launcher:
    """Starts sandboxed workers for one device setting; keeps one spare ready (``warm``).

    Same face as the old zygote (``info``, ``preload``, ``spawn``, ``alive``, ``close``), so the
    stage does not care which one it has."""

    def __init__(self, device: str, log_dir: Path, start_timeout: float = 180.0, warm: bool = True,
                 profile: Profile | None = None, cache_root: Path | None = None, spares: int = 2,
                 gpu: str | None = None, extra_env: dict[str, str] | None = None, mode: str = MODES[0]):
        c = check()
        if c.get("problem"):
            raise SandboxUnavailable(c["problem"])
        # --sandbox required means every wall: no filter, no sandbox (fail closed)
        if mode == "required" and seccomp_problem():
            raise SandboxUnavailable(seccomp_problem())
        self.mode = mode
        self.device = device
        self.log_dir = log_dir
        self.warm = warm
        self.start_timeout = start_timeout
        self.profile = profile or load_profile(None)
        self.preloaded: set[str] = set()
        self._lock = threading.Lock()
        self.spares = max(int(spares), 1) if warm else 0
        # the one GPU this launcher's workers see (schedule.py gives each candidate one); None: all
        self.gpu = gpu
        # set in every worker's environment: the build farm's and the device workers' extension
        # builds must see the same TORCH_CUDA_ARCH_LIST (same flags, same build, no rebuild)
        self.extra_env = dict(extra_env or {})
        self._spares: list[Handle] = []
        self._starting = 0
        self._cond = threading.Condition(self._lock)
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._starter = threading.Thread(target=self._starter_loop, name="hackscan-sandbox-starter", daemon=True)
        self._starter.start()
        self._closed = False
        self._counter = 0
        # not under the log folder (0700): the sandbox's uid must be able to reach its folders
        # (the default "tmp" prefix: /proc/self/mountinfo inside shows the host paths of binds)
        _sweep_leftovers()
        self._root = Path(tempfile.mkdtemp())
        os.chmod(self._root, 0o711)
        # who owns this folder, for the sweep after a hackscan that was killed (not visible inside:
        # only folders below it are bound into sandboxes)
        (self._root / OWNER_FILE).write_text(str(os.getpid()))
        self._pkg = stage_package(self._root / "pkg", INNER_PACKAGE)
        self._script = self._root / "launch.py"
        self._paths = self._python_paths()
        self._tool_files = self._tools()
        self._script.write_text(self._launcher_source())
        os.chmod(self._script, 0o644)
        self._bpf_path: Path | None = None
        if c.get("seccomp"):
            self._bpf_path = self._root / "filter.bpf"
            self._bpf_path.write_bytes(_seccomp_bpf())
        from .shared.extcache import default_cache_dir

        self.cache = BuildCache(cache_root or default_cache_dir())
        self.started = time.monotonic()
        first = self._start()
        try:
            self._wait_ready(first, start_timeout)
        except BaseException:
            first.destroy()
            raise
        self.info: dict[str, Any] = dict(first.ready.get("info") or {}) if first.ready else {}
        self.info["sandbox"] = dict(guarantees(), mode=mode)
        self.start_seconds = time.monotonic() - self.started
        self._spares.append(first)
        self._refill()

    # --------------------------------------------------------------------------- layout
    def _python_paths(self) -> list[tuple[str, str | None]]:
        """(path inside, host path to bind or None when visible already) for the interpreter's
        import path, without hackscan's own source tree and without the working directory."""
        here = Path(__file__).resolve().parent.parent.parent
        out: list[tuple[str, str | None]] = []
        for entry in sys.path:
            if not entry:
                continue
            p = Path(entry).resolve()
            if not p.exists() or p == here or p == Path.cwd().resolve():
                continue
            if str(p).startswith(("/usr/", "/lib")):
                out.append((str(p), None))
            elif p.is_dir():
                # the folder that holds torch is the venv's own site-packages, as in a plain
                # install; any other is named after its host path, not its place in sys.path: the
                # name reaches every extension's build command (-isystem .../torch/include), and a
                # build is reused only when that command is the same (a Ray worker's sys.path
                # holds more entries than the CLI's, so a position renamed torch there)
                ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
                inside = f"{VENV_DIR}/lib/{ver}/site-packages"
                if not (p / "torch").is_dir() or any(inside == o for o, _ in out):
                    inside += "-" + hashlib.sha256(str(p).encode("utf-8", "surrogatepass")).hexdigest()[:12]
                if all(inside != o for o, _ in out):
                    out.append((inside, str(p)))
        return out

    def _launcher_source(self) -> str:
        paths = [inside for inside, _ in self._paths]
        return (
            "import sys\n"
            f"sys.path[:] = {[str(Path(self.profile.root))] + paths!r}\n"
            f"sys.argv[:] = {list(self.profile.argv)!r}\n"
            f"from {INNER_PACKAGE}.dynamic.worker.boot import main\n"
            "main()\n")

    def _command(self, private: Path) -> list[str]:
        prof = self.profile
        bw = check()["bwrap"]
        # --as-pid-1: bwrap itself stays outside, so its command line (the binds) is not in the
        # sandbox's /proc; the worker is the namespace's init, and everything dies with it
        # --uid/--gid 0: inside, the worker is root, as a benchmark run in a container is (its own
        # unprivileged uid outside, no capabilities either way); the hostname a container's id
        cmd = [bw, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
               "--as-pid-1", "--uid", "0", "--gid", "0",
               "--cap-drop", "ALL", "--hostname", self._hostname(private)]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                cmd += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                cmd += ["--ro-bind", d, d]
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        if self.device != "cpu":
            for name in sorted(os.listdir("/dev")):
                if name.startswith("nvidia"):
                    cmd += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
            if os.path.isdir("/dev/nvidia-caps"):
                cmd += ["--dev-bind", "/dev/nvidia-caps", "/dev/nvidia-caps"]
        for inside, host in self._paths:
            if host:
                cmd += ["--ro-bind", host, inside]
                if (Path(host) / "hackscan").is_dir():
                    cmd += ["--tmpfs", f"{inside}/hackscan"]
                    cmd += ["--remount-ro", f"{inside}/hackscan"]
        # the private writable folders: /tmp, the home folder, the harness's checkout
        cmd += ["--bind", str(private / "tmp"), "/tmp"]
        cmd += ["--bind", str(private / "home"), prof.home]
        cmd += ["--bind", str(private / "work"), prof.root]
        for name, host in self._tool_files.items():
            cmd += ["--ro-bind", host, f"{TOOL_DIR}/{name}"]
        cmd += ["--ro-bind", str(self._pkg / INNER_PACKAGE), f"{prof.root}/{INNER_PACKAGE}"]
        cmd += ["--ro-bind", str(self._script), prof.script]
        cmd += ["--chdir", prof.cwd, "--clearenv"]
        for k, v in self._env(self._hostname(private)).items():
            cmd += ["--setenv", k, v]
        return cmd

    @staticmethod
    def _hostname(private: Path) -> str:
        """A container id's first 12 hex digits, one per sandbox (derived from its private
        folder, so that the UTS name and ``HOSTNAME`` agree), never a fixed name."""
        return hashlib.sha256(f"{private}:{os.getpid()}".encode()).hexdigest()[:12]

    def _tools(self) -> dict[str, str]:
        """Build tools the parent finds on its PATH (``ninja`` from a virtualenv's bin folder, where
        torch's ``load_inline`` looks for it), bound one file each at ``TOOL_DIR``: the sandbox's
        PATH has only system folders.  A console-script wrapper (its ``#!`` line names an
        interpreter path the sandbox does not have) is replaced by the binary it runs."""
        out = {}
        for name in TOOLS:
            path = shutil.which(name)
            real = os.path.realpath(path) if path else None
            if real is None or not _is_elf(real):
                real = next((str(c) for entry in sys.path if entry
                             for c in [Path(entry) / name / "data" / "bin" / name] if _is_elf(str(c))), None)
            if real is not None:
                out[name] = real
        return out

    def _env(self, hostname: str = "localhost") -> dict[str, str]:
        prof = self.profile
        bins = [TOOL_DIR] if self._tool_files else []
        for inside, host in self._paths:
            base = Path(host or inside)
            if (base / "ninja" / "data" / "bin").is_dir():
                bins.append(f"{inside}/ninja/data/bin")
        cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or (
            "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else "")
        if cuda:
            bins.append(f"{cuda}/bin")
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.update(self.extra_env)
        # what a container's python process has (PATH, HOSTNAME, HOME, LANG, PWD from its shell),
        # no TMPDIR or USER a harness would not set; the build tools' folders first, as a
        # virtualenv's activation puts its bin first
        env.update({"PATH": ":".join([*bins, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin",
                                      "/bin"]),
                    "HOME": prof.home, "HOSTNAME": hostname, "LANG": env.get("LANG", "C.UTF-8"), "PWD": prof.cwd})
        if self.device != "cpu" and self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["TRITON_INTERPRET"] = "1"
        env.update(dict(prof.env))
        return env

    # --------------------------------------------------------------------------- start
    def _prepare(self) -> tuple[int, int | None, Path, TreeLimit]:
        """A fresh private folder (its /tmp, home and checkout), a uid and a tree limit."""
        with self._lock:
            self._counter += 1
            n = self._counter
        uid = _uid_base() + n % 1000 if os.geteuid() == 0 else None
        private = Path(tempfile.mkdtemp(dir=self._root))
        for sub in ("tmp", "home", "work", f"home/{EXT_HOME}"):
            (private / sub).mkdir(parents=True, exist_ok=True)
        _dress_home(private / "home")
        if uid is not None:
            _chown_tree(private, uid)
            os.chmod(private, 0o755)
        return n, uid, private, TreeLimit(f"{os.getpid()}-{n}-{os.urandom(3).hex()}", uid)

    def _launch(self, private: Path, limit: TreeLimit, argv: list[str], fds: list[int], out: Any,
                stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        cmd = self._command(private)
        bpf_fd = None
        if self._bpf_path is not None:
            bpf_fd = os.open(self._bpf_path, os.O_RDONLY)
            cmd += ["--seccomp", str(bpf_fd)]
        join = limit.join_fn()
        cap = disk_cap()

        def pre() -> None:
            # no file of the sandbox's (its log included) grows past the disk cap: SIGXFSZ
            resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
            join()

        try:
            return self._popen(cmd + ["--", *argv], pass_fds=fds + ([bpf_fd] if bpf_fd is not None else []),
                               stdin=stdin, stdout=out, stderr=out, close_fds=True, preexec_fn=pre)
        finally:
            if bpf_fd is not None:
                os.close(bpf_fd)

    def _python(self) -> list[str]:
        # the real interpreter, started as a harness starts it (no -I/-S/-B: sys.flags would show
        # them); the environment is already cleared, and the launcher script replaces sys.path, so
        # the virtualenv's .pth hooks (an editable install's finder names hackscan) never run
        return [os.path.realpath(sys.executable)]

    def _start(self) -> Handle:
        n, uid, private, limit = self._prepare()
        ours, theirs = socket.socketpair()
        log = self.log_dir / f"worker-{n}.log"
        out = open(log, "ab")
        try:
            proc = self._launch(private, limit, [*self._python(), self.profile.script], [theirs.fileno()], out)
        except BaseException:
            limit.remove()
            ours.close()
            raise
        finally:
            out.close()
            theirs.close()
        limit.root_pid = proc.pid
        h = Handle(proc=proc, sock=ours, private=private, limit=limit, uid=uid, log=log, started=time.monotonic())
        if self.preloaded:
            self._send(h, {"cmd": "preload", "modules": sorted(self.preloaded)})
        return h

    def probe(self, code: str, timeout: float = 60.0, mem_bytes: int | None = None) -> tuple[int, str]:
        """Run a Python snippet in a fresh sandbox made exactly as a worker's (same walls, uid,
        filter and limits) and return (exit code, output).  The tests prove the walls with it."""
        _, _, private, limit = self._prepare()
        limit.set_memory(mem_bytes)
        with tempfile.TemporaryFile() as out:
            proc = self._launch(private, limit, [*self._python(), "-c", code], [], out)
            limit.root_pid = proc.pid
            try:
                code_ = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                code_ = proc.wait()
            limit.remove()
            shutil.rmtree(private, ignore_errors=True)
            out.seek(0)
            return code_, out.read().decode(errors="replace")

    def _popen(self, cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        """Popen on the launcher's own long-lived thread: ``--die-with-parent`` is a parent-death
        signal, which Linux sends when the *thread* that forked bwrap ends, so a sandbox started
        from a short-lived thread would be killed with it."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def job() -> None:
            try:
                box["proc"] = subprocess.Popen(cmd, **kw)
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["error"] = exc
            done.set()

        self._jobs.put(job)
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["proc"]

    def _starter_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    def _send(self, h: Handle, msg: dict[str, Any]) -> None:
        h.sock.settimeout(30.0)
        wire.send(h.sock, msg)

    def _recv(self, h: Handle, timeout: float) -> dict[str, Any] | None:
        reader = wire.FrameReader(h.sock)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                frame = reader.poll(0.25)
            except (wire.PeerClosed, wire.WireError):
                return None
            if frame is not None:
                try:
                    msg = wire.decode(frame[0], frame[1], side="parent")
                except wire.WireError:
                    return None
                return msg if isinstance(msg, dict) else None
            if h.proc.poll() is not None:
                return None
        return None

    def _wait_ready(self, h: Handle, timeout: float) -> None:
        if h.ready is not None:
            return
        msg = self._recv(h, timeout)
        if not msg or not msg.get("ready"):
            why = (msg or {}).get("error") or "no answer in time"
            raise WorkerFailure("crash", f"the sandboxed worker did not start: {why}", log_tail=read_tail(h.log, 2000))
        h.ready = msg

    def _refill(self) -> None:
        """Start spares in the background up to ``spares`` (a candidate needs two workers at once:
        the reference's and its own)."""
        with self._cond:
            need = self.spares - len(self._spares) - self._starting
            if self._closed or need <= 0:
                return
            self._starting += need
        for _ in range(need):
            threading.Thread(target=self._start_spare, name="hackscan-spare", daemon=True).start()

    def _start_spare(self) -> None:
        h: Handle | None = None
        try:
            # at most HACKSCAN_START_AT_ONCE interpreters import torch at once, over every launcher
            # of the process (eight at once on 16 cores took 15-28 s each, so a bound can help there)
            with STARTING:
                h = self._start()
                self._wait_ready(h, self.start_timeout)
        except Exception:  # the next spawn starts one itself and reports why
            if h is not None:
                h.destroy()
            h = None
        with self._cond:
            self._starting -= 1
            if h is not None and not self._closed:
                self._spares.append(h)
                h = None
            self._cond.notify_all()
        if h is not None:
            h.destroy()

    def quiet(self, timeout: float = 60.0) -> None:
        """Wait until no spare is starting (an interpreter importing torch is CPU work: a candidate
        timed on the CPU must not share it with one)."""
        with self._cond:
            end = time.monotonic() + timeout
            while self._starting > 0 and not self._closed and time.monotonic() < end:
                self._cond.wait(0.2)

    def _take(self) -> Handle | None:
        with self._cond:
            end = time.monotonic() + self.start_timeout
            while not self._spares and self._starting > 0 and not self._closed and time.monotonic() < end:
                self._cond.wait(0.5)
            return self._spares.pop(0) if self._spares else None

    # --------------------------------------------------------------------------- the zygote's face
    def alive(self) -> bool:
        return not self._closed

    def preload(self, modules: list[str], timeout: float = 120.0) -> list[str]:
        """Modules every later worker imports before its work (sent to the spare now, so the import
        happens while it waits)."""
        wanted = [m for m in modules if m not in self.preloaded]
        if not wanted:
            return []
        self.preloaded.update(wanted)
        with self._lock:
            spares = list(self._spares)
        for spare in spares:
            try:
                self._send(spare, {"cmd": "preload", "modules": wanted})
            except OSError:
                pass
        return wanted

    def spawn(self, spec: dict[str, Any], timeout: float, mem_bytes: int | None = None,
              source: str | None = None) -> Any:
        h = self._take()
        if h is None:
            h = self._start()
        try:
            self._wait_ready(h, self.start_timeout)
        except BaseException:
            h.destroy()
            raise
        self._refill()
        h.limit.set_memory(int(mem_bytes * 1.25) if mem_bytes else None)
        if source is not None:
            h.source_key = key_for(source)
            h.cache = self.cache
            self.cache.seed(h.source_key, h.private.joinpath(*_ext_rel(h.private)), h.uid)
        spec = dict(spec, mem_bytes=mem_bytes, cache_dir="/tmp/.cache", ext_home=f"{self.profile.home}/{EXT_HOME}",
                    preload=sorted(self.preloaded))
        spec.setdefault("device", self.device)
        try:
            self._send(h, {"cmd": "spec", "spec": spec})
        except OSError as exc:
            h.destroy()
            raise WorkerFailure("crash", f"the sandboxed worker took no work: {exc}") from exc
        return Session(self, h.pid, h.sock, h.log, timeout, mem_bytes, handle=h)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            spares, self._spares = self._spares, []
            end = time.monotonic() + 30
            while self._starting > 0 and time.monotonic() < end:
                self._cond.wait(0.5)
        for h in spares:
            h.destroy()
        self._jobs.put(None)
        shutil.rmtree(self._root, ignore_errors=True)
