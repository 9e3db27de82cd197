"""The server's follower of the log until the shared one lands (``projections.follow``).

It has the shared follower's shape (``follow(idle=...)`` yields batches of
``(position, event)``; ``close()``), so ``core.open_follower`` can make either.
It wakes on SQLite's change counter (``PRAGMA data_version``, a few microseconds
to ask, changed by every other connection's commit), looked at every ``poll``
seconds while the log moves, and every ``idle_poll`` seconds once it has been quiet
for ``hot_for`` seconds: a run's events come in bursts, and a server nobody writes
to should cost nothing. On a shared store it also brings the home's copy of the log
up to date from the server every ``pull_every`` seconds, as ``shep logs --follow`` does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import apsw

from events.catalog import decode_event
from events.errors import StoreUnavailableError

_SELECT = (
    "SELECT notification_id, topic, state FROM stored_events "
    "WHERE notification_id > ? ORDER BY notification_id LIMIT ?"
)


class PollingFollower:
    """The log's events after ``after``, as they are appended (see the module docstring)."""

    def __init__(
        self,
        conn: apsw.Connection,
        *,
        after: int,
        url: str | None = None,
        poll: float = 0.005,
        idle_poll: float = 0.05,
        hot_for: float = 2.0,
        pull_every: float = 0.25,
        batch_size: int = 500,
    ) -> None:
        self.conn = conn
        self.position = after
        self.url = url
        self.poll = poll
        self.idle_poll = max(idle_poll, poll)
        self.hot_for = hot_for
        self._hot_until = time.monotonic() + hot_for
        self.pull_every = pull_every
        self.batch_size = batch_size
        self._next_pull = 0.0
        self._version = self._data_version()

    def read(self) -> list[tuple[int, Any]]:
        """The next events after the position (up to ``batch_size``); the position moves on."""
        # The change counter first: a commit after it is seen by the next wait.
        self._version = self._data_version()
        rows = cast(
            list[tuple[int, str, bytes]],
            self.conn.execute(_SELECT, (self.position, self.batch_size)).fetchall(),
        )
        if rows:
            self.position = rows[-1][0]
        return [(position, decode_event(topic, state)) for position, topic, state in rows]

    def follow(self, *, idle: float) -> Iterator[list[tuple[int, Any]]]:
        """Each batch of new events as it comes; an empty batch after ``idle`` seconds
        without any."""
        while True:
            batch = self.read()
            if batch:
                self._hot_until = time.monotonic() + self.hot_for
                yield batch
                continue
            deadline = time.monotonic() + idle
            while not self._changed():
                now = time.monotonic()
                if now >= deadline:
                    yield []
                    break
                time.sleep(self.poll if now < self._hot_until else self.idle_poll)

    def close(self) -> None:
        """Nothing to release: the connection is the caller's."""

    def _changed(self) -> bool:
        if self.url is not None and time.monotonic() >= self._next_pull:
            self._next_pull = time.monotonic() + self.pull_every
            from projections.mirror import forget_offline, pull

            forget_offline()
            try:
                if pull(self.conn, self.url) > 0:
                    return True
            except StoreUnavailableError:
                # The server is away: the copy is followed meanwhile, the server asked less often.
                self._next_pull = time.monotonic() + 2.0
        return self._data_version() != self._version

    def _data_version(self) -> int:
        return cast(int, self.conn.execute("PRAGMA data_version").fetchall()[0][0])
