"""The extension build cache shared by a run's sandboxes, parent side: seeded into a sandbox before
its worker builds, harvested from it afterwards (regular files only, opened without following a
link, within size caps), keyed by the build's source."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

# torch's default extension build folder under the home folder; a sandboxed worker builds there
EXT_HOME = ".cache/torch_extensions"


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
