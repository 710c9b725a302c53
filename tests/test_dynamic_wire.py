"""The wire format: tensors travel as JSON + raw bytes, never as pickles, in both directions."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

np = pytest.importorskip("numpy")

from hackscan.dynamic.shared import wire  # noqa: E402


def _roundtrip(msg, side: str = "parent"):
    a, b = socket.socketpair()
    out = {}

    def reader() -> None:
        out["msg"] = wire.recv(b, 10.0, side=side)

    t = threading.Thread(target=reader)
    t.start()
    wire.send(a, msg)
    t.join(10)
    a.close()
    b.close()
    return out["msg"]


def test_numpy_arrays_roundtrip_to_the_parent() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    msg = _roundtrip({"x": x, "nested": [x[:, ::2], {"i": np.int64(3)}], "nan": float("nan"), "s": "ok"})
    assert np.array_equal(msg["x"], x)
    assert np.array_equal(msg["nested"][0], x[:, ::2])  # non-contiguous views are sent contiguous
    assert msg["nested"][1]["i"] == 3
    assert msg["nan"] != msg["nan"]
    assert not msg["x"].flags.writeable


def test_torch_tensors_roundtrip_to_a_worker_including_bfloat16() -> None:
    torch = pytest.importorskip("torch")
    t = torch.randn(5, 7)
    bf = torch.randn(3).to(torch.bfloat16)
    empty = torch.empty(0, 4)
    msg = _roundtrip({"t": t.t(), "bf": bf, "e": empty, "b": torch.tensor([True, False])}, side="worker")
    assert torch.equal(msg["t"], t.t())
    assert msg["bf"].dtype == torch.bfloat16 and torch.equal(msg["bf"], bf)
    assert tuple(msg["e"].shape) == (0, 4)
    assert msg["b"].dtype == torch.bool


def test_bfloat16_reaches_the_parent_as_bits() -> None:
    torch = pytest.importorskip("torch")
    bf = torch.tensor([1.5, -2.0, 3.25]).to(torch.bfloat16)
    msg = _roundtrip({"bf": bf}, side="parent")
    assert isinstance(msg["bf"], wire.BF16Array)
    assert msg["bf"].to_float32().tolist() == [1.5, -2.0, 3.25]


def test_objects_that_are_not_data_are_refused() -> None:
    a, b = socket.socketpair()
    with pytest.raises(wire.WireError):
        wire.send(a, {"f": object()})
    a.close()
    b.close()


@pytest.mark.parametrize("spec", [
    {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 64},       # past the payload
    {"dtype": "object", "shape": [1], "offset": 0, "nbytes": 8},         # not a tensor dtype
    {"dtype": "float32", "shape": [3], "offset": 0, "nbytes": 16},       # size does not match shape
    {"dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 4},
])
def test_malformed_tensor_descriptions_are_rejected(spec) -> None:
    import json

    header = json.dumps({"body": {"x": {"__tensor__": 0}}, "__tensors__": [spec]}).encode()
    with pytest.raises(wire.WireError):
        wire.decode(header, bytearray(16), side="parent")


def test_a_frame_with_a_bad_magic_is_a_wire_error() -> None:
    a, b = socket.socketpair()
    a.sendall(struct.pack("<4sIQ", b"EVIL", 2, 0) + b"{}")
    with pytest.raises(wire.WireError):
        wire.recv(b, 2.0, side="parent")
    a.close()
    b.close()


def test_a_closed_peer_is_reported() -> None:
    a, b = socket.socketpair()
    a.close()
    with pytest.raises(wire.PeerClosed):
        wire.recv(b, 2.0, side="parent")
    b.close()


def test_the_parent_side_never_imports_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, socket, threading, numpy as np\n"
        "from hackscan.dynamic import compare, judge, plan, link, protocol, stage\n"
        "from hackscan.dynamic.shared import wire\n"
        "a, b = socket.socketpair()\n"
        "t = threading.Thread(target=lambda: wire.send(a, {'x': np.ones(3, np.float32)})); t.start()\n"
        "m = wire.recv(b, 5, side='parent'); t.join()\n"
        "assert float(m['x'].sum()) == 3.0\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "False", "the parent side imported torch"


def _spilled_read(msg, monkeypatch: pytest.MonkeyPatch, tmp_path, threshold: int):
    """Receive ``msg`` the way a parent session does (spill.sink), with frames of at least
    ``threshold`` bytes received into the spill folder."""
    import mmap

    from hackscan.dynamic import spill

    monkeypatch.setattr(spill, "SPILL_BYTES", threshold)
    monkeypatch.setenv("HACKSCAN_SPILL_DIR", str(tmp_path / "spill"))
    a, b = socket.socketpair()
    reader = wire.FrameReader(b, spill.sink)
    t = threading.Thread(target=wire.send, args=(a, msg))
    t.start()
    frame = None
    while frame is None:
        frame = reader.poll(5.0)
    t.join(10)
    a.close()
    b.close()
    return wire.decode(frame[0], frame[1], side="parent"), isinstance(frame[1], mmap.mmap)


def test_a_large_frame_is_received_into_the_spill_folder(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Issue 16, item 5: a large reply lands in an unlinked file (file-backed pages, not the parent's
    heap); the arrays read back the same, read-only, and the folder keeps no file."""
    x = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    msg, spilled = _spilled_read({"out": [x, x[::2] * 2]}, monkeypatch, tmp_path, threshold=1 << 16)
    assert spilled
    assert np.array_equal(msg["out"][0], x) and np.array_equal(msg["out"][1], x[::2] * 2)
    assert not msg["out"][0].flags.writeable
    assert list((tmp_path / "spill").iterdir()) == []  # unlinked as soon as it was made
    # below the threshold: in memory, as before
    small, spilled = _spilled_read({"out": [x[:2]]}, monkeypatch, tmp_path, threshold=1 << 16)
    assert not spilled and np.array_equal(small["out"][0], x[:2])
