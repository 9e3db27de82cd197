"""The feed and the hub: one follower of a real store, fanned out to many pages; a page
that reconnects gets what it missed, from memory or from the log."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from commands.create_run import create_run
from commands.record_agent_output import OutputItem, record_agent_output
from commands.record_node import record_node_started
from commands.start_run import start_run
from events.store import EventStore
from projections.database import open_database
from projections.queries import get_run
from shep.web import feed as feed_module
from shep.web.feed import Feed, Hub, Message, sse_frame


def _message(position: int, run: str | None = "r" * 32, output: bool = False) -> Message:
    return Message(position, run, output, sse_frame(position, {"p": position}), "NodeStarted")


def _positions(frames: list[bytes]) -> list[int]:
    found = []
    for frame in frames:
        for line in frame.decode().splitlines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                if "p" in data:
                    found.append(data["p"])
    return found


async def _take(stream: AsyncIterator[bytes], count: int, timeout: float = 5) -> list[bytes]:
    """The first frames of a stream that carry data, ``count`` of them (the retry line and
    the inbox count come first and are counted)."""
    frames: list[bytes] = []

    async def collect() -> None:
        async for frame in stream:
            if frame.startswith((b"retry", b":")):
                continue
            frames.append(frame)
            if len(frames) >= count:
                return

    await asyncio.wait_for(collect(), timeout)
    return frames


def _run(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run`` in a thread of its own: the browser tests' Playwright keeps an event
    loop running in the main thread for the session."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, main).result()


def _no_history(after: int, until: int) -> list[Message] | None:
    raise AssertionError("the log was read while memory held the messages")


def test_a_hundred_pages_each_get_every_event() -> None:
    """100 subscriptions, 50 messages: each gets all 50, in order, after its inbox count."""

    async def main() -> None:
        hub = Hub(_no_history)
        hub.start_at(0, 0)
        streams = [hub.stream(after=0, run=None) for _ in range(100)]
        tasks = [asyncio.create_task(_take(s, 51)) for s in streams]
        await asyncio.sleep(0.05)
        for position in range(1, 51):
            hub.publish([_message(position)], position, None)
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
        assert all(_positions(r[1:]) == list(range(1, 51)) for r in results)
        assert len(hub.subscriptions) == 100
        for s in streams:
            await s.aclose()
        assert hub.subscriptions == set()

    _run(main())


def test_a_page_that_reconnects_gets_what_it_missed_from_memory() -> None:
    """After 5 messages, a page that saw up to 2 gets 3, 4, 5, then the new ones; none twice."""

    async def main() -> None:
        hub = Hub(_no_history)
        hub.start_at(0, 0)
        for position in range(1, 6):
            hub.publish([_message(position)], position, None)
        stream = hub.stream(after=2, run=None)
        task = asyncio.create_task(_take(stream, 6))
        await asyncio.sleep(0.05)
        hub.publish([_message(6), _message(7)], 7, None)
        frames = await task
        assert _positions(frames) == [3, 4, 5, 6, 7]
        await stream.aclose()

    _run(main())


def test_pages_get_their_own_run_and_the_list_no_output() -> None:
    """A run's page gets that run's messages (agent output included) and the global ones;
    a list page gets every run's messages but no agent output."""

    async def main() -> None:
        hub = Hub(_no_history)
        hub.start_at(0, 0)
        mine, other = "a" * 32, "b" * 32
        run_page = hub.stream(after=0, run=mine)
        list_page = hub.stream(after=0, run=None)
        run_task = asyncio.create_task(_take(run_page, 4))
        list_task = asyncio.create_task(_take(list_page, 4))
        await asyncio.sleep(0.05)
        hub.publish(
            [
                _message(1, mine),
                _message(2, mine, output=True),
                _message(3, other),
                _message(4, other, output=True),
                _message(5, None),
            ],
            5,
            None,
        )
        assert _positions(await run_task) == [1, 2, 5]
        assert _positions(await list_task) == [1, 3, 5]
        await run_page.aclose()
        await list_page.aclose()

    _run(main())


def test_a_page_too_far_behind_is_closed_and_catches_up_from_its_last_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page that does not read falls BACKLOG messages behind: its stream ends (its
    browser reconnects); reconnecting from its last id, it gets the rest."""
    monkeypatch.setattr(feed_module, "BACKLOG", 10)

    async def main() -> None:
        hub = Hub(_no_history)
        hub.start_at(0, 0)
        slow = hub.stream(after=0, run=None)
        first = await _take(slow, 1)  # the inbox count; then the page reads no more
        assert _positions(first) == []
        hub.publish([_message(p) for p in range(1, 31)], 30, None)
        rest = [frame async for frame in slow]
        assert _positions(rest) == [], "the overflowing page's queue is dropped, not sent"
        again = hub.stream(after=0, run=None)
        assert _positions(await _take(again, 31)) == list(range(1, 31))
        await again.aclose()

    _run(main())


def _store_with_run(path: Path) -> tuple[EventStore, str]:
    store = EventStore(path)
    run_id = create_run(
        store, workflow="wf", agent_type="demo", repo="/r", node_names=["a"], created_by="t"
    )
    start_run(store, run_id, pid=os.getpid(), host="here")
    return store, run_id.hex


def test_the_feed_follows_a_real_store_and_keeps_the_projections_current(
    db_path: Path,
) -> None:
    """Events another connection appends reach the hub with their log positions, and the
    projections already show them when the hub does (a page fetched then shows them)."""
    store, run = _store_with_run(db_path)

    async def main() -> None:
        hub = Hub(_no_history)
        feed = Feed(hub, db_file=str(db_path), store_url=None, upkeep=None, poll=0.002)
        feed.prepare()
        start = hub.position
        feed.start(asyncio.get_running_loop())
        stream = hub.stream(after=start, run=run)
        try:
            task = asyncio.create_task(_take(stream, 3))
            await asyncio.sleep(0.05)
            record_node_started(store, UUID(run), "a")
            record_agent_output(store, UUID(run), "a", [OutputItem(kind="text", text="hello")])
            frames = await task
            data = [json.loads(f.decode().split("data: ", 1)[1]) for f in frames[1:]]
            assert [d["t"] for d in data] == ["NodeStarted", "AgentOutputRecorded"]
            assert [d["p"] for d in data] == [start + 1, start + 2]
            assert data[1]["text"] == "hello"
            assert data[1]["output"] is True
            conn = open_database(db_path, readonly=True)
            assert get_run(conn, run)["current_node"] == "a"
            conn.close()
        finally:
            await stream.aclose()
            feed.stop()

    _run(main())
    store.close()


def test_a_page_older_than_memory_is_sent_the_log_and_one_far_behind_reloads(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When memory no longer holds what a page missed, it is read from the log itself;
    when that is more than HISTORY_LIMIT events, the page is told to reload."""
    store, run = _store_with_run(db_path)
    for n in range(5):
        record_agent_output(store, UUID(run), "a", [OutputItem(kind="text", text=f"line {n}")])

    async def main() -> None:
        feeds: list[Feed] = []
        hub = Hub(lambda after, until: feeds[0].history(after, until))  # noqa: PLW0108 (made below)
        feed = Feed(hub, db_file=str(db_path), store_url=None, upkeep=None)
        feeds.append(feed)
        feed.prepare()  # the hub's memory starts at the head: what came before is in the log
        head = hub.position
        stream = hub.stream(after=0, run=run)
        frames = await _take(stream, 1 + head + 1)
        assert _positions(frames) == list(range(1, head + 1))
        texts = [json.loads(f.decode().split("data: ", 1)[1]).get("text") for f in frames[1:-1]]
        assert texts[-5:] == [f"line {n}" for n in range(5)]
        await stream.aclose()
        monkeypatch.setattr(feed_module, "HISTORY_LIMIT", 2)
        far = hub.stream(after=0, run=run)
        reload = await _take(far, 2)
        assert reload[1].startswith(b"event: reload\n")
        feed.stop()

    _run(main())
    store.close()
