"""The event store shep's commands write to: eventsourcing's ``EventStore`` on our recorders.

A path opens the SQLite file (our apsw recorder); a ``postgresql://`` URL
opens the shared store (``events.postgres``). Both keep gap-free positions and
the same hash chain, so every command works the same on either.

This is the one place eventsourcing errors become shep errors: a duplicate
(stream, version) is a ``ConcurrencyError``, a damaged file a
``StoreCorruptedError``, an unwritable one or an unreachable server a
``StoreUnavailableError``. On the shared store, a caller that sets
``retry_for`` (a worker) rides out a lost connection: each call waits for the
server, with backoff, up to that many seconds in all before it gives up.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self, TypeVar, cast
from uuid import UUID

from eventsourcing.persistence import (
    EventStore as LibraryEventStore,
)
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    OperationalError,
    PersistenceError,
    StoredEvent,
)

from events.base import Event
from events.catalog import decode_event as decode
from events.catalog import encode_events as encode_all
from events.catalog import topic_of
from events.errors import ConcurrencyError, StoreError, StoreUnavailableError, UnknownEventError
from events.mapper import MsgspecMapper
from events.migrations import Notice, StoreSchema, open_postgres, open_sqlite
from events.postgres_url import is_postgres_url, redacted
from events.postgres_url import store_error as pg_store_error
from events.postgres_url import where as pg_where
from events.sqlite import ApswProcessRecorder
from events.sqlite_datastore import ApswDatastore
from events.sqlite_file import DEFAULT_SYNCHRONOUS, store_error

T = TypeVar("T")

#: Waiting for a lost shared store: the first pause, doubled up to the longest.
RETRY_FIRST_DELAY = 0.2
RETRY_LONGEST_DELAY = 5.0

#: A stream's stored snapshot is renewed, with the stream's next append, once the
#: newest fold this process made of it is this many versions ahead of it.
SNAPSHOT_INTERVAL = 100
#: How many streams' newest snapshots a process keeps in memory.
SNAPSHOTS_KEPT = 256


class _Snapshot(NamedTuple):
    topic: str
    version: int
    state: bytes
    #: The version of the stream's snapshot known to be in the store's table (0: none).
    stored: int


def _encoded(events: Sequence[Event]) -> list[tuple[str, int, str, bytes]]:
    """Each event's stored columns: (originator id as hex, version, topic, state).

    A batch is mostly one stream and a few event types: their hex id and topic
    are computed once each, and the states are encoded in one call.
    """
    rows = []
    last: UUID | None = None
    last_kind: type[Event] | None = None
    oid = topic = ""
    for e, state in zip(events, encode_all(events), strict=True):
        if e.originator_id is not last:
            last = e.originator_id
            oid = last.hex
        if type(e) is not last_kind:
            last_kind = type(e)
            topic = topic_of(last_kind)
        rows.append((oid, e.originator_version, topic, state))
    return rows


class EventStore:
    """Append events to streams with optimistic concurrency; load a stream back."""

    def __init__(
        self,
        location: str | os.PathLike[str],
        *,
        synchronous: str = DEFAULT_SYNCHRONOUS,
        on_notice: Notice | None = None,
    ) -> None:
        """Open (and create, or migrate forward once) the store; ``on_notice`` is told what
        an upgrade does, a line at a time (see ``events.migrations``)."""
        where = os.fspath(location)
        #: The shared store's URL, or None for a SQLite file.
        self.url = where if is_postgres_url(where) else None
        self.path = Path(redacted(where) if self.url else where)
        #: Seconds a call may wait for a lost server (shared store only; 0: fail at once).
        self.retry_for = 0.0
        #: Told (once per outage) when a call starts waiting for the server, and when it is back.
        self.on_retry: Callable[[str], None] | None = None
        self._gave_up: StoreError | None = None
        #: The log position of the last event this store appended (0: none yet).
        self.last_appended = 0
        self._mapper = MsgspecMapper()
        self._snapshots: OrderedDict[UUID, _Snapshot] = OrderedDict()
        self._snapshots_guard = threading.Lock()
        if self.url is not None:
            from events.postgres import PgDatastore, PgProcessRecorder

            self.datastore: Any = PgDatastore(self.url)
            self.recorder: Any = PgProcessRecorder(self.datastore)
        else:
            self.datastore = ApswDatastore(where, synchronous=synchronous)
            self.recorder = ApswProcessRecorder(self.datastore)
        self._events = LibraryEventStore(mapper=self._mapper, recorder=self.recorder)
        try:
            self.schema: StoreSchema = (
                open_postgres(self.datastore, self.recorder, pg_where(self.url), on_notice)
                if self.url is not None
                else open_sqlite(self.datastore, self.recorder, on_notice)
            )
        except PersistenceError as e:
            cause: BaseException = e
            if self.url is not None and type(e.__cause__).__name__ == "PoolTimeout":
                cause = self.datastore.connect_error() or e  # the pool does not say why
            self.datastore.close()
            raise self._error(cause) from e
        except BaseException:
            self.datastore.close()  # an upgrade that stopped (it says why)
            raise

    @property
    def shared(self) -> bool:
        return self.url is not None

    @property
    def given_up(self) -> bool:
        """The shared store stayed away past ``retry_for``, or the store was given up
        (``give_up``): every call now fails at once."""
        return self._gave_up is not None

    def give_up(self, error: StoreError) -> None:
        """From now on every call fails at once with ``error`` (``given_up``): for a worker
        whose store is gone (``file_moved``), so that nothing more is written anywhere.
        """
        self._gave_up = error

    def file_moved(self) -> str | None:
        """Whether the store's path still names the SQLite file this store opened: None if
        it does (or for a shared store), else ``"deleted"`` or ``"replaced"``.

        Writes through an open connection go to the file it opened, wherever its path
        points now: into a deleted file, or beside a new one (a new home, a restore).
        """
        return None if self.url is not None else cast(str | None, self.datastore.file_moved())

    def _error(self, error: BaseException) -> StoreError:
        if self.url is not None:
            return pg_store_error(error, self.url)
        return store_error(error, self.path)

    def _call(self, read: Callable[[], T]) -> T:
        """``read()``, waiting for a lost server up to ``retry_for`` seconds (shared store)."""
        self._check_given_up()
        try:
            return read()
        except (OperationalError, InterfaceError) as e:
            if self.url is None or self.retry_for <= 0:
                raise
            first = e
        self._wait_for_server(first)
        return self._call(read)

    def _check_given_up(self) -> None:
        if self._gave_up is not None:
            raise StoreUnavailableError(str(self._gave_up))

    def _wait_for_server(self, error: BaseException) -> None:
        """Wait, with backoff, until the server answers again; give up after ``retry_for``."""
        started = time.monotonic()
        if self.on_retry is not None:
            self.on_retry(f"lost the shared store ({self._error(error)}); retrying")
        delay = RETRY_FIRST_DELAY
        while True:
            try:
                self.recorder.max_notification_id()
            except (OperationalError, InterfaceError) as e:
                waited = time.monotonic() - started
                if waited >= self.retry_for:
                    self._gave_up = self._error(e)
                    if self.on_retry is not None:
                        self.on_retry(f"gave up after {waited:.1f}s: {self._gave_up}")
                    raise self._gave_up from e
                time.sleep(min(delay, max(0.0, self.retry_for - waited)))
                delay = min(delay * 2, RETRY_LONGEST_DELAY)
                continue
            if self.on_retry is not None:
                self.on_retry(f"the shared store is back after {time.monotonic() - started:.1f}s")
            return

    @property
    def checks_expected_version(self) -> bool:
        """Whether ``append(expected_version=...)`` checks the stream's version (SQLite)."""
        return self.url is None

    def append(
        self,
        events: Sequence[Event],
        *,
        tracking: tuple[str, int] | None = None,
        expected_version: int | None = None,
    ) -> list[int]:
        """Append events in one transaction; return their global positions.

        ``expected_version`` (where ``checks_expected_version``): the first event's
        stream must be at exactly that version when the events commit, else
        ``ConcurrencyError`` and nothing is stored; a decision made on a fold at that
        version then holds at commit even when the fold was not read from the log.

        ``tracking`` (a reader's name and the log position it has handled) commits
        in the same transaction, so a follower of the log (the supervisor) never
        handles a position twice nor skips one; a position already tracked is a
        ``ConcurrencyError``. Raises ``ConcurrencyError`` when a stream already has
        one of the versions: another writer got there first, and nothing of this
        batch was stored.
        """
        if not events and tracking is None:
            return []
        self._check_given_up()
        if self.schema.too_new is not None:
            raise self.schema.too_new
        kwargs: dict[str, Any] = {}
        if tracking is not None:
            from eventsourcing.persistence import Tracking

            kwargs["tracking"] = Tracking(application_name=tracking[0], notification_id=tracking[1])
        try:
            if self.url is None:
                # The library's EventStore.put would build a StoredEvent and a Recording
                # per event; SQLite takes the encoded columns directly (the mapper has no
                # cipher or compressor here, so its state is the encoded event).
                stream = events[0].originator_id if events else None
                if stream is not None and expected_version is not None:
                    kwargs["expected"] = (stream.hex, expected_version)
                due = self._snapshot_due(stream) if stream is not None else None
                if stream is not None and due is not None:
                    kwargs["snapshot"] = (stream.hex, due.version, due.topic, due.state)
                ids = self.recorder.insert_rows(_encoded(events), **kwargs)
                if stream is not None and due is not None:
                    self._stored_snapshot(stream, due)
            else:
                to_stored = self._mapper.to_stored_event
                ids = self._insert([to_stored(e) for e in events], kwargs)
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
            raise self._error(e) from e
        if ids:
            self.last_appended = max(self.last_appended, *ids)
        return list(ids or ())

    def _insert(self, stored: list[StoredEvent], kwargs: dict[str, Any]) -> Any:
        self._check_given_up()
        try:
            return self.recorder.insert_events(stored, **kwargs)
        except (OperationalError, InterfaceError) as e:
            if self.url is None or self.retry_for <= 0:
                raise
            self._wait_for_server(e)
        # The commit may have reached the server before the connection dropped:
        # the same events must not be stored twice.
        stored_already = self._call(lambda: self.recorder.positions_if_stored(stored))
        if stored_already is not None:
            return stored_already
        return self._insert(stored, kwargs)

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
                return self._call(
                    lambda: cast(list[Event], list(self._events.get(stream_id, gt=after_version)))
                )
            names = [topic_of(t) for t in types]
            stored = self._call(
                lambda: self.recorder.select_events_of_topics(
                    stream_id, names, gt=after_version or 0
                )
            )
            to_event = self._mapper.to_domain_event
            return [to_event(s) for s in stored]
        except PersistenceError as e:
            raise self._error(e) from e
        except UnknownEventError as e:
            raise self._unknown(e) from None

    def _unknown(self, error: UnknownEventError) -> UnknownEventError:
        """The refusal to read an event, naming the newest shep that wrote to this store."""
        place = f"The event store {self.path}"
        if self.url is not None:
            place = f"The shared store at {pg_where(self.url)}"
        return error.naming(self.schema.newest_writer, where=place)

    def load_since(
        self, stream_id: UUID, *, after_version: int, types: Sequence[type[Event]]
    ) -> tuple[int, list[Event]]:
        """The stream's version, and its events of ``types`` after ``after_version`` up to
        that version, oldest first.

        A fold of what it returns onto a fold at ``after_version`` is the fold at the
        returned version: every event at or below it is included, whatever is appended
        meanwhile.
        """
        names = [topic_of(t) for t in types]
        self._check_given_up()
        try:
            if self.url is None:
                version, rows = self.recorder.select_since(stream_id.hex, after_version, names)
                return version, [decode(topic, state) for _, topic, state in rows]
            # The version first, then what is at or below it: an event appended between
            # the two reads is left for the next fold.
            version = self.stream_version(stream_id)
            stored = self._call(
                lambda: self.recorder.select_events_of_topics(stream_id, names, gt=after_version)
            )
        except PersistenceError as e:
            raise self._error(e) from e
        except UnknownEventError as e:
            raise self._unknown(e) from None
        to_event = self._mapper.to_domain_event
        try:
            return version, [to_event(s) for s in stored if s.originator_version <= version]
        except UnknownEventError as e:
            raise self._unknown(e) from None

    def get_snapshot(
        self, stream_id: UUID, topic: str, *, memory_only: bool = False
    ) -> tuple[int, bytes] | None:
        """The newest snapshot of the stream made under ``topic``: (version, state), or None.

        This process's newest, else (unless ``memory_only``) the one stored with the
        stream (SQLite). A snapshot only saves folding what it covers again; the
        caller folds the events after it.
        """
        with self._snapshots_guard:
            known = self._snapshots.get(stream_id)
            if known is not None:
                self._snapshots.move_to_end(stream_id)
        if known is not None and known.topic == topic:
            return known.version, known.state
        if self.url is not None or known is not None or memory_only:
            return None
        self._check_given_up()
        try:
            stored = self.recorder.select_snapshot(stream_id.hex)
        except PersistenceError as e:
            raise self._error(e) from e
        if stored is None:
            return None
        version, stored_topic, state = stored
        self._keep(stream_id, _Snapshot(stored_topic, version, state, version))
        return (version, state) if stored_topic == topic else None

    def put_snapshot(self, stream_id: UUID, topic: str, version: int, state: bytes) -> None:
        """Keep ``state`` as the stream's fold at ``version`` (made under ``topic``).

        Kept in memory; on SQLite it is also stored, in the transaction of the stream's
        next append, once it is ``SNAPSHOT_INTERVAL`` versions ahead of the stored one.
        """
        with self._snapshots_guard:
            known = self._snapshots.get(stream_id)
        # Kept even when older than the one in memory: each is exact at its version, and
        # the newer may be of a log that is no longer there (a file put back from a copy).
        stored = known.stored if known is not None and known.topic == topic else 0
        self._keep(stream_id, _Snapshot(topic, version, state, stored))

    def _keep(self, stream_id: UUID, snapshot: _Snapshot) -> None:
        with self._snapshots_guard:
            self._snapshots[stream_id] = snapshot
            self._snapshots.move_to_end(stream_id)
            while len(self._snapshots) > SNAPSHOTS_KEPT:
                self._snapshots.popitem(last=False)

    def _snapshot_due(self, stream_id: UUID) -> _Snapshot | None:
        with self._snapshots_guard:
            known = self._snapshots.get(stream_id)
        if known is None or known.version - known.stored < SNAPSHOT_INTERVAL:
            return None
        return known

    def _stored_snapshot(self, stream_id: UUID, stored: _Snapshot) -> None:
        with self._snapshots_guard:
            known = self._snapshots.get(stream_id)
            if known is not None and known.topic == stored.topic:
                self._snapshots[stream_id] = known._replace(
                    stored=max(known.stored, stored.version)
                )

    def stream_version(self, stream_id: UUID) -> int:
        """The version of the stream's newest event, 0 for a stream with none."""
        try:
            last = self._call(lambda: self.recorder.select_events(stream_id, desc=True, limit=1))
        except PersistenceError as e:
            raise self._error(e) from e
        return last[0].originator_version if last else 0

    def tracked_position(self, name: str) -> int:
        """The log position reader ``name`` has handled up to (0: none yet)."""
        try:
            return self._call(lambda: self.recorder.max_tracking_id(name)) or 0
        except PersistenceError as e:
            raise self._error(e) from e

    def positions_of(
        self, topics: Sequence[type[Event]], *, after: int, limit: int = 500
    ) -> list[tuple[int, Event]]:
        """The events of ``topics`` after log position ``after``, oldest first, with positions."""
        try:
            names = [topic_of(t) for t in topics]
            notifications = self._call(
                lambda: self.recorder.select_notifications(
                    after, limit, topics=names, inclusive_of_start=False
                )
            )
        except PersistenceError as e:
            raise self._error(e) from e
        to_event = self._mapper.to_domain_event
        try:
            return [(n.id, cast(Event, to_event(n))) for n in notifications]
        except UnknownEventError as e:
            raise self._unknown(e) from None

    def max_position(self) -> int:
        """The global position of the newest event, 0 when the store is empty."""
        try:
            return self._call(self.recorder.max_notification_id) or 0
        except PersistenceError as e:
            raise self._error(e) from e

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the store's write lock for the block: loads in it see the newest state,
        appends in it commit together at its end, and no other writer appends meanwhile.

        For a decision that must hold while something outside the store happens
        (starting an agent only while the worker owns the run).
        """
        if self.schema.too_new is not None:
            raise self.schema.too_new
        try:
            if self.url is None:
                with self.datastore.hold():
                    yield
            else:
                self._call(lambda: None)  # refuse at once after giving up
                with self.datastore.hold(self.recorder.lock_table_statements):
                    yield
        except PersistenceError as e:
            raise self._error(e) from e

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
