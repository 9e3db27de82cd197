"""The live stream of a real `shep ui`: Server-Sent Events whose ids are log positions, so a
page that reconnects with Last-Event-ID gets exactly what it missed."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from commands.create_run import create_run
from commands.record_agent_output import OutputItem, record_agent_output
from commands.start_run import start_run
from events.store import EventStore
from tests.shep.web.ui_server import UiServer


def _frames(
    server: UiServer, path: str, headers: dict[str, str], want: int
) -> list[dict[str, object]]:
    """The data frames of one stream (with their ids), until ``want`` of them came."""
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {server.host}:{server.port}",
        f"Cookie: {server.cookie}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        deadline = time.monotonic() + 10
        frames: list[dict[str, object]] = []
        while len(frames) < want and time.monotonic() < deadline:
            data += sock.recv(65536)
            frames = []
            for block in data.split(b"\n\n"):
                fields = dict(
                    line.split(": ", 1) for line in block.decode().splitlines() if ": " in line
                )
                if "data" in fields and "id" in fields:
                    frames.append({"id": int(fields["id"]), **json.loads(fields["data"])})
    return frames


def test_last_event_id_is_a_log_position(db_path: Path) -> None:
    """A stream asked from Last-Event-ID N sends the inbox count, then the run's events past
    N in log order (agent output included on the run's stream), each with its position."""
    store = EventStore(db_path)
    run = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="t"
    )
    start_run(store, run, pid=os.getpid(), host="here")
    for n in range(5):
        record_agent_output(store, run, "a", [OutputItem(kind="text", text=f"line {n}")])
    store.close()
    server = UiServer.start()
    try:
        frames = _frames(server, f"/events?after=0&run={run.hex}", {}, 9)
        assert frames[0]["t"] == "inbox"
        events = [f for f in frames if f["t"] != "inbox"]
        positions = [f["id"] for f in events]
        assert positions == sorted(positions)
        assert [f["t"] for f in events[:2]] == ["RunCreated", "RunStarted"]
        assert [f["text"] for f in events[2:]] == [f"line {n}" for n in range(5)]
        seen = positions[3]
        rest = _frames(server, f"/events?run={run.hex}", {"Last-Event-ID": str(seen)}, 5)
        assert [f["id"] for f in rest if f["t"] != "inbox"] == positions[4:]
        lists = _frames(server, "/events?after=0", {}, 4)
        assert [f["t"] for f in lists if f["t"] != "inbox"] == ["RunCreated", "RunStarted"]
    finally:
        server.stop()
