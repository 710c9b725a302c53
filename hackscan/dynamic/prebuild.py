"""The candidate's extensions compiled ahead of its worker, in the build farm (farm.py), while its
reference loads; what the farm found, for the run's report.  A mixin of ``stage.DynamicRun``."""
from __future__ import annotations

import threading
import time

from ..model import Finding
from . import confirm
from .failure import DynamicFailure

# what the build farm's sandbox may spend outside its builds (see _start_prebuild)
FARM_RUN_S = 120.0



class Prebuild:
    """``DynamicRun``'s build-farm thread: started before the run, joined before the candidate loads."""

    def _start_prebuild(self) -> None:
        """Compile the candidate's extensions in the build farm (farm.py), in a thread, while this
        candidate's worker server starts and its reference loads: the farm's sandbox sees no GPU and
        holds no device gate, so its builds hold no GPU.  ``build_farm`` ``auto`` (the default):
        when the candidate shares a GPU with others (``--jobs`` > 1 on a GPU); ``on``: always;
        ``off``: never.  What the farm cannot do the real worker does, as before.

        Why ``auto`` never holds a GPU longer than no farm: the candidate's worker is started only
        once the farm is done (``_await_prebuild``, which gives up this candidate's hold on the
        gate while it waits: nothing of the candidate runs on the device meanwhile), so a build is
        never compiled twice at once, and whatever the farm built the worker loads from the cache
        (the same flags and folder, so ninja finds nothing to do).  A build the farm did not reach is compiled
        by the worker as before; it costs this candidate the farm's time, not the GPU's."""
        from . import farm

        mode = str(self.opts.get("build_farm") or "auto")
        if mode not in farm.MODES:
            raise DynamicFailure(f"build_farm must be one of {', '.join(farm.MODES)}, not {mode!r}")
        if mode == "off" or self.target.problem or not self.sub.reference or not farm.builds_at_import(self.target):
            return
        if mode == "auto" and (self.slot is None or self.slot.key == "cpu"):
            return
        bf = getattr(self.pool, "farm", None)
        if bf is None:
            bf = self.pool.farm = farm.BuildFarm()
        slot = self.slot
        # on the CPU a build is CPU work: it shares the CPU's gate like any other (no timing meanwhile)
        gate = (lambda: slot.gate.work(slot.key, f"{self.sub.path} (farm)")) \
            if slot is not None and slot.key == "cpu" else None
        # the farm's clock stops during builds (compile_timeout each, as in a worker); the rest (an
        # import, a construction, one CPU call) gets FARM_RUN_S at most: the candidate waits for it
        args = (self.pool, self.sub.code, self.sub.file or self.sub.path, self.profile.name, self.profile.to_dict(),
                min(float(self.options.timeout), FARM_RUN_S), float(self.opts.get("compile_timeout", 900.0)),
                self.mem_bytes, gate,
                self.sub.reference, self.profile.construction_seed, self._on_gpu())

        def run() -> None:
            try:
                self._farm_out = bf.build(*args)
            except Exception as exc:  # noqa: BLE001 - a farm that cannot run leaves the build to the worker
                self._farm_out = {"error": f"the build farm failed: {type(exc).__name__}: {exc}", "builds": [],
                                  "failures": {}}

        self._farm_thread = threading.Thread(target=run, name="hackscan-farm", daemon=True)
        self._farm_thread.start()

    def _on_gpu(self) -> bool:
        """Whether this candidate's own workers will see a GPU (then the farm's reads as if it did)."""
        if self.slot is not None:
            return self.slot.key != "cpu"
        from .schedule import visible_gpus

        return bool(visible_gpus(str(self.options.device)))

    def _await_prebuild(self) -> None:
        """Wait for the farm (``_start_prebuild``) without holding the device's gate, then take
        its results: the builds that failed to compile are replayed by the worker."""
        thread, self._farm_thread = self._farm_thread, None
        if thread is None:
            return
        if thread.is_alive():
            held = self._work_held is not None
            self._release_work()
            self._phase("build")
            t = time.perf_counter()
            thread.join()
            self.timings["farm_join_wait_s"] = time.perf_counter() - t
            if held:
                self._hold_work()
        out = self._farm_out or {}
        self.build_failures = dict(out.get("failures") or {})
        self.timings["farm_s"] = float(out.get("seconds") or 0.0)
        self.timings["farm_wait_s"] = float(out.get("waited_s") or 0.0)
        self.info["build_farm"] = {k: out[k] for k in ("seconds", "waited_s", "builds", "error", "exercised")
                                   if k in out}
        self.info["build_farm"]["failed_builds"] = sorted(self.build_failures)

    def _unreported_build_failures(self) -> list[Finding]:
        """HS412 for the farm's compile errors when the stage stopped before the candidate's own
        load reported its builds (a task too large to compare, a reference that does not run):
        the extension does not build whatever happens next, and without this no report would say so.  Only compile errors count (``farm.BuildFarm``: the ones the worker would replay)."""
        if "compile" in self.info or not self.build_failures:
            return []
        failed = [{"name": str(b.get("name", "?"))[:80], "error": str(b.get("error", ""))[:300]}
                  for b in (self.info.get("build_farm") or {}).get("builds") or []
                  if isinstance(b, dict) and b.get("key") in self.build_failures]
        if not failed:
            return []
        return confirm.farm_build_findings(self.make, failed, self.info.get("reason") or "the dynamic stage stopped",
                                           self.seed)
