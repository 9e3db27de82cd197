"""Following the log: the events appended after a position, as soon as they are appended.

A follower wakes on the log's change, not on a timer:

- on SQLite, on the connection's ``PRAGMA data_version``, which changes
  whenever another connection commits (a few microseconds to ask), asked every
  millisecond;
- on a shared store, on the server's notification of each append (``LISTEN``
  on eventsourcing's channel, which shep's appends notify in their
  transaction); it then brings the home's copy of the log up to date
  (``projections.mirror``) and reads the new events from it. While the server
  is away, it follows the copy and tries the server again every few seconds.

One follower can feed many readers: ``shep logs --follow`` prints a run's lines
from it, and a server can fan one follower's events out to its clients.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import apsw

from events.base import Event
from events.catalog import decode_event
from events.errors import StoreError
from events.postgres_url import store_error as pg_store_error
from events.sqlite_file import store_error
from projections.mirror import CONNECT_TIMEOUT

#: The shared store's notification channel: its events table's name, as eventsourcing's
#: PostgreSQL recorders name it.
CHANNEL = "stored_events"

_SELECT = (
    "SELECT notification_id, topic, state FROM stored_events "
    "WHERE notification_id > ? ORDER BY notification_id LIMIT ?"
)


class LogFollower:
    """The log's events after ``after``, batch by batch, as they are appended.

    ``conn`` is the home's database (its own log, or its copy of the shared log at
    ``url``). ``on_notice`` is told, in a sentence, when the shared store goes
    away and when it is back.
    """

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        after: int = 0,
        url: str | None = None,
        poll: float = 0.001,
        idle_poll: float | None = None,
        hot_for: float = 2.0,
        batch_size: int = 500,
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self.conn = conn
        self.position = after
        self.url = url
        self.poll = poll
        # A long-lived follower (the dashboard's) looks less often once the log has been
        # quiet for ``hot_for`` seconds: idle, it then costs next to nothing.
        self.idle_poll = max(idle_poll if idle_poll is not None else poll, poll)
        self.hot_for = hot_for
        self._hot_until = 0.0
        self.batch_size = batch_size
        self.on_notice = on_notice
        self._version = self._data_version()
        self._listener: Any = None
        self._away_until = 0.0
        self._away = False

    def read(self) -> list[tuple[int, Event]]:
        """The next events after the position (up to ``batch_size``), which then moves past
        them; none when the follower is at the head.
        """
        # The change counter first: a commit after it wakes the next wait, so nothing
        # committed after this read is missed.
        self._version = self._data_version()
        try:
            rows = cast(
                list[tuple[int, str, bytes]],
                self.conn.execute(_SELECT, (self.position, self.batch_size)).fetchall(),
            )
        except apsw.Error as e:
            raise store_error(e, self.conn.filename) from e
        if rows:
            self.position = rows[-1][0]
            self._hot_until = time.monotonic() + self.hot_for
        return [(position, decode_event(topic, state)) for position, topic, state in rows]

    def wait(self, timeout: float) -> bool:
        """Block until the log may have grown past the last ``read`` (True), or ``timeout``
        seconds pass (False).
        """
        if self.url is not None:
            return self._wait_for_server(timeout)
        deadline = time.monotonic() + timeout
        while self._data_version() == self._version:
            now = time.monotonic()
            if now >= deadline:
                return False
            time.sleep(self.poll if now < self._hot_until else self.idle_poll)
        return True

    def follow(self, *, idle: float = 1.0) -> Iterator[list[tuple[int, Event]]]:
        """Each batch of new events as it comes; an empty batch after ``idle`` seconds
        without any (so that the caller can do what is due meanwhile).
        """
        while True:
            batch = self.read()
            if batch:
                yield batch
            elif not self.wait(idle):
                yield []

    def close(self) -> None:
        """Stop listening to the shared store (the home's connection stays the caller's)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):  # a broken connection is gone either way
                listener.close()

    def _data_version(self) -> int:
        try:
            return cast(int, self.conn.execute("PRAGMA data_version").fetchall()[0][0])
        except apsw.Error as e:
            raise store_error(e, self.conn.filename) from e

    def _wait_for_server(self, timeout: float) -> bool:
        """Wait for the server's notification, then copy what it has into the home's copy."""
        import psycopg

        assert self.url is not None
        deadline = time.monotonic() + timeout
        if self._listener is None:
            if time.monotonic() < self._away_until:
                time.sleep(max(0.0, min(timeout, self._away_until - time.monotonic())))
                return False
            try:
                self._listener = psycopg.connect(
                    self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT
                )
                self._listener.execute(f'LISTEN "{CHANNEL}"')
            except psycopg.Error as e:
                self.close()
                return self._server_away(pg_store_error(e, self.url))
            # Listening now: whatever was appended before is copied by this pull.
            if self._pull() > 0 or self.read_pending():
                return True
            if self._listener is None:  # the pull found the server gone
                return False
        try:
            notified = any(
                True
                for _ in self._listener.notifies(
                    timeout=max(0.0, deadline - time.monotonic()), stop_after=1
                )
            )
        except psycopg.Error as e:
            self.close()
            return self._server_away(pg_store_error(e, self.url))
        if not notified:
            return False
        return self._pull() > 0 or self.read_pending()

    def read_pending(self) -> bool:
        """Whether the home's database has events past the position (another process of
        this home may have copied them).
        """
        row = self.conn.execute(
            "SELECT 1 FROM stored_events WHERE notification_id > ? LIMIT 1", (self.position,)
        ).fetchone()
        return row is not None

    def _pull(self) -> int:
        from projections.mirror import forget_offline, is_offline, pull

        assert self.url is not None
        forget_offline()
        try:
            copied = pull(self.conn, self.url)
        except StoreError as e:
            if not is_offline(self.url):
                raise  # not the server gone: a copy that does not follow, a broken chain
            self.close()
            self._server_away(e)
            return 0
        if self._away:
            self._away = False
            if self.on_notice is not None:
                self.on_notice("the shared store is back.")
        return copied

    def _server_away(self, error: BaseException) -> bool:
        if not self._away and self.on_notice is not None:
            self.on_notice(f"{error} Following this machine's copy until it is back.")
        self._away = True
        # An unreachable server costs its connect timeout: try again less often.
        self._away_until = time.monotonic() + 2.0
        return self.read_pending()
