"""Reads of the process's global state: what a harness sets and an honest kernel's result cannot
depend on (grad and inference mode, deterministic algorithms, thread counts, the RNG's seed, which
thread runs, the clock, the garbage collector).

The value flow marks what such a read returns with ``process:<name>`` in its ``state``, so a
choice keyed on it is seen however the value travels (locals, attributes, containers, helpers).
Frames and the environment are HS160's and HS161's; compilation guards (``torch.jit.is_scripting``,
``torch.compiler.is_compiling``) and device availability (``torch.cuda.is_available``) choose how
the same function is computed, not whether, and are not here; nor is autocast (a fused float32
kernel that steps aside under autocast is common in libraries, and harnesses check and time
without it).
"""

from __future__ import annotations

PROCESS_CALLS = frozenset({
    "torch.is_grad_enabled", "torch._C.is_grad_enabled", "torch.is_inference_mode_enabled",
    "torch._C._is_inference_mode_enabled",
    "torch.are_deterministic_algorithms_enabled", "torch.is_deterministic_algorithms_warn_only_enabled",
    "torch.get_deterministic_debug_mode",
    "torch.get_num_threads", "torch.get_num_interop_threads",
    "torch.initial_seed", "torch.random.initial_seed", "torch.cuda.initial_seed", "torch.seed",
    "torch.get_rng_state", "torch.random.get_rng_state", "torch.cuda.get_rng_state",
    "torch.autograd.grad_mode.is_grad_enabled",
    "torch._C._get_tracing_state",
    # compiled, exported or captured: a harness that compiles the candidate or replays a CUDA graph
    # of it for timing runs the other path.  (TorchScript's and FX's ``is_scripting`` /
    # ``is_tracing`` are left out: libraries branch on them to stay scriptable, the same function.)
    "torch.compiler.is_compiling", "torch.compiler.is_dynamo_compiling", "torch.compiler.is_exporting",
    "torch._dynamo.is_compiling", "torch._utils.is_compiling", "torch.cuda.is_current_stream_capturing",
    "torch.cuda.graphs.is_current_stream_capturing",
    "threading.current_thread", "threading.get_ident", "threading.get_native_id", "threading.main_thread",
    "threading.active_count", "threading.currentThread",
    "time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.time_ns",
    "time.perf_counter_ns", "time.monotonic_ns", "time.thread_time",
    "gc.isenabled", "gc.get_count", "gc.get_stats", "gc.collect",
    "os.getpid", "os.times",
    "random.getstate", "numpy.random.get_state",
})
# read as attributes, not calls
PROCESS_ATTRS = frozenset({
    "torch.backends.cudnn.benchmark", "torch.backends.cudnn.deterministic",
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
})
# the last names of both sets: the cheap test before a canonical name is built
LAST_NAMES = frozenset(n.rsplit(".", 1)[-1] for n in PROCESS_CALLS | PROCESS_ATTRS)
PREFIX = "process:"

_WORDS = {
    "is_grad_enabled": "grad mode", "is_inference_mode_enabled": "inference mode",
    "_is_inference_mode_enabled": "inference mode",
    "are_deterministic_algorithms_enabled": "deterministic algorithms",
    "get_num_threads": "the thread count", "get_num_interop_threads": "the inter-op thread count",
    "initial_seed": "the RNG seed", "get_rng_state": "the RNG state", "seed": "the RNG seed",
    "current_thread": "the calling thread", "get_ident": "the calling thread", "main_thread": "the main thread",
    "is_compiling": "compile mode", "is_dynamo_compiling": "compile mode", "is_exporting": "export mode",
    "is_current_stream_capturing": "CUDA graph capture",
}


def describe(names: set[str] | frozenset[str]) -> str:
    """``grad mode (torch.is_grad_enabled)``, for the state names a flow carries."""
    out = []
    for n in sorted(names):
        dotted = n[len(PREFIX):] if n.startswith(PREFIX) else n
        word = _WORDS.get(dotted.rsplit(".", 1)[-1])
        out.append(f"{word} ({dotted})" if word else dotted)
    return ", ".join(out)
