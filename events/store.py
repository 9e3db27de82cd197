"""The event store shep's commands write to: eventsourcing's ``EventStore`` on our apsw recorder.

This is the one place eventsourcing errors become shep errors: a duplicate
(stream, version) is a ``ConcurrencyError``, a damaged file a
``StoreCorruptedError``, an unwritable one a ``StoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self, cast
from uuid import UUID

from eventsourcing.persistence import (
    EventStore as LibraryEventStore,
)
from eventsourcing.persistence import (
    IntegrityError,
    PersistenceError,
)

from events.base import Event
from events.catalog import topic_of
from events.errors import ConcurrencyError
from events.mapper import MsgspecMapper
from events.persistence import ApswDatastore, ApswProcessRecorder
from events.schema import DEFAULT_SYNCHRONOUS, store_error

#: Bumped when the schema changes; tables are created when the file is older.
SCHEMA_VERSION = 1


class EventStore:
    """Append events to streams with optimistic concurrency; load a stream back."""

    def __init__(self, path: str | Path, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> None:
        self.path = Path(path)
        self.datastore = ApswDatastore(str(path), synchronous=synchronous)
        self.recorder = ApswProcessRecorder(self.datastore)
        self._mapper = MsgspecMapper()
        self._events = LibraryEventStore(mapper=self._mapper, recorder=self.recorder)
        try:
            with self.datastore.borrow() as conn:
                version = cast(int, conn.execute("PRAGMA user_version").fetchall()[0][0])
                if version < SCHEMA_VERSION:
                    self.recorder.create_table()
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except PersistenceError as e:
            self.datastore.close()
            raise store_error(e, self.path) from e

    def append(
        self, events: Sequence[Event], *, tracking: tuple[str, int] | None = None
    ) -> list[int]:
        """Append events in one transaction; return their global positions.

        ``tracking`` (a reader's name and the log position it has handled) commits
        in the same transaction, so a follower of the log (the supervisor) never
        handles a position twice nor skips one; a position already tracked is a
        ``ConcurrencyError``. Raises ``ConcurrencyError`` when a stream already has
        one of the versions: another writer got there first, and nothing of this
        batch was stored.
        """
        if not events and tracking is None:
            return []
        kwargs = {}
        if tracking is not None:
            from eventsourcing.persistence import Tracking

            kwargs["tracking"] = Tracking(application_name=tracking[0], notification_id=tracking[1])
        try:
            # The library's EventStore.put would also build a Recording per event;
            # commands only need the positions, so map and insert directly.
            to_stored = self._mapper.to_stored_event
            ids = self.recorder.insert_events([to_stored(e) for e in events], **kwargs)
        except IntegrityError as e:
            if not events:
                raise ConcurrencyError(
                    f"Position {tracking[1] if tracking else '?'} was already handled by "
                    f"{tracking[0] if tracking else '?'}."
                ) from e
            first = events[0]
            raise ConcurrencyError(
                f"Stream {first.originator_id} changed while this command ran "
                f"(version {first.originator_version} is taken). Reload and try again."
            ) from e
        except PersistenceError as e:
            raise store_error(e, self.path) from e
        return list(ids or ())

    def load(
        self,
        stream_id: UUID,
        *,
        after_version: int | None = None,
        types: Sequence[type[Event]] | None = None,
    ) -> list[Event]:
        """The events of one stream, oldest first; only those of ``types`` if given."""
        try:
            if types is None:
                return cast(list[Event], list(self._events.get(stream_id, gt=after_version)))
            stored = self.recorder.select_events_of_topics(stream_id, [topic_of(t) for t in types])
            to_event = self._mapper.to_domain_event
            return [
                to_event(s)
                for s in stored
                if after_version is None or s.originator_version > after_version
            ]
        except PersistenceError as e:
            raise store_error(e, self.path) from e

    def stream_version(self, stream_id: UUID) -> int:
        """The version of the stream's newest event, 0 for a stream with none."""
        try:
            last = self.recorder.select_events(stream_id, desc=True, limit=1)
        except PersistenceError as e:
            raise store_error(e, self.path) from e
        return last[0].originator_version if last else 0

    def tracked_position(self, name: str) -> int:
        """The log position reader ``name`` has handled up to (0: none yet)."""
        try:
            return self.recorder.max_tracking_id(name) or 0
        except PersistenceError as e:
            raise store_error(e, self.path) from e

    def positions_of(
        self, topics: Sequence[type[Event]], *, after: int, limit: int = 500
    ) -> list[tuple[int, Event]]:
        """The events of ``topics`` after log position ``after``, oldest first, with positions."""
        try:
            notifications = self.recorder.select_notifications(
                after, limit, topics=[topic_of(t) for t in topics], inclusive_of_start=False
            )
        except PersistenceError as e:
            raise store_error(e, self.path) from e
        to_event = self._mapper.to_domain_event
        return [(n.id, cast(Event, to_event(n))) for n in notifications]

    def max_position(self) -> int:
        """The global position of the newest event, 0 when the store is empty."""
        try:
            return self.recorder.max_notification_id() or 0
        except PersistenceError as e:
            raise store_error(e, self.path) from e

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the store's write lock for the block: loads in it see the newest state,
        appends in it commit together at its end, and no other writer appends meanwhile.

        For a decision that must hold while something outside the store happens
        (starting an agent only while the worker owns the run).
        """
        try:
            with self.datastore.hold():
                yield
        except PersistenceError as e:
            raise store_error(e, self.path) from e

    def close(self) -> None:
        self.datastore.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
