"""`shep ui`'s figures: serving the runs page, an idle server's CPU, fan-out, live latency.

- ``ui_runs_page_ratio``: the runs page served over HTTP by a real `shep ui` on a big
  history (the one ``run.py`` builds for ``status_cold_ratio``), over the same query
  (``list_runs``) and its JSON encoding in-process; medians of interleaved rounds.
- ``ui_idle_cpu``: the server's CPU time over ``IDLE_SECONDS`` with 100 pages open on
  its live stream and nothing happening, as a share of one core.
- ``ui_fanout_100``: events appended while those 100 pages are open: did every page get
  every event (and how long the last one took).
- ``ui_live_ratio``: an agent's output line appended to the log until the run's page
  shows it in Chromium's DOM, over the same for `shep logs --follow`
  (``follow_latency_ms``, measured in the same run by ``run.py``).
"""

from __future__ import annotations

import http.client
import json
import os
import selectors
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

from tests.shep.web.ui_server import UiServer  # noqa: E402

IDLE_SECONDS = 10.0
PAGES = 100
CHROMIUM = os.environ.get("SHEP_CHROMIUM", "/usr/bin/chromium")


def _env(home: Path) -> dict[str, str]:
    return {"SHEP_HOME": str(home), "PYTHONPATH": str(ROOT)}


def _process_cpu(pid: int) -> float:
    from shep.home.procs import cpu_seconds

    return cpu_seconds(pid)


def bench_runs_page(home: Path, rounds: int) -> dict[str, float]:
    """GET / (the `shep status` runs) from a real server over list_runs + JSON in-process:
    with the log still (``ui_runs_page_ratio``), and each time after the log moved
    (``ui_runs_page_moved_ratio``: an output line of a running run appended, and the
    server's projections caught up with it, before each request and each query).
    """
    from commands.create_run import create_run
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.start_run import start_run
    from events.store import EventStore
    from projections.database import open_database
    from projections.queries import list_runs
    from projections.state import positions

    server = UiServer.start(env=_env(home))
    conn = open_database(home / "shep.db", readonly=True)
    encode = msgspec.json.Encoder().encode
    try:
        http_conn = http.client.HTTPConnection(server.host, server.port)
        headers = {"Host": f"{server.host}:{server.port}", "Cookie": server.cookie}

        def served() -> float:
            start = time.perf_counter()
            http_conn.request("GET", "/", headers=headers)
            response = http_conn.getresponse()
            body = response.read()
            took = time.perf_counter() - start
            assert response.status == 200
            assert b"run-" in body
            return took

        def in_process() -> float:
            start = time.perf_counter()
            encode(list_runs(conn))
            return time.perf_counter() - start

        for _ in range(3):  # warm both sides: the page cache, the templates, the graph
            served()
            in_process()
        ours, base = [], []
        for _ in range(rounds):
            ours.append(served())
            base.append(in_process())
        rows = len(list_runs(conn))

        with EventStore(home / "shep.db") as store:
            run_id = create_run(
                store, workflow="bench", agent_type="demo", repo="/r", node_names=["a"],
                created_by="bench",
            )  # fmt: skip
            start_run(store, run_id, pid=os.getpid(), host="bench")
            moved, moved_base = [], []
            for i in range(3 + rounds):
                record_agent_output(store, run_id, "a", [OutputItem(kind="text", text=f"{i}")])
                head = store.max_position()
                deadline = time.monotonic() + 10
                while min(positions(conn).values()) < head:  # the server caught up with it
                    assert time.monotonic() < deadline, "the server did not catch up"
                    time.sleep(0.001)
                page, query = served(), in_process()
                if i >= 3:
                    moved.append(page)
                    moved_base.append(query)
        http_conn.close()
    finally:
        conn.close()
        server.stop()
    page, query = statistics.median(ours), statistics.median(base)
    moved_page, moved_query = statistics.median(moved), statistics.median(moved_base)
    return {
        "ui_runs_page_rows": rows,
        "ui_runs_page_ms": round(page * 1000, 2),
        "ui_runs_query_ms": round(query * 1000, 2),
        "ui_runs_page_ratio": round(page / query, 3),
        "ui_runs_page_moved_ms": round(moved_page * 1000, 2),
        "ui_runs_moved_query_ms": round(moved_query * 1000, 2),
        "ui_runs_page_moved_ratio": round(moved_page / moved_query, 3),
    }


def _open_streams(server: UiServer, count: int) -> list[socket.socket]:
    """``count`` pages' live streams, each read up to its first frame (it is subscribed)."""
    request = (
        f"GET /events HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
        f"Cookie: {server.cookie}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    streams = []
    for _ in range(count):
        sock = socket.create_connection((server.host, server.port))
        sock.sendall(request)
        streams.append(sock)
    for sock in streams:
        sock.settimeout(10)
        head = sock.recv(65536)
        assert b"200 OK" in head, head[:200]
        sock.setblocking(False)
    return streams


def _ids(data: bytes) -> set[int]:
    return {int(line[4:]) for line in data.split(b"\n") if line.startswith(b"id: ")}


def bench_idle_and_fanout(home: Path) -> dict[str, Any]:
    """100 open pages: the server's CPU while nothing happens, then every page's events."""
    from commands.create_run import create_run
    from commands.record_heartbeat import record_heartbeat
    from commands.start_run import start_run
    from events.store import EventStore

    home.mkdir(mode=0o700, exist_ok=True)
    store = EventStore(home / "shep.db")
    run_id = create_run(
        store, workflow="bench", agent_type="demo", repo="/r", node_names=["a"], created_by="b"
    )
    state = start_run(store, run_id, pid=os.getpid(), host="bench")
    server = UiServer.start(env=_env(home))
    streams = _open_streams(server, PAGES)
    try:
        time.sleep(1.0)  # settled: every stream subscribed, nothing pending
        cpu_before, wall_before = _process_cpu(server.proc.pid), time.monotonic()
        time.sleep(IDLE_SECONDS)
        cpu = _process_cpu(server.proc.pid) - cpu_before
        idle_share = cpu / (time.monotonic() - wall_before)
        events = 50
        received: dict[int, set[int]] = {n: set() for n in range(PAGES)}
        selector = selectors.DefaultSelector()
        for n, sock in enumerate(streams):
            _drain(sock)
            selector.register(sock, selectors.EVENT_READ, n)
        sent = time.perf_counter()
        for _ in range(events):
            record_heartbeat(store, run_id, pid=os.getpid(), host="bench", epoch=state.epoch)
        positions = _positions(home, run_id, events)
        deadline = time.monotonic() + 30
        last = sent
        while time.monotonic() < deadline and any(
            not set(positions) <= got for got in received.values()
        ):
            for key, _ in selector.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(1 << 20)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                received[key.data] |= _ids(data)
                last = time.perf_counter()
        complete = sum(1 for got in received.values() if set(positions) <= got)
    finally:
        for sock in streams:
            sock.close()
        server.stop()
        store.close()
    return {
        "ui_idle_pages": PAGES,
        "ui_idle_cpu": round(idle_share, 4),
        "ui_fanout_events": events,
        "ui_fanout_pages_complete": complete,
        "ui_fanout_100": complete == PAGES,
        "ui_fanout_last_ms": round((last - sent) * 1000, 1),
    }


def _drain(sock: socket.socket) -> None:
    """Read what a stream sent so far (the inbox count, a keepalive)."""
    while True:
        try:
            if not sock.recv(1 << 20):
                return
        except BlockingIOError:
            return


def _positions(home: Path, run_id: UUID, count: int) -> list[int]:
    from projections.database import open_database

    conn = open_database(home / "shep.db", readonly=True)
    try:
        rows = conn.execute(
            "SELECT notification_id FROM stored_events WHERE originator_id=? "
            "ORDER BY notification_id DESC LIMIT ?",
            (run_id.hex, count),
        ).fetchall()
    finally:
        conn.close()
    return sorted(int(r[0]) for r in rows)


def bench_live(home: Path, samples: int) -> dict[str, Any]:
    """An output line appended here -> the run's page in Chromium shows it (its DOM)."""
    if not os.path.exists(CHROMIUM):
        return {"ui_live_ms": None, "ui_live_note": f"no browser at {CHROMIUM}"}
    from playwright.sync_api import sync_playwright

    from commands.create_run import create_run
    from commands.record_agent_output import OutputItem, record_agent_output
    from commands.start_run import start_run
    from events.store import EventStore

    home.mkdir(mode=0o700, exist_ok=True)
    store = EventStore(home / "shep.db")
    run_id = create_run(
        store, workflow="bench", agent_type="demo", repo="/r", node_names=["a"], created_by="b"
    )
    start_run(store, run_id, pid=os.getpid(), host="bench")
    server = UiServer.start(env=_env(home))
    latencies = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            page = browser.new_page()
            page.goto(server.url)
            page.goto(f"{server.base}/runs/{run_id.hex}")
            page.wait_for_selector("#live.on")
            # Each line is stamped (wall clock, ms) the moment the page's DOM gets it.
            page.evaluate(
                """() => { window.__seen = {};
                new MutationObserver((changes) => {
                  const now = performance.timeOrigin + performance.now();
                  for (const c of changes) for (const n of c.addedNodes) {
                    const t = n.textContent || ""; const m = t.match(/live-marker-\\d+/);
                    if (m && !(m[0] in window.__seen)) window.__seen[m[0]] = now; } })
                .observe(document.getElementById("log"), {childList: true}); }"""
            )
            for i in range(samples):
                marker = f"live-marker-{i}"
                sent = time.time() * 1000
                record_agent_output(store, run_id, "a", [OutputItem(kind="text", text=marker)])
                page.wait_for_selector(f"text={marker}", timeout=10_000)
                seen = page.evaluate(f"window.__seen[{json.dumps(marker)}]")
                latencies.append(seen - sent)
                time.sleep(0.05)
            browser.close()
    finally:
        server.stop()
        store.close()
    return {
        "ui_live_ms": round(statistics.median(latencies), 1),
        "ui_live_p90_ms": round(sorted(latencies)[int(len(latencies) * 0.9) - 1], 1),
    }


def bench(
    big_home: Path, work: Path, quick: bool, follow_latency_ms: float | None
) -> dict[str, Any]:
    """Every figure of `shep ui` (``big_home``: the history ``status_cold_ratio`` uses)."""
    results: dict[str, Any] = {}
    results.update(bench_runs_page(big_home, rounds=9 if quick else 21))
    results.update(bench_idle_and_fanout(work / "ui-idle"))
    results.update(bench_live(work / "ui-live", samples=10 if quick else 30))
    if results.get("ui_live_ms") is not None and follow_latency_ms:
        results["ui_live_ratio"] = round(results["ui_live_ms"] / follow_latency_ms, 3)
    return results
