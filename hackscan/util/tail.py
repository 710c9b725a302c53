"""The end of a file, read by seeking (a dying worker's log may be GiBs: never read it whole)."""

from __future__ import annotations

import os
from pathlib import Path


def read_tail(path: str | os.PathLike[str], nbytes: int = 3000) -> str:
    """The last ``nbytes`` of ``path`` as text ("" when it cannot be read)."""
    try:
        with open(Path(path), "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(size - nbytes, 0))
            return fh.read(nbytes).decode("utf-8", errors="replace")
    except OSError:
        return ""
