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


def buffer(nbytes: int) -> mmap.mmap | bytearray:
    """A writable buffer of ``nbytes`` for one frame's payload: a file-backed mapping when the frame
    is large and the space can be reserved, else a bytearray (in memory, as before)."""
    if nbytes < SPILL_BYTES:
        return bytearray(nbytes)
    folder = spill_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="frame-", dir=folder)
    except OSError:
        return bytearray(nbytes)
    try:
        os.unlink(path)  # nothing to clean up: the space goes when the last array of it does
        # a worker announces a frame's size before sending it: half the free space at most, so a
        # size it claims and never sends cannot fill the disk other candidates' frames need
        if nbytes > os.fstatvfs(fd).f_bavail * os.fstatvfs(fd).f_frsize // 2:
            return bytearray(nbytes)
        os.posix_fallocate(fd, 0, nbytes)
        return mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return bytearray(nbytes)
    finally:
        os.close(fd)
