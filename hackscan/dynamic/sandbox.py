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

import hashlib
import os
import queue
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util.tail import read_tail
from .buildcache import EXT_HOME, BuildCache, _chown_tree, _ext_rel, _is_elf, key_for
from .limits import OWNER_FILE, TreeLimit, _become, _cgroup_kind, _seccomp_bpf, _sweep_leftovers, _uid_base
from .session import Session, WorkerFailure
from .shared import wire
from .staging import _dress_home, stage_package

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
        # a venv made with --copies holds its own interpreter binary, outside the system folders
        # the sandbox shows: start the base interpreter it was copied from instead (same build)
        for exe in (sys.executable, getattr(sys, "_base_executable", None),
                    os.path.join(sys.base_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")):
            real = os.path.realpath(exe) if exe else ""
            if real and os.path.isfile(real) and real.startswith(tuple(d + "/" for d in SYSTEM_DIRS)):
                return [real]
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
            why = (msg or {}).get("error")
            if not why:
                # a worker that died before its first frame (bwrap could not exec it, say) said why
                # in its log; its last line is the clearest reason a user gets
                exited = h.proc.poll() is not None
                last = read_tail(h.log, 400).strip().splitlines()[-1:] if exited else []
                why = f"it exited ({last[0].strip()})" if last else "no answer in time"
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
