"""Parent side: large frames from the workers are received into files, not into the heap.

The parent holds every probe's reference outputs (float32 and float64) and the candidate's until
the judge has compared them.  On a task with large outputs that is GiBs per candidate, times the
candidates in flight: hackscan parents were killed by the OOM killer at 28-34 GiB, and a real
task whose outputs were over the memory budget (12.1 GiB against 3.1 GiB) could not be run at all.  A frame whose payload is at least ``SPILL_BYTES`` is therefore
read into a shared mapping of an unlinked file in the spill folder: its arrays are file-backed
pages, which the kernel writes back and reclaims under memory pressure instead of killing the
parent, and the comparisons read them ``compare.CHUNK`` elements at a time.  The parent's own
(anonymous) memory stays bounded by the frames below the threshold and one chunk per comparison.

The folder: ``HACKSCAN_SPILL_DIR``, else ``spill/`` in the build cache's folder (a real disk, not
``/tmp``, which is RAM on many hosts).  Space is reserved before a frame is read
(``posix_fallocate``), so a full disk is never a SIGBUS on a page written later: when it cannot
be reserved, the frame is read into memory as before.
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

# frames below this stay in memory (the common case: most outputs are a few MiB)
SPILL_BYTES = int(os.environ.get("HACKSCAN_SPILL_BYTES") or 64 << 20)


def spill_dir() -> Path:
    from .shared.extcache import default_cache_dir

    env = os.environ.get("HACKSCAN_SPILL_DIR")
    return Path(env) if env else default_cache_dir() / "spill"


def room() -> int:
    """Free bytes in the spill folder (0 when it cannot be made)."""
    folder = spill_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return int(shutil.disk_usage(folder).free)
    except OSError:
        return 0


# the most one frame may take of the parent's memory when the spill folder cannot take it
MEMORY_FRAME_BYTES = int(os.environ.get("HACKSCAN_MEMORY_FRAME_BYTES") or 0) or None


def total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


def memory_frame_bytes() -> int:
    return MEMORY_FRAME_BYTES or min(total_memory() // 4, 8 << 30)


class FileSink:
    """A payload written to an unlinked file as it arrives, mapped once complete."""

    CHUNK = 1 << 20

    def __init__(self, fd: int, nbytes: int):
        self.fd = fd
        self.want = nbytes
        self.got = 0
        self._scratch = bytearray(min(self.CHUNK, nbytes))

    def view(self) -> memoryview:
        return memoryview(self._scratch)[:min(len(self._scratch), self.want - self.got)]

    def advance(self, n: int) -> None:
        from .shared.wire import WireError

        done = 0
        try:
            while done < n:
                done += os.write(self.fd, memoryview(self._scratch)[done:n])
        except OSError as exc:
            self.close()
            raise WireError(f"the spill folder cannot take this frame: {exc.strerror or exc}") from None
        self.got += n

    def finish(self) -> mmap.mmap:
        from .shared.wire import WireError

        try:
            return mmap.mmap(self.fd, self.want, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as exc:
            raise WireError(f"the spilled frame cannot be mapped: {exc}") from None
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def sink(nbytes: int) -> Any:
    """Where one frame's payload of ``nbytes`` (as announced) is received: a file in the spill
    folder when it is large and the folder has room for it, else memory (``MemorySink``, grown as
    bytes arrive).  Raises ``WireError`` when it fits neither."""
    from .shared.wire import MemorySink, WireError

    if nbytes < SPILL_BYTES:
        return MemorySink(nbytes)
    folder = spill_dir()
    fd = -1
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="frame-", dir=folder)
        os.unlink(path)  # nothing to clean up: the space goes when the last array of it does
        st = os.fstatvfs(fd)
        # half the free space at most: a size a worker claims must not fill the disk other
        # candidates' frames need (and only what it sends is written)
        if nbytes <= st.f_bavail * st.f_frsize // 2:
            return FileSink(fd, nbytes)
    except OSError:
        pass
    if fd >= 0:
        os.close(fd)
    if nbytes > memory_frame_bytes():
        raise WireError(f"a frame of {nbytes / 2**30:.1f} GiB fits neither the spill folder ({folder}) "
                        f"nor the parent's memory ({memory_frame_bytes() / 2**30:.1f} GiB a frame)")
    return MemorySink(nbytes)
