"""Live updates: one follower of the log per server, its events fanned out to every page.

- A ``Follower`` gives the log's events after a position, batch by batch, as they are
  appended. ``core.open_follower`` makes this server's; any object with ``follow``
  and ``close`` of the same meaning fits.
- ``Feed`` runs that follower in a thread of its own: each batch is applied to the
  projections (so that a page fetched after a message shows it), turned into
  messages, encoded once, and handed to the ``Hub`` on the event loop. Between
  batches it marks runs whose worker is gone (``core.upkeep``).
- ``Hub`` keeps the most recent messages and every page's subscription. A page
  subscribes from the log position it was rendered at (``Last-Event-ID`` when its
  browser reconnects): what it missed comes first, from memory or from the log
  itself, then what is new. An idle hub does nothing at all: subscriptions wait on
  an ``asyncio.Event``, and the follower's thread sleeps between two looks at the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from shep.web import core

#: Messages kept in memory for pages that reconnect.
RECENT = 20_000
#: A page further behind than this many events reloads instead of being sent them.
HISTORY_LIMIT = 50_000
#: Messages a page may fall behind by before its stream is closed (its browser then
#: reconnects and is sent what it missed).
BACKLOG = 5_000
#: A comment every so often keeps a quiet connection open through proxies, and finds
#: pages that went away.
KEEPALIVE = 25.0
#: How long the follower's thread may wait for the log before it looks at what is due.
IDLE = 0.5
#: Seconds between two rounds of upkeep (orphaned runs, due deadlines).
UPKEEP_EVERY = 2.0
#: Characters of one message's text sent to a page (the run's page links to the rest).
TEXT_LIMIT = 4_000

_log = logging.getLogger("shep.web")


class Follower(Protocol):
    """The log's events after a position, as they are appended."""

    def follow(self, *, idle: float) -> Iterator[list[tuple[int, Any]]]:
        """Each batch of new ``(position, event)`` as it comes; an empty batch after
        ``idle`` seconds without any."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Message:
    """One event as pages get it: its position, its run (None: every page's), whether it
    is agent output (sent only to its run's pages), and the SSE frame, encoded once.
    """

    position: int
    run: str | None
    output: bool
    frame: bytes
    #: The event's type (``RunCreated``), or ``inbox`` for the inbox count.
    kind: str = ""


def sse_frame(position: int, data: dict[str, Any], *, event: str | None = None) -> bytes:
    """An SSE frame: its id is a log position, its data one line of JSON."""
    head = f"event: {event}\n" if event else ""
    body = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return f"{head}id: {position}\ndata: {body}\n\n".encode()


def to_message(position: int, event: Any) -> Message | None:
    """The message of one event; None for an event no page shows (checkpoints)."""
    shown = core.event_line(event)
    if shown is None:
        return None
    run, payload = shown
    payload["p"] = position
    text = payload.get("text") or ""
    if len(text) > TEXT_LIMIT:
        payload["text"] = text[:TEXT_LIMIT] + f" ... ({len(text) - TEXT_LIMIT} more characters)"
    output = bool(payload.get("output"))
    return Message(position, run, output, sse_frame(position, payload), payload["t"])


def inbox_message(position: int, count: int) -> Message:
    """How many items wait in the inbox, as every page's header shows it."""
    frame = sse_frame(position, {"t": "inbox", "count": count})
    return Message(position, None, False, frame, "inbox")


@dataclass(eq=False)
class Subscription:
    """A page's place in the hub: what it asked for, and what waits to be sent to it."""

    run: str | None
    after: int
    pending: deque[Message] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    def wants(self, message: Message) -> bool:
        if message.position <= self.after and message.run is not None:
            return False
        if self.run is None:
            return not message.output
        return message.run is None or message.run == self.run

    def offer(self, message: Message) -> None:
        if self.closed or not self.wants(message):
            return
        if len(self.pending) >= BACKLOG:
            self.close()  # too far behind: its browser reconnects from its last id
            return
        self.pending.append(message)
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.pending.clear()
        self.wake.set()


class Hub:
    """Every page's subscription, and the recent messages; lives on the event loop."""

    def __init__(self, history: Callable[[int, int], list[Message] | None]) -> None:
        #: Reads the log's messages in (after, until], or None when too many: run in a thread.
        self._history = history
        self.subscriptions: set[Subscription] = set()
        self.recent: deque[Message] = deque(maxlen=RECENT)
        #: ``recent`` holds every message past this position.
        self.recent_after = 0
        #: The position up to which messages were published (the feed's start, at first).
        self.position = 0
        self.inbox_count = 0
        #: How many runs were created since the server started (lists of names go stale).
        self.runs_created = 0
        self.closing = False

    def start_at(self, position: int, inbox_count: int) -> None:
        self.position = self.recent_after = max(self.position, position)
        self.inbox_count = inbox_count

    def publish(self, messages: list[Message], position: int, inbox_count: int | None) -> None:
        """Hand a batch's messages to every subscription (called on the loop)."""
        self.position = max(self.position, position)
        if inbox_count is not None:
            self.inbox_count = inbox_count
        for message in messages:
            if message.kind == "RunCreated":
                self.runs_created += 1
            if len(self.recent) == self.recent.maxlen:
                self.recent_after = self.recent[0].position
            self.recent.append(message)
            for subscription in self.subscriptions:
                subscription.offer(message)

    def close(self) -> None:
        """End every stream: the server is stopping, or can no longer follow the log
        (pages then show that they are not live)."""
        self.closing = True
        for subscription in list(self.subscriptions):
            subscription.close()

    async def stream(self, *, after: int, run: str | None) -> AsyncIterator[bytes]:
        """The SSE frames of one page: the inbox count, what it missed since ``after``,
        then each new message, with a comment now and then while nothing happens.
        """
        subscription = Subscription(run=run, after=after)
        # Registered and measured at once: whatever is published from here on is queued,
        # whatever was before comes from what was missed, and nothing comes twice.
        self.subscriptions.add(subscription)
        until = self.position
        try:
            yield b"retry: 1000\n\n"
            yield inbox_message(max(after, 0), self.inbox_count).frame
            missed = await self._missed(after, until)
            if missed is None:
                yield sse_frame(self.position, {"t": "reload"}, event="reload")
                return
            for message in missed:
                if subscription.wants(message):
                    yield message.frame
            while not subscription.closed:
                if not subscription.pending:
                    subscription.wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(subscription.wake.wait(), KEEPALIVE)
                    if not subscription.pending and not subscription.closed:
                        yield b": keepalive\n\n"
                        continue
                while subscription.pending:
                    message = subscription.pending.popleft()
                    subscription.after = max(subscription.after, message.position)
                    yield message.frame
        finally:
            subscription.closed = True
            self.subscriptions.discard(subscription)

    async def _missed(self, after: int, until: int) -> list[Message] | None:
        """The messages in (after, until], published before a subscription began: from
        memory when it still holds them, else from the log; None when too many.
        """
        if after >= until:
            return []
        if after >= self.recent_after:
            return [m for m in self.recent if after < m.position <= until]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._history, after, until)


class Feed:
    """The follower's thread: reads the log, keeps the projections current, publishes."""

    def __init__(
        self,
        hub: Hub,
        *,
        db_file: str,
        store_url: str | None,
        upkeep: Callable[[], None] | None,
        open_follower: Callable[..., Follower] = core.open_follower,
        poll: float = core.POLL,
    ) -> None:
        self.hub = hub
        self.db_file = db_file
        self.store_url = store_url
        self.upkeep = upkeep
        self.open_follower = open_follower
        self.poll = poll
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self._head = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    @property
    def prepared(self) -> bool:
        return self._conn is not None

    def prepare(self) -> None:
        """Open the store, catch the projections up, and note the log's head, from which
        the feed follows: what fails here fails before the server listens.
        """
        conn = core.open_writing(self.db_file)
        try:
            core.catch_up(conn, pull=True)
            self._head = core.head_position(conn)
            self.hub.start_at(self._head, core.count_pending(conn))
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Follow the log in a thread, publishing on ``loop``."""
        if not self.prepared:
            self.prepare()
        self.loop = loop
        self._thread = threading.Thread(
            target=self._run, args=(self._conn, self._head), name="shep-ui-feed", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def history(self, after: int, until: int) -> list[Message] | None:
        """The messages of the log's events in (after, until]; None when there are more than
        ``HISTORY_LIMIT`` (the page reloads instead).
        """
        if until - after > HISTORY_LIMIT:
            return None
        conn = core.open_reading(self.db_file)
        try:
            events = core.read_events(conn, after, until)
            count = core.count_pending(conn)
        finally:
            conn.close()
        messages = [m for p, e in events if (m := to_message(p, e)) is not None]
        messages.append(inbox_message(until, count))
        return messages

    def _run(self, conn: Any, head: int) -> None:
        follower = self.open_follower(conn, after=head, url=self.store_url, poll=self.poll)
        next_upkeep = time.monotonic() + UPKEEP_EVERY
        try:
            for batch in follower.follow(idle=IDLE):
                if self._stop.is_set():
                    return
                if batch:
                    self._publish(conn, batch)
                if self.upkeep is not None and time.monotonic() >= next_upkeep:
                    try:
                        self.upkeep()
                    except Exception:  # a failed round is tried again; the feed goes on
                        _log.exception("upkeep failed")
                    next_upkeep = time.monotonic() + UPKEEP_EVERY
        except BaseException as e:
            self.error = e
            _log.exception("the log's follower stopped; pages are no longer live")
            if self.loop is not None:
                with contextlib.suppress(RuntimeError):
                    self.loop.call_soon_threadsafe(self.hub.close)
        finally:
            follower.close()
            conn.close()

    def _publish(self, conn: Any, batch: list[tuple[int, Any]]) -> None:
        core.catch_up(conn, pull=False)  # the follower brought a shared log's copy up to date
        messages = [m for p, e in batch if (m := to_message(p, e)) is not None]
        count: int | None = None
        if any(core.touches_inbox(e) for _, e in batch):
            count = core.count_pending(conn)
            messages.append(inbox_message(batch[-1][0], count))
        position = batch[-1][0]
        assert self.loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
            self.loop.call_soon_threadsafe(self.hub.publish, messages, position, count)
