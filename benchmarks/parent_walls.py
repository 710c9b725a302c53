#!/usr/bin/env python3
"""The parent's peak memory, disk and time while the hostile suite's attacks on it run.

    python benchmarks/parent_walls.py            # every attack, one fresh process each
    python benchmarks/parent_walls.py --only huge_header

Each attack runs in a process of its own (so its peak RSS is the parent's alone, measured from
after its imports), against the parent's own code paths: a forked fake worker writes the fixture's
frames into the socket a ``Session`` reads (fixtures/hostile/, unarmed, for their frames and
helpers), or the fixture plants its files in a private tree the parent then harvests or measures,
or the static stage scans the fixture.  Printed per attack: how it ended, its time against its
deadline, the parent's peak RSS over its baseline, and the bytes it left on disk.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "fixtures" / "hostile"
sys.path.insert(0, str(ROOT))


def _fixture(name: str):
    spec = importlib.util.spec_from_file_location(f"hostile_{name}", HOSTILE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _du(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            total += p.lstat().st_blocks * 512
        except OSError:
            pass
    return total


class _Limit:
    def oom_kills(self) -> int:
        return 0


class _Handle:
    def __init__(self, private=None):
        self.limit, self.private, self._disk_at = _Limit(), private, 0.0

    def rss(self):
        return 0

    def disk_over(self):
        from hackscan.dynamic.sandbox import Handle

        return Handle.disk_over(self) if self.private is not None else None

    def kill(self):
        pass

    def exit_status(self, wait=1.0):
        return 9

    def destroy(self):
        pass


def _worker_session(tmp: Path, frames: list[bytes], timeout: float, extra: int = 0, repeat: bool = False,
                    private: Path | None = None, log: Path | None = None):
    """A Session whose worker is a forked child writing ``frames`` (then ``extra`` zero bytes, made
    in the child) and waiting."""
    from hackscan.dynamic.session import Session

    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the fake worker
        ours.close()
        try:
            while True:
                for f in frames:
                    theirs.sendall(f)
                if extra:
                    theirs.sendall(b"\0" * extra)
                if not repeat:
                    time.sleep(3600)
                time.sleep(0.05)
        finally:
            os._exit(0)
    theirs.close()
    log = log or tmp / "worker.log"
    log.touch()
    s = Session(None, -1, ours, log, timeout, None, handle=_Handle(private))
    s.pending = True
    return s, pid


def _end(pid: int) -> None:
    os.kill(pid, 9)
    os.waitpid(pid, 0)


def attack(name: str, tmp: Path) -> dict:
    import numpy  # noqa: F401 - the parent holds numpy; its import is not the attack's memory

    from hackscan.dynamic.session import WorkerFailure

    os.environ["HACKSCAN_SPILL_DIR"] = str(tmp / "spill")
    # the fixtures import torch (a candidate's module): loaded before the baseline and the clock
    fx = {n: _fixture(n) for n in ("huge_frame_header", "malformed_frames", "clock_forward", "loud_death",
                                   "fill_disk", "harvest_link")}
    import hackscan.dynamic.sandbox  # noqa: F401
    import hackscan.engine  # noqa: F401

    base = _rss_mib()
    out: dict = {"attack": name}
    t = time.monotonic()
    if name in ("huge_header", "malformed", "clock_forward", "loud_death", "fill_disk"):
        deadline = 3.0
        private = log = None
        extra, repeat = 0, False
        if name == "huge_header":
            frames = fx["huge_frame_header"].frames()
            extra = 256 << 20  # 256 MiB really sent of the 30 GiB announced
        elif name == "malformed":
            frames = fx["malformed_frames"].frames()[:1]
        elif name == "clock_forward":
            frames, repeat = fx["clock_forward"].frames(), True
        elif name == "loud_death":
            frames = []
            log = tmp / "worker.log"
            with open(log, "wb") as fh:
                fx["loud_death"].shout(fh.fileno(), 3 << 30)
        else:
            os.environ["HACKSCAN_SANDBOX_DISK"] = str(64 << 20)
            private = tmp / "private"
            (private / "tmp").mkdir(parents=True)
            fx["fill_disk"].fill(str(private / "tmp"), 256 << 20)
            frames = []
        s, pid = _worker_session(tmp, frames, deadline, extra, repeat, private, log)
        if name == "clock_forward":
            s.compile_allowance = 1e6
            s.bound(deadline)
        if name == "loud_death":
            _end(pid)
        t = time.monotonic()  # the attack's setup (a 3 GiB log, 256 MiB written) is not the parent's time
        try:
            s.recv()
            out["ended"] = "answered"
        except WorkerFailure as exc:
            out["ended"] = f"{exc.kind}: {str(exc)[:60]}"
        finally:
            if name != "loud_death":
                _end(pid)
        out["deadline_s"] = deadline
        payload = getattr(s.reader, "_payload", None)
        out["spill_bytes"] = os.fstat(payload.fd).st_blocks * 512 if getattr(payload, "fd", -1) >= 0 else 0
    elif name == "harvest":
        from hackscan.dynamic.sandbox import BuildCache

        target = tmp / "host"
        target.mkdir()
        (target / "secret.txt").write_bytes(b"secret" * 1000)
        private = tmp / "private"
        (private / "tmp").mkdir(parents=True)
        fx["harvest_link"].plant(str(private / "tmp" / ".cache" / "ext"), str(target))
        res = BuildCache(tmp / "cache").harvest("k", private)
        out["ended"] = f"kept {[k['name'] for k in res['kept']]}, refused {len(res['refused'])}"
        out["deadline_s"] = None
        out["cache_bytes"] = _du(tmp / "cache")
    elif name == "static_blowup":
        from hackscan.config import Config
        from hackscan.engine import StaticScanner, deadline_seconds
        from hackscan.inputs import Submission

        path = HOSTILE / "static_blowup.py"
        rep = StaticScanner(Config()).scan(Submission(path=str(path), code=path.read_text(), file=str(path)))
        out["ended"] = f"{rep.verdict.value}: " + "; ".join(f.rule for f in rep.findings)
        out["deadline_s"] = deadline_seconds()
    out["seconds"] = round(time.monotonic() - t, 2)
    out["peak_rss_mib_over_base"] = round(_rss_mib() - base, 1)
    out.setdefault("disk_left_bytes", _du(tmp) - _du(tmp / "private") if (tmp / "private").exists() else _du(tmp))
    return out


ATTACKS = ("huge_header", "malformed", "clock_forward", "loud_death", "fill_disk", "harvest", "static_blowup")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=ATTACKS)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        tmp = Path(tempfile.mkdtemp(prefix="hackscan-walls-"))
        try:
            print(json.dumps(attack(args.one, tmp)))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    rows = []
    for name in ([args.only] if args.only else ATTACKS):
        r = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, timeout=600)
        try:
            rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            rows.append({"attack": name, "ended": f"benchmark failed: {r.stderr.strip()[-200:]}"})
    print(f"{'attack':<14} {'seconds':>8} {'deadline':>9} {'peak RSS +MiB':>14} {'disk/spill':>12}  ended")
    for r in rows:
        disk = r.get("spill_bytes") or r.get("cache_bytes") or 0
        print(f"{r['attack']:<14} {r.get('seconds', ''):>8} {str(r.get('deadline_s') or '-'):>9} "
              f"{r.get('peak_rss_mib_over_base', ''):>14} {disk / 2**20:>9.1f} MiB  {r.get('ended', '')}")


if __name__ == "__main__":
    main()
