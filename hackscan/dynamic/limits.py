"""The sandbox's limits, parent side: the seccomp filter, a worker's own uid, the memory and pid
limits on its whole process tree (a cgroup, else the uid's or the tree's summed RSS), and the sweep
of what a killed hackscan left behind.  ``sandbox.py`` applies them."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

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


PIDS_MAX = 1024          # threads count too (torch's pools, the compilers' jobs)


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

    def cpu_seconds(self) -> float:
        """User and system CPU time of the tree's processes alive now (every thread of each),
        read from ``/proc`` by the parent: nothing the sandboxed code says enters it."""
        return sum(proc_cpu_seconds(pid) for pid in self.pids())

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


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_seconds(pid: int) -> float:
    """``utime + stime`` of one process, all its threads, from ``/proc/<pid>/stat`` (0 once gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0.0
    # the command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")"
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (IndexError, ValueError):
        return 0.0


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
