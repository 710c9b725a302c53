"""A build lock left by a killed worker is cleared; a live builder's lock is respected."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hackscan.dynamic.shared.extcache import STALE_LOCK_SECONDS, _clear_stale_lock


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_of_a_dead_owner_is_removed(tmp_path: Path) -> None:
    (tmp_path / "lock").write_text("")
    (tmp_path / "hackscan.owner").write_text(str(_dead_pid()))
    _clear_stale_lock(tmp_path)
    assert not (tmp_path / "lock").exists()
    assert (tmp_path / "hackscan.owner").read_text() == str(os.getpid())


def test_lock_of_a_live_owner_is_kept(tmp_path: Path) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "lock").write_text("")
        (tmp_path / "hackscan.owner").write_text(str(live.pid))
        _clear_stale_lock(tmp_path)
        assert (tmp_path / "lock").exists()
        assert (tmp_path / "hackscan.owner").read_text() == str(live.pid)
    finally:
        live.kill()


def test_ownerless_lock_is_removed_only_when_old(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.write_text("")
    _clear_stale_lock(tmp_path)
    assert lock.exists()
    old = time.time() - STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    _clear_stale_lock(tmp_path)
    assert not lock.exists()
