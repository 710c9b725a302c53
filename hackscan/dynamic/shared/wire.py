"""Frames between the parent and the workers: a JSON header plus raw tensor bytes.

Nothing here unpickles: a worker is untrusted, and pickle runs code on load.  A frame is
``MAGIC | u32 header length | u64 payload length | JSON header | payload``; every tensor in a message
is replaced in the JSON by ``{"__tensor__": i}`` and its bytes sit in the payload at the offset the
header gives.  The parent side decodes tensors to numpy arrays and never imports torch; the worker
side decodes them to torch tensors.  Both sides use this one module; torch and numpy are imported
only by the functions that need them.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

MAGIC = b"HSF1"
_HEAD = struct.Struct("<4sIQ")
MAX_HEADER = 64 << 20
MAX_PAYLOAD = 32 << 30

_NUMPY_NAMES = {
    "float32": "float32", "float64": "float64", "float16": "float16", "int64": "int64", "int32": "int32",
    "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool", "complex64": "complex64",
    "complex128": "complex128", "bfloat16": "uint16",
}


class WireError(Exception):
    """A malformed frame or a closed channel."""


class PeerClosed(WireError):
    pass


class Timeout(WireError):
    pass


class BF16Array:
    """A bfloat16 tensor on the parent side (numpy has no bfloat16): the raw bits as ``uint16``."""

    __slots__ = ("bits", "__weakref__")

    def __init__(self, bits: Any):
        self.bits = bits

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.bits.shape)

    dtype_name = "bfloat16"

    def to_float32(self) -> Any:
        import numpy as np

        return (self.bits.astype(np.uint32) << 16).view(np.float32)


# --------------------------------------------------------------------------------------- encoding
def _encode(msg: Any) -> tuple[bytes, list[memoryview]]:
    specs: list[dict[str, Any]] = []
    buffers: list[memoryview] = []
    offset = 0

    def add(dtype: str, shape: list[int], buf: memoryview) -> dict[str, int]:
        nonlocal offset
        nbytes = buf.nbytes
        specs.append({"dtype": dtype, "shape": shape, "offset": offset, "nbytes": nbytes})
        if nbytes:
            buffers.append(buf.cast("B") if buf.ndim != 1 or buf.format != "B" else buf)
        offset += nbytes
        return {"__tensor__": len(specs) - 1}

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        if v is None or isinstance(v, (str, bool, int)):
            return v
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                return {"__float__": repr(v)}
            return v
        mod = type(v).__module__
        if mod.startswith("torch") and hasattr(v, "dtype") and hasattr(v, "untyped_storage"):
            return _torch_tensor(v, add)
        if isinstance(v, BF16Array):
            return add("bfloat16", list(v.bits.shape), _np_view(v.bits))
        if mod.startswith("numpy"):
            import numpy as np

            if isinstance(v, np.ndarray):
                name = str(v.dtype)
                if name not in _NUMPY_NAMES:
                    raise WireError(f"cannot send numpy dtype {name}")
                return add(name, list(v.shape), _np_view(v))
            if isinstance(v, np.generic):
                return walk(v.item())
        raise WireError(f"cannot send a value of type {type(v).__name__}")

    body = walk(msg)
    header = json.dumps({"body": body, "__tensors__": specs}, separators=(",", ":")).encode("utf-8")
    return header, buffers


def _np_view(arr: Any) -> memoryview:
    import numpy as np

    arr = np.ascontiguousarray(arr)
    if arr.size == 0:
        return memoryview(b"")
    return memoryview(arr.reshape(-1).view(np.uint8))


def _torch_tensor(t: Any, add: Callable[[str, list[int], memoryview], dict[str, int]]) -> dict[str, int]:
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    t = t.contiguous()
    dtype = str(t.dtype).replace("torch.", "")
    if dtype not in _NUMPY_NAMES:
        raise WireError(f"cannot send torch dtype {dtype}")
    shape = list(t.shape)
    if t.numel() == 0:
        return add(dtype, shape, memoryview(b""))
    if dtype == "bfloat16":
        t = t.view(torch.int16)
    flat = t.reshape(-1).view(torch.uint8)
    return add(dtype, shape, memoryview(flat.numpy()))


def send(sock: socket.socket, msg: Any) -> int:
    """Send one message; returns the bytes written."""
    header, buffers = _encode(msg)
    payload = sum(b.nbytes for b in buffers)
    sock.sendall(_HEAD.pack(MAGIC, len(header), payload) + header)
    for b in buffers:
        sock.sendall(b)
    return _HEAD.size + len(header) + payload


# --------------------------------------------------------------------------------------- decoding
class MemorySink:
    """A frame's payload received into memory, grown as bytes arrive: a header that announces a
    huge payload and never sends it costs nothing, and what is reserved is at most twice what came."""

    FIRST = 1 << 20

    def __init__(self, nbytes: int):
        self.want = nbytes
        self.buf = bytearray(min(nbytes, self.FIRST))
        self.got = 0

    def view(self) -> memoryview:
        if self.got == len(self.buf):
            grown = bytearray(min(self.want, max(2 * len(self.buf), self.FIRST)))
            grown[:self.got] = self.buf
            self.buf = grown
        return memoryview(self.buf)[self.got:]

    def advance(self, n: int) -> None:
        self.got += n

    def finish(self) -> Any:
        return self.buf


class FrameReader:
    """Reads one frame in pieces, so the caller can check deadlines and memory between reads."""

    def __init__(self, sock: socket.socket, alloc: Callable[[int], Any] | None = None):
        self.sock = sock
        # the payload's sink for a frame of n bytes (``view``/``advance``/``finish``; the parent's:
        # ``dynamic/spill.sink``, which receives large frames into a file); in memory by default.
        # Nothing is reserved on the header's word: the sink grows with what arrives.
        self.alloc = alloc or MemorySink
        self._reset()

    def _reset(self) -> None:
        self._head = bytearray()
        self._header: MemorySink | None = None
        self._payload: Any = None
        self._hlen = 0
        self._plen = 0

    def poll(self, timeout: float) -> tuple[bytes, Any] | None:
        """Read what arrives within ``timeout`` seconds; the frame (header, payload) once complete."""
        end = time.monotonic() + max(timeout, 0.0)
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                if len(self._head) < _HEAD.size:
                    chunk = self.sock.recv(_HEAD.size - len(self._head))
                    if not chunk:
                        raise PeerClosed("the worker closed the channel")
                    self._head += chunk
                    if len(self._head) == _HEAD.size:
                        magic, self._hlen, self._plen = _HEAD.unpack(bytes(self._head))
                        if magic != MAGIC or self._hlen > MAX_HEADER or self._plen > MAX_PAYLOAD:
                            raise WireError("malformed frame header")
                        self._header = MemorySink(self._hlen)
                        self._payload = None
                    continue
                assert self._header is not None
                if self._header.got < self._hlen:
                    n = self.sock.recv_into(self._header.view())
                    if n == 0:
                        raise PeerClosed("the worker closed the channel mid-frame")
                    self._header.advance(n)
                    if self._header.got < self._hlen:
                        continue
                if self._payload is None:
                    self._payload = self.alloc(self._plen)
                if self._payload.got < self._plen:
                    n = self.sock.recv_into(self._payload.view())
                    if n == 0:
                        raise PeerClosed("the worker closed the channel mid-frame")
                    self._payload.advance(n)
                if self._payload.got >= self._plen:
                    out = (bytes(self._header.buf), self._payload.finish())
                    self._reset()
                    return out
            except TimeoutError:
                return None
            except (BlockingIOError, InterruptedError):
                continue


def recv(sock: socket.socket, timeout: float | None = None, *, side: str = "worker") -> Any:
    """Blocking receive of one message (``side`` picks torch tensors or numpy arrays)."""
    reader = FrameReader(sock)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = 3600.0 if deadline is None else deadline - time.monotonic()
        if step <= 0:
            raise Timeout("no reply in time")
        frame = reader.poll(min(step, 3600.0))
        if frame is not None:
            return decode(frame[0], frame[1], side=side)


# how deep a frame's JSON may nest: the messages nest a few levels (a reply, its probes, an
# output's leaves); a header of ten thousand brackets made the parent's own decoder raise
# RecursionError, an internal error instead of a malformed frame the worker sent
MAX_DEPTH = 100
_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _no_constant(name: str) -> Any:
    # json.dumps never writes NaN / Infinity (``_encode`` sends them as {"__float__": ...}): a bare
    # one is a frame this module did not write
    raise WireError(f"a bare {name} in a frame")


def decode(header: bytes, payload: Any, *, side: str) -> Any:
    """The message of one frame.  Anything malformed, however it is malformed, is a ``WireError``
    (the worker's fault), never another exception raised in the reader's process."""
    try:
        # json's own decoder raises RecursionError on a deep enough nest (caught below); walk()
        # bounds the depth of what it parses
        doc = json.loads(header.decode("utf-8"), parse_constant=_no_constant)
        specs = doc["__tensors__"]
        body = doc["body"]
        if not isinstance(specs, list):
            raise WireError("malformed tensor table")
        return _decode_body(body, specs, payload, side)
    except WireError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError, RecursionError,
            MemoryError) as exc:
        raise WireError(f"malformed frame: {type(exc).__name__}: {str(exc)[:200]}") from None


def _decode_body(body: Any, specs: list[Any], payload: Any, side: str) -> Any:
    make = _numpy_maker(payload) if side == "parent" else _torch_maker(payload)
    made: dict[int, Any] = {}

    def walk(v: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError(f"a frame nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, dict):
            if len(v) == 1 and "__tensor__" in v:
                i = v["__tensor__"]
                if type(i) is not int or not 0 <= i < len(specs):
                    raise WireError("tensor index out of range")
                if i not in made:
                    made[i] = make(specs[i])
                return made[i]
            if len(v) == 1 and "__float__" in v:
                if not isinstance(v["__float__"], str) or v["__float__"].lower() not in _FLOATS:
                    raise WireError("a malformed non-finite float")
                return _FLOATS[v["__float__"].lower()]
            return {k: walk(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, depth + 1) for x in v]
        return v

    return walk(body)


def _check_spec(spec: Any, size: int) -> tuple[str, list[int], int, int]:
    try:
        dtype, shape, off, nbytes = spec["dtype"], [int(s) for s in spec["shape"]], int(spec["offset"]), int(spec["nbytes"])
    except (KeyError, TypeError, ValueError):
        raise WireError("malformed tensor description") from None
    if dtype not in _NUMPY_NAMES or off < 0 or nbytes < 0 or off + nbytes > size or any(s < 0 for s in shape):
        raise WireError("tensor description out of bounds")
    return dtype, shape, off, nbytes


def _numpy_maker(payload: bytearray) -> Callable[[Any], Any]:
    import numpy as np

    def make(spec: Any) -> Any:
        dtype, shape, off, nbytes = _check_spec(spec, len(payload))
        npd = np.dtype(_NUMPY_NAMES[dtype])
        count = 1
        for s in shape:
            count *= s
        if count * npd.itemsize != nbytes:
            raise WireError("tensor size does not match its shape")
        arr = np.frombuffer(payload, dtype=npd, count=count, offset=off).reshape(shape)
        arr.flags.writeable = False
        return BF16Array(arr) if dtype == "bfloat16" else arr

    return make


def _torch_maker(payload: bytearray) -> Callable[[Any], Any]:
    import torch

    def make(spec: Any) -> Any:
        dtype, shape, off, nbytes = _check_spec(spec, len(payload))
        tdt = getattr(torch, dtype)
        count = 1
        for s in shape:
            count *= s
        if count == 0:
            return torch.empty(shape, dtype=tdt)
        if count * torch.empty((), dtype=tdt).element_size() != nbytes:
            raise WireError("tensor size does not match its shape")
        return torch.frombuffer(payload, dtype=tdt, count=count, offset=off).reshape(shape)

    return make
