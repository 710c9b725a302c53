"""Worker side: a worker's command loop, the first code of the worker that runs after the boot.

It picks the role's class (``reference.ReferenceWorker`` or ``candidate.CandidateWorker``), reads
one request at a time and answers each, echoing the request's nonce and sequence number
(PROTOCOL.md, "Replies").  Anything the worker's code raises, including ``SystemExit`` from
untrusted code, is answered as an error reply; only a crash of the process itself ends the loop
early.  It sits apart from ``base.py`` so the role classes can import their base without an
import circle.
"""

from __future__ import annotations

import socket
from typing import Any

from ..shared import wire
from .base import describe_error
from .candidate import CandidateWorker
from .reference import ReferenceWorker


def serve(sock: socket.socket, spec: dict[str, Any]) -> None:
    role = spec.get("role")
    classes: dict[Any, type] = {"reference": ReferenceWorker, "candidate": CandidateWorker}
    if role not in classes:
        raise ValueError(f"unknown role {role!r}")
    worker = classes[role](spec)
    worker.channel = sock
    send, recv = wire.send, wire.recv
    while True:
        try:
            msg = recv(sock, None, side="worker")
        except wire.PeerClosed:
            return
        cmd = msg.get("cmd") if isinstance(msg, dict) else None
        # every reply echoes the request's nonce and sequence number (PROTOCOL.md, "Replies"): the
        # parent drops and reports a frame that does not, e.g. one the candidate wrote on this socket
        echo = {k: msg[k] for k in ("nonce", "seq") if isinstance(msg, dict) and k in msg}
        if cmd == "exit":
            send(sock, {"ok": True, **echo})
            return
        if cmd == "ping":  # a round trip with no work: the parent's clock subtracts it (HS609)
            send(sock, {"ok": True, **echo})
            continue
        try:
            reply = worker.handle(str(cmd), msg)
            reply["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - SystemExit from untrusted code is an answer too
            reply = {"ok": False, "error": describe_error(exc, spec.get("path"))}
        reply.update(echo)
        try:
            send(sock, reply)
        except (wire.WireError, TypeError, ValueError) as exc:
            send(sock, {"ok": False, "error": {"type": "WireError", "message": f"cannot send the reply: {exc}",
                                                "line": None, "traceback": "", "needs": None}, **echo})
