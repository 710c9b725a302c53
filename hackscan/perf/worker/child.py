"""The worker process of the standalone runner (``hackscan.perf.standalone``): one role, one model.

Started as ``python -m hackscan.perf.worker.child <fd>``; reads one job (JSON) and then one request per
line from stdin, answers one JSON line per request on file descriptor ``fd``.  Anything the
candidate prints goes to stderr, never into the protocol.  Requests:

* ``check``: fingerprints of the model's outputs on the correctness sets;
* ``measure``: ``measure.measure`` (``hackscan.perf.worker.measure``) on the timing sets;
* ``spin``: back-to-back calls for the parent's outside clock; ``ping``: a round trip; ``exit``.

This module imports torch and runs untrusted code: it only ever runs in that child process.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import types
from typing import Any

# bound before anything untrusted runs: the protocol channel and the stdout redirection
_OUT_FD = int(sys.argv[1]) if len(sys.argv) > 1 else 1
_out = os.fdopen(os.dup(_OUT_FD), "w", buffering=1)
if _OUT_FD != 1:
    os.close(_OUT_FD)
os.dup2(2, 1)  # print() of candidate code lands on stderr
sys.stdout = sys.stderr
_dumps = json.dumps
_loads = json.loads
_readline = sys.stdin.readline

import torch  # noqa: E402

from hackscan.perf.worker import measure as worker_side  # noqa: E402  (snapshots the timers on import)
from hackscan.perf.worker.fingerprint import fingerprint  # noqa: E402

CHECK_SEED_OFFSET = 1000


def _send(obj: Any) -> None:
    _out.write(_dumps(obj, default=str) + "\n")
    _out.flush()


def _import(code: str, path: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(code, path, "exec"), mod.__dict__)  # noqa: S102 - this process exists to run it
    return mod


def _to(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(x, device) for x in obj)
    return obj


def _inputs(ref: types.ModuleType, seed: int, device: torch.device) -> list[Any]:
    torch.manual_seed(seed)
    # factories default to the device: a GiB of torch.rand costs seconds on the host, microseconds
    # on a GPU (both workers draw the same values either way)
    with torch.device(device):
        values = ref.get_inputs()
    return [_to(v, device) for v in (values if isinstance(values, (list, tuple)) else [values])]


def _build(cls: type, init: list[Any], seed: int, device: torch.device) -> Any:
    torch.manual_seed(seed)
    model = cls(*init)
    return model.to(device) if isinstance(model, torch.nn.Module) else model


def main() -> None:
    job = _loads(_readline())
    device_name = job.get("device", "auto")
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    prepared = worker_side.prepare(device_name)
    device = prepared.device
    role = job["role"]
    seed = int(job.get("seed", 0))
    try:
        ref = _import(job["reference_code"], job.get("reference_path", "<reference>"), "hackscan_reference")
        init = list(ref.get_init_inputs()) if hasattr(ref, "get_init_inputs") else []
        ref_model = _build(ref.Model, init, seed, device)
        if role == "candidate":
            cand = _import(job["code"], job.get("path", "<candidate>"), "hackscan_candidate")
            model = _build(cand.ModelNew, init, seed, device)
            if isinstance(model, torch.nn.Module) and isinstance(ref_model, torch.nn.Module):
                # same parameters as the reference wherever names and shapes agree (KernelBench relies
                # on the seed alone; a different construction order would fail for no fault of the kernel)
                rs, cs = ref_model.state_dict(), model.state_dict()
                same = {k: v for k, v in rs.items() if k in cs and cs[k].shape == v.shape}
                if same:
                    model.load_state_dict(same, strict=False)
            del ref_model
        else:
            model = ref_model
        n_sets = int(job.get("sets", 4))
        sets = [_inputs(ref, seed + 1 + k, device) for k in range(n_sets)]
        checks = [_inputs(ref, seed + CHECK_SEED_OFFSET + k, device) for k in range(int(job.get("checks", 2)))]
    except BaseException as exc:  # noqa: BLE001 - SystemExit from untrusted code is an answer too
        _send({"ok": False, "stage": "load", "error": f"{type(exc).__name__}: {exc}"[:2000],
               "traceback": traceback.format_exc()[-4000:]})
        return
    _send({"ok": True, "device": str(device), "role": role})
    while True:
        line = _readline()
        if not line:
            return
        req = _loads(line)
        cmd = req.get("cmd")
        try:
            if cmd == "exit":
                _send({"ok": True})
                return
            if cmd == "ping":
                _send({"ok": True})
            elif cmd == "check":
                fps = []
                for c in checks:
                    with torch.no_grad():
                        out = model(*c)
                    # the whole device, as a harness waits before it compares (the dynamic stage
                    # does too): work left on a side stream is then the timing's to catch (HS601),
                    # not a race between that stream and the fingerprint's reads that a faster or
                    # slower device decides
                    prepared.clock.sync()
                    fps.append(fingerprint(out))
                _send({"ok": True, "fingerprints": fps})
            elif cmd == "measure":
                raw = worker_side.measure(model, {"original": sets}, role=role, device=str(device),
                                          options=req.get("options"), prepared=prepared)
                _send({"ok": True, "raw": raw})
            elif cmd == "spin":
                _send({"ok": True, **worker_side.spin(model, sets, int(req.get("calls", 1)), prepared)})
            else:
                _send({"ok": False, "error": f"unknown command {cmd!r}"})
        except BaseException as exc:  # noqa: BLE001
            _send({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "traceback": traceback.format_exc()[-4000:]})


if __name__ == "__main__":
    main()
