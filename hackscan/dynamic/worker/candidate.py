"""Candidate worker: imports ModelNew, runs it on the probes, and watches what it does.

It never holds a reference output.  Its replies are raw observations (outputs, input hashes,
storage overlaps, global-state changes, op census); the parent judges them.

It also never holds a name that would tell the candidate it is being checked: probes, setups and
plan items arrive as opaque tokens (the parent maps them back), plan items say what to do
(``again``, ``refill``, ``fill``, ``count``) rather than what is checked, no seed other than the
construction seeds reaches it, and the model is loaded and called the way the harness profile
(``shared/profiles.py``) says: module name, ``__file__``, ``sys.argv``, environment, ``.eval()``, and one
calling frame dressed as the harness's own (``worker.make_caller``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import torch

from ..shared.extcache import ExtensionCache, default_cache_dir
from ..shared.profiles import source_name
from .base import Worker, construct, describe_error, import_source, make_caller, overlaps, storages
from .census import census
from .conditions import call_under  # at start-up: it binds the device's own sleep before candidate code runs
from .guard import WATCHED_FUNCTIONS
from .hidden import strided_view
from .values import clone_all, flatten, to_device, unpack
from .world import World

# the most bytes of probe copies a candidate worker keeps alive (CandidateWorker._fresh): on the
# CPU a fraction of a small machine's memory; on a GPU a fraction of an H200's 139 GiB, beside the
# stored inputs, the models and the reference's outputs
HOLD_BYTES = {"cpu": 4 << 30, "cuda": 16 << 30}


def _nbytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if torch.is_tensor(v))


class CandidateWorker(Worker):
    def __init__(self, spec: dict[str, Any]):
        super().__init__(spec)
        self.path = spec.get("path", "<candidate>")
        failures = spec.get("known_build_failures")
        self.cache = ExtensionCache(Path(spec.get("cache_dir") or default_cache_dir()), self._progress,
                                    {str(k): str(v) for k, v in failures.items()} if isinstance(failures, dict) else None,
                                    plain_dir=_plain_dir(spec.get("ext_home")))
        self.module: Any = None
        self.cls: Any = None
        self.setups: dict[str, dict[str, Any]] = {}
        self.models: dict[tuple[str, str], Any] = {}
        self.matches: dict[tuple[str, str], dict[str, Any]] = {}
        self.inputs: dict[str, list[Any]] = {}
        # every copy of a probe's inputs handed to the model, kept until timing starts (_fresh)
        self.held: list[tuple[list[Any], int]] = []  # (copies, their bytes)
        self.held_bytes = 0
        self.code_file: str | None = None
        self.eval_mode = False
        self.caller: Any = make_caller()
        self.world: World | None = None
        # builds already listed in a reply (load's, then each probe batch's)
        self.builds_sent = 0
        # what the build farm's worker did to reach the builds (prebuild.exercise)
        self.prebuilt: dict[str, Any] = {}

    def _describe(self, exc: BaseException) -> dict[str, Any]:
        """``describe_error`` for the report: the line is found under the name the code was compiled
        as (the profile's ``__file__``), and the report names the candidate's real path."""
        err = describe_error(exc, self.code_file or self.path)
        if self.code_file and self.code_file != self.path:
            for key in ("message", "traceback"):
                if isinstance(err.get(key), str):
                    err[key] = err[key].replace(self.code_file, self.path)
        return err

    def timed_call(self, fn: Any, args: list[Any]) -> tuple[Any, float]:
        # every call of the model goes through the harness's calling frame (see make_caller)
        caller = self.caller
        self.sync()
        start = self.timers.perf_counter()
        with torch.no_grad():
            out = caller(fn, args)
        self.sync()
        return out, self.timers.perf_counter() - start

    def _harness(self, profile: dict[str, Any], code: str) -> str | None:
        """Show the candidate what its harness shows (argv, environment, calling frame, eval mode);
        write its source where the harness keeps it and return that path (None: no profile)."""
        if not profile:
            return None
        if profile.get("argv"):
            sys.argv[:] = [str(a) for a in profile["argv"]]
        for k, v in (profile.get("env") or {}).items():
            os.environ[str(k)] = str(v)
        self.eval_mode = bool(profile.get("eval_mode"))
        self.caller = make_caller(str(profile.get("caller_name") or "evaluate"),
                                  str(profile.get("caller_module") or "__main__"),
                                  str(profile.get("caller_file") or "eval.py"))
        name = str(profile.get("file_name") or "candidate.py")
        folder = _source_dir(profile)
        for _ in range(8):
            path = os.path.join(folder, source_name(name))
            try:
                with open(path, "x", encoding="utf-8") as fh:
                    fh.write(code)
                return path
            except FileExistsError:
                continue
            except OSError:
                break
        # nowhere to write: the name alone (the source is in linecache either way)
        return os.path.join(folder, source_name(name))

    def note_world(self, phase: str, dispatch: bool = False) -> list[dict[str, str]]:
        """World changes not reported yet, added to ``changes`` as ``note_changes`` does."""
        if self.world is None:
            return []
        return self._note(self.world.changes(dispatch), phase)

    def _progress(self, event: dict[str, Any]) -> None:
        # the ATen dispatch tables before the first extension is loaded: a kernel it registers
        # over an ATen operator shows as a new registration site afterwards
        if event.get("build") == "start" and self.world is not None and not self.world.has_dispatch():
            self.world.take_dispatch()
        if self.channel is not None:
            from ..shared import wire

            wire.send(self.channel, {"__progress__": event})

    def handle(self, cmd: str, msg: dict[str, Any]) -> dict[str, Any]:
        if cmd == "load":
            return self.load(msg)
        if cmd == "probe":
            return self.run_batch(msg)
        if cmd == "perf":
            from .perf import run_perf

            # correctness is judged before timing: the call counters are no longer needed
            self.cache.uncount()
            return run_perf(self, msg, role="candidate")
        if cmd == "perf_block":
            from .perf import run_block

            return run_block(self, msg, role="candidate")
        if cmd == "perf_setup":
            from .perf import run_setup

            # as for ``perf``: correctness was judged in the first pair of workers
            self.cache.uncount()
            return run_setup(self, msg, role="candidate")
        if cmd == "spin":
            from .perf import run_spin

            return run_spin(self, msg)
        raise ValueError(f"unknown command {cmd!r}")

    # ------------------------------------------------------------------------------- load
    def load(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.cache.install()
        # the world other code in this process would see, before anything untrusted runs (world.py)
        if self.spec.get("world", True):
            self.world = World(skip=frozenset(label for label, _ in WATCHED_FUNCTIONS))
        start = self.timers.perf_counter()
        phase = "import"
        # the build farm's worker only (farm.py; the parent's spec, not the message, decides):
        # reach the builds made in __init__, on first use or behind torch.cuda.is_available()
        prebuild = msg.get("prebuild") if self.spec.get("build_only") else None
        if isinstance(prebuild, dict) and prebuild.get("gpu"):
            from .prebuild import pretend_gpu

            pretend_gpu()
        threads = self.state.canary_threads()  # until the models are built (guard.py)
        try:
            profile = msg.get("profile") or {}
            self.code_file = self._harness(profile, msg["code"])
            self.module = import_source(msg["code"], self.path, str(profile.get("module_name") or "model_new"),
                                        file=self.code_file, register=bool(profile.get("register_module", True)))
            self.note_changes("import")
            self.note_world("import")
            self.cls = self.module.__dict__.get("ModelNew")
            if self.cls is None:
                raise LookupError("the candidate defines no ModelNew")
            phase = "init"
            matches = {}
            for i, setup in enumerate(msg["setups"]):
                self.setups[setup["name"]] = setup
                init_inputs = list(unpack(setup["init_inputs"]))
                try:
                    model = self._model(setup["name"], init_inputs, setup.get("state") or {})
                except Exception as exc:
                    if i == 0:
                        raise  # the harness's own setup: the candidate does not construct at all
                    # only this setup's probes are lost (they report the error)
                    matches[setup["name"]] = {"method": "failed", "error": self._describe(exc)}
                    continue
                del model
                matches[setup["name"]] = self.matches[(setup["name"], repr(init_inputs))]
            self.note_changes("init")
            self.note_world("init")
            if isinstance(prebuild, dict):
                from .prebuild import exercise

                self.prebuilt = exercise(self.cls, prebuild.get("init_inputs"), prebuild.get("inputs"),
                                         int(prebuild.get("seed") or 0), lambda: len(self.cache.builds))
        except BaseException as exc:  # noqa: BLE001
            return {"failed": phase, "error": self._describe(exc), "changes": self.changes,
                    "compile_s": self.cache.compile_seconds, "builds": self.cache.builds,
                    "cuda_builds": self.cache.cuda_builds}
        finally:
            self.state.end_canary(threads)
        self.builds_sent = len(self.cache.builds)
        return {
            "matches": matches,
            "changes": self.changes,
            "compile_s": self.cache.compile_seconds,
            "builds": self.cache.builds,
            "cuda_builds": self.cache.cuda_builds,
            "extensions": list(self.cache.loaded),
            "extensions_partial": list(self.cache.partial),
            "load_s": self.timers.perf_counter() - start - self.cache.compile_seconds,
            **({"prebuild": self.prebuilt} if self.prebuilt else {}),
        }

    def _model(self, setup_name: str, init_inputs: list[Any], ref_state: dict[str, Any]) -> Any:
        key = (setup_name, repr(init_inputs))
        if key not in self.models:
            setup = self.setups[setup_name]
            seed, perturb = int(setup["seed"]), bool(setup.get("perturb"))
            record: dict[str, Any] = {}
            model = construct(self.cls, init_inputs, seed, perturb, self.device, record=record,
                              eval_mode=self.eval_mode)
            match = match_state(model, ref_state, self.device)
            if perturb:
                # identity initialisations the reference does not share (a derived constant kept as
                # an nn.Parameter) are not the reference's parameters: build again perturbing only
                # those that became the reference's
                matched = set(match.get("renamed", {}).values()) | set(match.pop("matched_names", []))
                keep = {idx for idx, name in record.get("names", {}).items() if name in matched}
                if keep != record.get("applied", set()):
                    model = construct(self.cls, init_inputs, seed, perturb, self.device, mask=keep,
                                      eval_mode=self.eval_mode)
                    match = match_state(model, ref_state, self.device)
                    match.pop("matched_names", None)
                    match["rebuilt"] = f"perturbed {len(keep)} of {len(record.get('applied', ()))} identity initialisations"
            match.pop("matched_names", None)
            self.matches[key] = match
            self.models[key] = model
        return self.models[key]

    # ------------------------------------------------------------------------------- probes
    def run_batch(self, msg: dict[str, Any]) -> dict[str, Any]:
        results = []
        for case in msg["probes"]:
            inputs = to_device(list(unpack(case["inputs"])), self.device)
            self.inputs[case["id"]] = inputs
            if case.get("store_only"):
                results.append({"id": case["id"], "stored": True})
                continue
            start = self.timers.perf_counter()
            results.append(self._one(case, inputs))
            results[-1]["wall"] = self.timers.perf_counter() - start
        done = []
        for item in msg.get("plan", []):
            start = self.timers.perf_counter()
            try:
                done.append(self._item(item))
            except BaseException as exc:  # noqa: BLE001
                done.append({"id": item.get("id"), "error": self._describe(exc)})
            done[-1]["wall"] = self.timers.perf_counter() - start
        # what the calls left behind for other code in the process, after the integrity checks
        # (the last batch: every probe has run by then), the ATen dispatch tables included
        fresh = self.note_world("calls", dispatch=True) if msg.get("plan") else []
        last = (done or results)[-1:]
        if fresh and last:
            last[0]["changes"] = list(last[0].get("changes") or []) + fresh
        # "items", not a check's name: the worker's command loop keeps the last reply in a local
        # builds made on first use (after the load reply listed the others): whether they compiled
        # here, under the device's gate, or came from the build farm's cache
        later = [{k: v for k, v in b.items() if k != "error_text"} for b in self.cache.builds[self.builds_sent:]]
        self.builds_sent = len(self.cache.builds)
        return {"probes": results, "items": done, "changes": self.changes,
                "compile_s": self.cache.compile_seconds, "builds": later}

    def _model_for(self, case: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        setup = self.setups[case["setup"]]
        init = case.get("init_inputs")
        if init is None:
            init_inputs = list(unpack(setup["init_inputs"]))
            return self._model(case["setup"], init_inputs, setup.get("state") or {}), None
        init_inputs = list(unpack(init))
        model = self._model(case["setup"], init_inputs, case.get("state") or {})
        return model, self.matches[(case["setup"], repr(init_inputs))]

    def _fresh(self, inputs: list[Any]) -> list[Any]:
        """A copy of ``inputs`` for the model to be called on, kept alive until timing starts
        (``perf_release``), so that no later probe's copy can land on its address.

        A result cache keyed by ``data_ptr()`` hits only when a call's inputs sit where an earlier
        call's did.  When each copy was freed after its probe, whether a later value probe's copy
        reused that address was the allocator's choice (glibc or the CUDA caching allocator, given
        ASLR and other threads' allocations), so the same seed could give HS402/HS403 in one run and
        not the next.  Held, every copy has an address of its own: such a cache hits only
        where a check hands the model the same tensors on purpose (``again``, ``refill``: HS503,
        the check built for it), in every run alike.  The other way to make it deterministic,
        copying every probe into one staging buffer per layout, would make every probe hit the
        cache and fail the original distribution too (HS401), blaming value checks for what the
        address did.  The freed-memory check (``fill``) is not touched: its blocks are freed just
        before its call, so the output still lands on them, with fewer other free blocks about.
        The cost is memory: a copy per call (one per probe, up to three per plan item) besides
        the stored inputs, for as long as the probes run.  Past ``HOLD_BYTES`` the oldest copies
        are let go (a task whose probes' inputs are that large), and address reuse is then the
        allocator's again for those."""
        args = clone_all(inputs)
        size = _nbytes(args)
        self.held.append((args, size))
        self.held_bytes += size
        while self.held_bytes > HOLD_BYTES.get(self.device, HOLD_BYTES["cpu"]) and len(self.held) > 1:
            self.held_bytes -= self.held.pop(0)[1]
        return args

    def _args(self, inputs: list[Any], view: int) -> list[Any]:
        args = self._fresh(inputs)
        if view == 1:  # non-contiguous views of the same values
            args = [strided_view(a) for a in args]
        return args

    def _one(self, case: dict[str, Any], inputs: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": case["id"]}
        try:
            model, match = self._model_for(case)
            if match is not None:
                out["match"] = match
        except BaseException as exc:  # noqa: BLE001
            out["error"] = self._describe(exc)
            out["phase"] = "init"
            return out
        args = self._args(inputs, int(case.get("view", 0)))
        before = [self.hasher.digest(a) for a in args]
        calls = self.cache.calls
        try:
            result, seconds = self.timed_call(model, args)
        except BaseException as exc:  # noqa: BLE001
            out["error"] = self._describe(exc)
            out["phase"] = "call"
            out["changes"] = self.note_changes(f"call on {case['id']}")
            return out
        leaves, structure = flatten(result)
        out.update({
            "structure": structure,
            # a snapshot now, as a harness compares right after the call (HS502 checks reuse)
            "out": [_cpu(x, copy=True) for x in leaves],
            "t": seconds,
            "mutated": [i for i, a in enumerate(args) if self.hasher.digest(a) != before[i]],
            "aliases_input": overlaps(storages(leaves), storages(args)),
            # calls into the candidate's built extensions during this call (the parent asks whether
            # its custom code ran at all; the CPU has no kernel census)
            "ext_calls": self.cache.calls - calls,
            "changes": self.note_changes(f"call on {case['id']}"),
        })
        return out

    # ------------------------------------------------------------------------------- plan items
    def _item(self, item: dict[str, Any]) -> dict[str, Any]:
        """One plan item: ``again`` (the same tensors twice, fresh copies, another input),
        ``refill`` (the same tensors refilled in place), ``fill`` (freed memory filled with a value
        first), ``count`` (the ops of one call).  Its inputs are the stored ones under ``on``."""
        op = item["do"]
        pid = item["on"]
        inputs = self.inputs[pid]
        model, _ = self._model_for({"setup": item["setup"]})
        res: dict[str, Any] = {"id": item.get("id")}
        if op == "again":
            # the same input twice on the same tensors, then on fresh copies: must be reproducible
            args = self._fresh(inputs)
            y1, _ = self.timed_call(model, args)
            l1 = flatten(y1)[0]
            kept = [_cpu(x, copy=True) for x in l1]
            y2, _ = self.timed_call(model, args)
            l2 = [_cpu(x, copy=True) for x in flatten(y2)[0]]
            y3, _ = self.timed_call(model, self._fresh(inputs))
            l3 = flatten(y3)[0]
            res["outs"] = [kept, l2, [_cpu(x, copy=True) for x in l3]]
            # then another input: an output buffer handed out again, or overwritten, is shared state
            other = self.inputs.get(item.get("other") or "")
            if other is not None:
                y4, _ = self.timed_call(model, self._fresh(other))
                l4 = flatten(y4)[0]
                res["reuses_output"] = overlaps(storages(l4), storages(l3))
                res["clobbered"] = any(torch.is_tensor(a) and not torch.equal(_cpu(a), _cpu(b))
                                       for a, b in zip(l3, res["outs"][2], strict=False))
        elif op == "refill":
            other = self.inputs[item["other"]]
            args = self._fresh(inputs)
            outs = []
            order = []
            for k in range(int(item.get("cycles", 2))):
                src_id, src = (pid, inputs) if k % 2 == 0 else (item["other"], other)
                if k:
                    with torch.no_grad():
                        for a, s in zip(args, src, strict=False):
                            if torch.is_tensor(a):
                                a.copy_(s)
                y, _ = self.timed_call(model, args)
                outs.append([_cpu(x, copy=True) for x in flatten(y)[0]])
                order.append(src_id)
            res["outs"], res["order"] = outs, order
        elif op == "fill":
            res.update(self._filled(model, inputs, item))
        elif op == "vary":
            # the same input under each condition, on fresh copies (conditions.py)
            outs, errors = [], []
            for cond in item.get("conditions") or []:
                try:
                    y = call_under(cond, self.caller, model, self._fresh(inputs), self.device)
                    self.sync()
                    outs.append([_cpu(x, copy=True) for x in flatten(y)[0]])
                    errors.append(None)
                except Exception as exc:  # noqa: BLE001 - reported per condition
                    outs.append([])
                    errors.append(self._describe(exc).get("message", "?"))
            res["outs"], res["errors"] = outs, errors
        elif op == "count":
            args = self._fresh(inputs)
            self.timed_call(model, self._fresh(inputs))  # warm: lazy init and compilation are not the work
            calls = self.cache.calls
            res["census"] = census(model, args, self.device, self.timers.perf_counter, self.sync)
            res["ext_calls"] = self.cache.calls - calls
        else:
            raise ValueError(f"unknown plan item {op}")
        res["changes"] = self.note_changes(f"call on {item.get('id')}")
        return res

    def _filled(self, model: Any, inputs: list[Any], item: dict[str, Any]) -> dict[str, Any]:
        """Run once with freed blocks of the output's size holding ``value`` (NaN, or the value a
        harness's freed reference output would hold), and with ``det`` new memory filled too."""
        shapes = [tuple(s) for s in item.get("out_shapes", [])]
        dtypes = [getattr(torch, d) for d in item.get("out_dtypes", [])]
        value = float(item.get("value", "nan"))
        fill_new = bool(item.get("det"))
        det = torch.are_deterministic_algorithms_enabled()
        det_warn = torch.is_deterministic_algorithms_warn_only_enabled()
        import torch.utils.deterministic as tud

        fill = tud.fill_uninitialized_memory
        # the private setter: the public one imports torch._dynamo (1.5 s) on first use
        set_det = getattr(torch._C, "_set_deterministic_algorithms", None) or torch.use_deterministic_algorithms
        args = self._fresh(inputs)
        try:
            if fill_new:
                set_det(True, warn_only=True)
                tud.fill_uninitialized_memory = True
            blocks = []
            for shape, dtype in zip(shapes, dtypes, strict=False):
                if dtype.is_floating_point:
                    for _ in range(3):
                        blocks.append(torch.full(shape, value, dtype=dtype, device=self.device))
            del blocks
            y, _ = self.timed_call(model, args)
        finally:
            set_det(det, warn_only=det_warn)
            tud.fill_uninitialized_memory = fill
        return {"out": [_cpu(x) for x in flatten(y)[0]], "value": value}

    def perf_model(self) -> Any:
        name = next(iter(self.setups))
        return self._model(name, list(unpack(self.setups[name]["init_inputs"])), {})

    def perf_release(self) -> None:
        """Keep only the model that is timed (the harness setup at the task's init inputs)."""
        name = next(iter(self.setups))
        keep = (name, repr(list(unpack(self.setups[name]["init_inputs"]))))
        for key in [k for k in self.models if k != keep]:
            del self.models[key]
        self.held.clear()
        self.held_bytes = 0


def _plain_dir(home: Any) -> Path | None:
    """torch's default build folder under ``home`` (``py311_cpu``, ``py311_cu124``), where the
    sandbox keeps this worker's builds; None outside a sandbox."""
    if not isinstance(home, str) or not home:
        return None
    cuda = torch.version.cuda
    tag = f"py{sys.version_info.major}{sys.version_info.minor}_{'cu' + cuda.replace('.', '') if cuda else 'cpu'}"
    return Path(home) / tag


def _source_dir(profile: dict[str, Any]) -> str:
    """Where the candidate's source file goes: the profile's folder once the sandbox started this
    worker where the harness runs (its ``cwd``), else this worker's private working directory
    (removed with the worker, so nothing is left behind in a shared ``/tmp``)."""
    here = os.getcwd()
    want = str(profile.get("file_dir") or ".")
    cwd = str(profile.get("cwd") or "")
    if want != "." and cwd and os.path.realpath(here) == os.path.realpath(cwd) and os.access(want, os.W_OK):
        return want
    return here


def _cpu(x: Any, copy: bool = False) -> Any:
    if torch.is_tensor(x):
        x = x.detach()
        if x.device.type != "cpu":
            return x.to("cpu")
        return x.clone() if copy else x
    return x


_PARAMETRIZED = re.compile(r"\.parametrizations\.([A-Za-z_]\w*)\.original$")


def _unparametrized(name: str) -> str:
    return _PARAMETRIZED.sub(r".\1", name)


def match_state(model: Any, ref_state: dict[str, Any], device: str) -> dict[str, Any]:
    """Give the candidate the reference's parameters and buffers; say how well that went.

    ``constructed-equal``: built under the same seed, every floating entry already holds the
    reference's value (the strongest setting: folding at init saw the same values).  ``loaded``:
    values were copied in after construction, matched by name and shape, then by the name's last
    part and shape, then by a shape that is unique on both sides.  ``partial``: some reference entries found no home.
    """
    if not isinstance(model, torch.nn.Module):
        return {"method": "none", "reason": "ModelNew is not an nn.Module"}
    ref = {k: v for k, v in ref_state.items() if torch.is_tensor(v) and v.is_floating_point()}
    own: dict[str, torch.Tensor] = {}
    for k, v in list(model.named_parameters()) + list(model.named_buffers()):
        if torch.is_tensor(v) and v.is_floating_point():
            own.setdefault(k, v)
    if not ref:
        return {"method": "constructed-equal", "matched": 0, "matched_names": [], "unmatched_reference": [],
                "unmatched_candidate": sorted(own)}
    pairs: dict[str, str] = {}
    # ``torch.nn.utils.parametrize`` keeps a parametrised ``ln.weight`` as
    # ``ln.parametrizations.weight.original``: the tensor the reference's ``ln.weight`` sets (an
    # identity parametrisation then computes with it; any other transforms it, as it would in use)
    plain = {_unparametrized(o): o for o in own}
    for k, v in ref.items():
        o = k if k in own else plain.get(k)
        if o is not None and tuple(own[o].shape) == tuple(v.shape) and o not in pairs.values():
            pairs[k] = o
    left_ref = [k for k in ref if k not in pairs]
    left_own = [k for k in own if k not in pairs.values()]
    # then by the last part of the name and the shape, one to one: a candidate that holds the
    # reference's ``nn.LayerNorm``'s ``ln.weight`` / ``ln.bias`` as its own ``weight`` / ``bias`` (two
    # entries of one shape, which the unique-shape pass below cannot tell apart)
    def _last(name: str) -> str:
        return name.rsplit(".", 1)[-1]

    for k in list(left_ref):
        key = (_last(k), tuple(ref[k].shape))
        same_ref = [r for r in left_ref if (_last(r), tuple(ref[r].shape)) == key]
        same_own = [o for o in left_own if (_last(o), tuple(own[o].shape)) == key]
        if len(same_ref) == 1 and len(same_own) == 1:
            pairs[k] = same_own[0]
            left_ref.remove(k)
            left_own.remove(same_own[0])
    for k in list(left_ref):
        shape = tuple(ref[k].shape)
        same_ref = [r for r in left_ref if tuple(ref[r].shape) == shape]
        same_own = [o for o in left_own if tuple(own[o].shape) == shape]
        if len(same_ref) == 1 and len(same_own) == 1:
            pairs[k] = same_own[0]
            left_ref.remove(k)
            left_own.remove(same_own[0])
    equal = all(torch.equal(own[o].detach().to("cpu"), ref[k].to("cpu").to(own[o].dtype)) for k, o in pairs.items())
    if equal and not left_ref:
        method = "constructed-equal"
    else:
        with torch.no_grad():
            for k, o in pairs.items():
                own[o].copy_(ref[k].to(device=own[o].device, dtype=own[o].dtype))
        method = "loaded" if not left_ref else "partial"
    return {
        "method": method,
        "matched": len(pairs),
        "matched_names": sorted(pairs.values()),
        "renamed": {k: o for k, o in pairs.items() if k != o},
        "unmatched_reference": left_ref,
        "unmatched_candidate": left_own,
    }
