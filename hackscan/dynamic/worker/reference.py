"""Reference worker: builds the hidden inputs and the reference's fp32 and fp64 outputs.

The reference may be the candidate's own file (it defines ``Model`` too), so it is imported only
here, never in the parent, and its outputs go to the parent only: the candidate worker never sees
them.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from .base import Worker, construct, describe_error, import_source, overlaps, storages
from .hidden import apply_transform, as_list, discover_dims, with_globals
from .values import clone_all, flatten, pack, to_device, to_double, unpack


class ReferenceWorker(Worker):
    def __init__(self, spec: dict[str, Any]):
        super().__init__(spec)
        self.module: Any = None
        self.path = spec.get("path", "<reference>")
        self.setups: dict[str, dict[str, Any]] = {}
        # (setup, init key) -> (fp32 model, fp64 model or None)
        self.models: dict[tuple[str, str], list[Any]] = {}
        self.init_inputs: list[Any] = []
        self.inputs: dict[str, list[Any]] = {}
        # probe id -> (setup, init inputs): what the lazy extras need to run that probe again
        self.contexts: dict[str, tuple[str, list[Any]]] = {}

    # ------------------------------------------------------------------------------- commands
    def handle(self, cmd: str, msg: dict[str, Any]) -> dict[str, Any]:
        if cmd == "load":
            return self.load(msg)
        if cmd == "draw":
            return self.draw(msg)
        if cmd == "probe":
            return self.probe(msg)
        if cmd == "extras":
            return self.extras(msg)
        if cmd == "perf":
            from .perf import run_perf

            return run_perf(self, msg, role="reference")
        if cmd == "perf_compile":
            from .perf import run_compile

            return run_compile(self, msg)
        if cmd == "perf_block":
            from .perf import run_block

            return run_block(self, msg, role="reference")
        if cmd == "perf_setup":
            from .perf import run_setup

            return run_setup(self, msg, role="reference")
        if cmd == "spin":
            from .perf import run_spin

            return run_spin(self, msg)
        raise ValueError(f"unknown command {cmd!r}")

    def draw(self, msg: dict[str, Any]) -> dict[str, Any]:
        """For the build farm: ``get_init_inputs()`` and one ``get_inputs()`` draw under ``seed``
        (the harness's construction seed), the draw only up to ``max_bytes``.  The farm's candidate
        worker gets these values instead of the reference's source, which must never enter a
        process the candidate's code runs in (it could smuggle it to its real worker through the
        build cache and compute the right answer there)."""
        module = import_source(msg["code"], self.path, "reference_module")
        ns = module.__dict__
        get_init = ns.get("get_init_inputs")
        torch.manual_seed(int(msg["seed"]))
        init = as_list(get_init()) if get_init is not None else []
        out: dict[str, Any] = {"init_inputs": pack(init)}
        if callable(ns.get("get_inputs")):
            torch.manual_seed(int(msg["seed"]))
            inputs = as_list(ns["get_inputs"]())
            size = sum(int(x.numel() * x.element_size()) for x in inputs if torch.is_tensor(x))
            out["inputs"] = pack(inputs) if size <= int(msg.get("max_bytes", 1 << 30)) else None
            out["input_bytes"] = size
        return out

    def load(self, msg: dict[str, Any]) -> dict[str, Any]:
        # a neutral module name: the reference may be the candidate's own file
        self.module = import_source(msg["code"], self.path, "reference_module")
        ns = self.module.__dict__
        missing = [n for n in ("Model", "get_inputs") if n not in ns]
        if missing:
            raise LookupError(f"the reference defines no {' or '.join(missing)}")
        self.note_changes("reference import")
        get_init = ns.get("get_init_inputs")
        torch.manual_seed(int(msg["seed"]))
        self.init_inputs = as_list(get_init()) if get_init is not None else []
        dims = discover_dims(ns, ns["get_inputs"], get_init)
        states = {}
        for setup in msg["setups"]:
            self.setups[setup["name"]] = setup
            model = self._model(setup["name"], self.init_inputs)
            states[setup["name"]] = self._state(model)
        # one call on task-shaped inputs: a warm-up, and the cost estimate the parent plans with
        torch.manual_seed(int(msg["seed"]))
        base = to_device(as_list(ns["get_inputs"]()), self.device)
        model32, model64 = self._pair(msg["setups"][0]["name"], self.init_inputs)
        out, first = self.timed_call(model32, clone_all(base))
        out_numel = sum(x.numel() for x in flatten(out)[0] if torch.is_tensor(x))
        del out
        _, t32 = self.timed_call(model32, clone_all(base))
        t32 = min(first, t32)
        t64 = None
        if model64 is not None:
            try:
                _, t64 = self._call64(model64, base)
            except Exception:  # float64 does not work for this model: compare against float32
                self.models[(msg["setups"][0]["name"], repr(self.init_inputs))][1] = None
        numel = sum(v.numel() for v in base if torch.is_tensor(v))
        return {
            "dims": dims,
            "init_inputs": pack(self.init_inputs),
            "states": states,
            "t32": t32,
            "t64": t64,
            "input_numel": numel,
            "output_numel": out_numel,
            "input_shapes": [list(v.shape) if torch.is_tensor(v) else None for v in base],
            "input_dtypes": [str(v.dtype).replace("torch.", "") if torch.is_tensor(v) else type(v).__name__
                             for v in base],
            "changes": self.changes,
        }

    def probe(self, msg: dict[str, Any]) -> dict[str, Any]:
        ns = self.module.__dict__
        results = []
        for p in msg["probes"]:
            start = self.timers.perf_counter()
            try:
                results.append(self._one(p, ns))
                results[-1]["wall"] = self.timers.perf_counter() - start
            except Exception as exc:  # the reference fails on this probe: skipped, never passed
                err = describe_error(exc, self.path)
                results.append({"id": p["id"], "skipped": f"the reference fails on it: {err['message'][-300:]}"})
        return {"probes": results, "changes": self.changes}

    # ------------------------------------------------------------------------------- internals
    def _one(self, p: dict[str, Any], ns: dict[str, Any]) -> dict[str, Any]:
        dims = {k: (tuple(v) if isinstance(v, list) else v) for k, v in (p.get("dims") or {}).items()}
        init_inputs = self.init_inputs
        changed_init = False
        # a probe that transforms another probe's draw (``nudged``) draws with that probe's seed
        draw_seed = int(p.get("draw_seed", p["seed"]))
        if dims and ns.get("get_init_inputs") is not None:
            torch.manual_seed(draw_seed)
            init_inputs = as_list(with_globals(ns["get_init_inputs"], dims)())
            changed_init = repr(init_inputs) != repr(self.init_inputs)
        torch.manual_seed(draw_seed)
        raw = as_list(with_globals(ns["get_inputs"], dims)())
        inputs = to_device(apply_transform(raw, p["transform"], int(p["seed"]), p.get("draw")), self.device)
        self.inputs[p["id"]] = inputs
        model32, model64 = self._pair(p["setup"], init_inputs)
        args = clone_all(inputs)
        before = [self.hasher.digest(a) for a in args]
        out, t32 = self.timed_call(model32, args)
        leaves32, structure = flatten(out)
        mutated = [i for i, a in enumerate(args) if self.hasher.digest(a) != before[i]]
        aliases = overlaps(storages(leaves32), storages(args))
        reply: dict[str, Any] = {
            "id": p["id"],
            "inputs": [pack(v) for v in inputs],
            "structure": structure,
            "out32": [_detach(x) for x in leaves32],
            "t32": t32,
            "mutates_inputs": mutated,
            "aliases_input": aliases,
        }
        self.contexts[p["id"]] = (p["setup"], init_inputs)
        if p.get("census"):
            from .census import census

            try:
                reply["census"] = census(model32, clone_all(inputs), self.device, self.timers.perf_counter, self.sync)
            except Exception as exc:  # the census is evidence, not a requirement
                reply["census"] = {"error": f"{type(exc).__name__}: {exc}"}
        if model64 is not None:
            try:
                out64, t64 = self._call64(model64, inputs)
                reply["out64"] = [_detach(x) for x in flatten(out64)[0]]
                reply["t64"] = t64
            except Exception as exc:
                reply["no64"] = f"{type(exc).__name__}: {exc}"[:300]
        if changed_init:
            reply["init_inputs"] = pack(init_inputs)
            reply["state"] = self._state(model32)
        return reply

    def extras(self, msg: dict[str, Any]) -> dict[str, Any]:
        """What only some comparisons need, computed when the parent asks: the reduced-precision
        run (for a candidate beyond float32 level) and a second float32 run (for a candidate that
        is not bitwise reproducible).  On a heavy task each costs as much as a probe."""
        out: dict[str, dict[str, Any]] = {}
        for pid in msg.get("rounded", []):
            if pid not in self.contexts:
                continue
            setup, init_inputs = self.contexts[pid]
            model32 = self._model(setup, init_inputs)
            model_q = self._rounded(setup, init_inputs, model32)
            if model_q is None:
                continue
            # what a reduced-precision implementation gets: inputs, parameters and output rounded
            # to TF32 / fp16 precision (10 mantissa bits)
            try:
                out_q, _ = self.timed_call(model_q, [_round_reduced(v) for v in clone_all(self.inputs[pid])])
                out.setdefault(pid, {})["outq"] = [_round_reduced(_detach(x)) for x in flatten(out_q)[0]]
            except Exception:
                pass
        for pid in msg.get("repeat", []):
            if pid not in self.contexts:
                continue
            setup, init_inputs = self.contexts[pid]
            out_b, _ = self.timed_call(self._model(setup, init_inputs), clone_all(self.inputs[pid]))
            out.setdefault(pid, {})["out32b"] = [_detach(x) for x in flatten(out_b)[0]]
        return {"extras": out}

    def _model(self, setup_name: str, init_inputs: list[Any]) -> Any:
        return self._pair(setup_name, init_inputs)[0]

    def _pair(self, setup_name: str, init_inputs: list[Any]) -> tuple[Any, Any]:
        key = (setup_name, repr(init_inputs))
        if key not in self.models:
            setup = self.setups[setup_name]
            cls = self.module.__dict__["Model"]
            model32 = construct(cls, init_inputs, int(setup["seed"]), bool(setup.get("perturb")), self.device,
                                eval_mode=bool(setup.get("eval")))
            self.note_changes("reference init")
            model64 = None
            try:
                model64 = _float64_copy(model32)
            except Exception:
                try:
                    model64 = construct(cls, init_inputs, int(setup["seed"]), bool(setup.get("perturb")),
                                        self.device, eval_mode=bool(setup.get("eval"))).double()
                except Exception:
                    model64 = None
            self.models[key] = [model32, model64]
        m32, m64 = self.models[key]
        return m32, m64

    def _call64(self, model64: Any, inputs: list[Any]) -> tuple[Any, float]:
        """The float64 call; tensors the model creates as it runs default to float64 too."""
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return self.timed_call(model64, to_double(clone_all(inputs)))
        finally:
            torch.set_default_dtype(previous)

    def _rounded(self, setup_name: str, init_inputs: list[Any], model32: Any) -> Any:
        key = ("q", setup_name, repr(init_inputs))
        if key not in self.models:
            model_q = None
            try:
                model_q = copy.deepcopy(model32)
                if isinstance(model_q, torch.nn.Module):
                    with torch.no_grad():
                        for t in list(model_q.parameters()) + list(model_q.buffers()):
                            if t.is_floating_point() and t.dtype in (torch.float32, torch.float64):
                                t.copy_(_round_reduced(t))
            except Exception:
                model_q = None
            self.models[key] = [model_q, None]
        return self.models[key][0]

    @staticmethod
    def _state(model: Any) -> dict[str, Any]:
        if not isinstance(model, torch.nn.Module):
            return {}
        return {k: v.detach() for k, v in model.state_dict().items() if torch.is_tensor(v)}

    def perf_model(self) -> Any:
        name = next(iter(self.setups))
        return self._model(name, self.init_inputs)

    def perf_release(self) -> None:
        """Keep only the float32 model that is timed: the float64 copies, the TF32-rounded ones and
        the other setups' models would count as the reference's memory."""
        name = next(iter(self.setups))
        keep = (name, repr(self.init_inputs))
        for key in list(self.models):
            if key != keep:
                del self.models[key]
        if keep in self.models:
            self.models[keep][1] = None
        self.contexts.clear()


def _float64_copy(model: Any) -> Any:
    """A float64 copy: parameters and buffers, and plain tensor attributes (an initial LSTM state
    kept as ``self.h0``) that ``.double()`` does not reach."""
    m = copy.deepcopy(model)
    if not isinstance(m, torch.nn.Module):
        return m
    m = m.double()
    for mod in m.modules():
        for name, value in list(vars(mod).items()):
            if torch.is_tensor(value) and value.is_floating_point() and not isinstance(value, torch.nn.Parameter):
                setattr(mod, name, value.double())
    return m


def _round_reduced(v: Any) -> Any:
    """Round a float tensor's mantissa to 10 bits (TF32 / fp16 precision, float32 range)."""
    if not (torch.is_tensor(v) and v.is_floating_point() and v.dtype in (torch.float32, torch.float64)):
        return v
    f = v.to(torch.float32).contiguous()
    bits = f.view(torch.int32)
    rounded = torch.bitwise_and(bits + 0x1000, ~0x1FFF).view(torch.float32)
    rounded = torch.where(torch.isfinite(f), rounded, f)
    return rounded.to(v.dtype)


def _detach(x: Any) -> Any:
    if torch.is_tensor(x):
        return x.detach()
    return x


__all__ = ["ReferenceWorker", "unpack"]
