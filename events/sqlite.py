"""An eventsourcing persistence module on apsw.

Select it with ``PERSISTENCE_MODULE=events.sqlite:ApswFactory`` and
``APSW_DBNAME=/path/to/shep.db``. It provides the aggregate, application,
tracking and process recorders, and passes the library's own recorder test
cases (see ``tests/events/test_persistence.py``).

- One connection per thread, WAL, a busy timeout, ``synchronous`` as configured.
- Writes run in ``BEGIN IMMEDIATE`` transactions behind a per-file lock, so
  threads of one process queue up instead of spinning in SQLite's busy handler.
- Each stored event carries ``chain_hash = H(previous hash, event)``.
- Every apsw error is translated once, here, into the library's PEP 249 names.
- ``subscribe()`` works across processes: a poller watches ``PRAGMA
  data_version``, which changes whenever another connection commits.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, TypeVar
from uuid import UUID

import apsw
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    OperationalError,
    PersistenceError,
    ProcessRecorder,
    ProgrammingError,
    Recorder,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType, resolve_topic, strtobool

from events.chain import GENESIS_HASH, ROW_WIDTH, chained_values
from events.sqlite_datastore import ApswDatastore, translate
from events.sqlite_file import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    TRACKING_DDL,
    events_table_ddl,
)

#: The most rows one INSERT of a batch of events writes. A batch goes in as statements
#: of ``MOST_ROWS`` rows, then of powers of two (100 events: 64, 32 and 4 rows): one
#: statement of many rows costs SQLite and apsw less per row than a statement a row,
#: and the few sizes keep the connection's statement cache small.
MOST_ROWS = 64
INSERT_ROWS = tuple(1 << bit for bit in range(MOST_ROWS.bit_length()))
#: Up to this many bytes of state per event on average, a batch goes in as many-row
#: INSERTs; bigger events go in a statement a row, which then costs less (measured:
#: 10% less per row with states of 200 bytes, 10% to 30% more from 600 bytes on).
MANY_ROW_STATE_BYTES = 320


class ApswRecorder(Recorder):
    """Creates its tables from DDL statements."""

    def __init__(self, datastore: ApswDatastore) -> None:
        self.datastore = datastore
        self.create_table_statements = self.construct_create_table_statements()

    def construct_create_table_statements(self) -> list[str]:
        return []

    def create_table(self) -> None:
        with self.datastore.transaction(commit=True) as c:
            for statement in self.create_table_statements:
                c.execute(statement)


class ApswAggregateRecorder(ApswRecorder, AggregateRecorder):
    """Events per originator, unique by (originator_id, version), hash-chained."""

    def __init__(self, datastore: ApswDatastore, events_table_name: str = "stored_events") -> None:
        if not events_table_name.replace("_", "").isalnum():
            raise ProgrammingError(f"invalid table name {events_table_name!r}")
        self.events_table_name = events_table_name
        super().__init__(datastore)
        self._select_last = (
            f"SELECT notification_id, chain_hash FROM {events_table_name} "
            "ORDER BY notification_id DESC LIMIT 1"
        )
        self._insert_many = {
            rows: f"INSERT INTO {events_table_name} VALUES "
            + ",".join(["(" + ",".join("?" * ROW_WIDTH) + ")"] * rows)
            for rows in INSERT_ROWS
        }

    def construct_create_table_statements(self) -> list[str]:
        return events_table_ddl(self.events_table_name)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not stored_events and kwargs.get("tracking") is None:
            return None
        encode_id = self.datastore.encode_id
        rows = [
            (encode_id(s.originator_id), s.originator_version, s.topic, s.state)
            for s in stored_events
        ]
        with self.datastore.transaction(commit=True) as c:
            ids = self._insert_rows(c, rows, **kwargs)
        return self._returning(ids)

    def insert_rows(self, rows: Sequence[tuple[str, int, str, bytes]], **kwargs: Any) -> list[int]:
        """``insert_events`` for events already encoded: (originator id as stored, version,
        topic, state) each. shep's ``EventStore`` appends through this, without building a
        ``StoredEvent`` per event.
        """
        with self.datastore.transaction(commit=True) as c:
            return self._insert_rows(c, rows, **kwargs)

    def _returning(self, ids: list[int]) -> Sequence[int] | None:
        return None

    def _insert_rows(
        self, c: apsw.Cursor, rows: Sequence[tuple[str, int, str, bytes]], **_: Any
    ) -> list[int]:
        if not rows:
            return []
        last = c.execute(self._select_last).fetchone()
        position, previous = (int(last[0]), bytes(last[1])) if last else (0, GENESIS_HASH)
        values = chained_values(previous, position, rows)[0]
        if len(rows) > 1 and sum(len(row[3]) for row in rows) > len(rows) * MANY_ROW_STATE_BYTES:
            c.executemany(self._insert_many[1], zip(*[iter(values)] * ROW_WIDTH, strict=True))
        else:
            done, left = 0, len(rows)
            while left:
                count = MOST_ROWS if left >= MOST_ROWS else 1 << (left.bit_length() - 1)
                width = count * ROW_WIDTH
                c.execute(self._insert_many[count], values[done : done + width])
                done += width
                left -= count
        return list(range(position + 1, position + 1 + len(rows)))

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        statement = (
            "SELECT originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name} WHERE originator_id=?"
        )
        params: list[Any] = [self.datastore.encode_id(originator_id)]
        if gt is not None:
            statement += " AND originator_version>?"
            params.append(gt)
        if lte is not None:
            statement += " AND originator_version<=?"
            params.append(lte)
        statement += " ORDER BY originator_version " + ("DESC" if desc else "ASC")
        if limit is not None:
            statement += " LIMIT ?"
            params.append(limit)
        decode_id = self.datastore.decode_id
        with self.datastore.transaction(commit=False) as c:
            return [
                StoredEvent(
                    originator_id=decode_id(row[0]),
                    originator_version=row[1],
                    topic=row[2],
                    state=bytes(row[3]),
                )
                for row in c.execute(statement, params)
            ]

    def select_events_of_topics(
        self, originator_id: UUID | str, topics: Sequence[str], *, gt: int = 0
    ) -> Sequence[StoredEvent]:
        """The originator's events after version ``gt`` whose topic is one of ``topics``,
        oldest first.
        """
        statement = (
            "SELECT originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name} WHERE originator_id=? AND originator_version>? "
            f"AND topic IN ({','.join('?' * len(topics))}) ORDER BY originator_version"
        )
        decode_id = self.datastore.decode_id
        params = (self.datastore.encode_id(originator_id), gt, *topics)
        with self.datastore.transaction(commit=False) as c:
            return [
                StoredEvent(decode_id(row[0]), row[1], row[2], bytes(row[3]))
                for row in c.execute(statement, params)
            ]


class ApswApplicationRecorder(ApswAggregateRecorder, ApplicationRecorder):
    """Adds the application sequence: gap-free notification ids and subscriptions."""

    def _returning(self, ids: list[int]) -> Sequence[int] | None:
        return ids

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        clauses: list[str] = []
        params: list[Any] = []
        if start is not None:
            clauses.append("notification_id>=?" if inclusive_of_start else "notification_id>?")
            params.append(start)
        if stop is not None:
            clauses.append("notification_id<=?")
            params.append(stop)
        if topics:
            clauses.append(f"topic IN ({','.join('?' * len(topics))})")
            params.extend(topics)
        statement = (
            "SELECT notification_id, originator_id, originator_version, topic, state "
            f"FROM {self.events_table_name}"
        )
        if clauses:
            statement += " WHERE " + " AND ".join(clauses)
        statement += " ORDER BY notification_id LIMIT ?"
        params.append(limit)
        decode_id = self.datastore.decode_id
        with self.datastore.transaction(commit=False) as c:
            return [
                Notification(
                    id=row[0],
                    originator_id=decode_id(row[1]),
                    originator_version=row[2],
                    topic=row[3],
                    state=bytes(row[4]),
                )
                for row in c.execute(statement, params)
            ]

    def max_notification_id(self) -> int | None:
        with self.datastore.transaction(commit=False) as c:
            row = c.execute(f"SELECT MAX(notification_id) FROM {self.events_table_name}").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return ApswSubscription(self, gt=gt, topics=topics)


class ApswSubscription(ListenNotifySubscription[ApswApplicationRecorder]):
    """Wakes on commits in this process at once, and on other processes' commits by polling.

    ``PRAGMA data_version`` on a connection of the poller's own changes when
    any other connection commits; reading it costs a few microseconds.
    """

    poll_interval = 0.005

    def __init__(
        self,
        recorder: ApswApplicationRecorder,
        gt: int | None = None,
        topics: Sequence[str] = (),
    ) -> None:
        recorder.datastore.add_listener(self._local_commit)
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._poll_thread = threading.Thread(target=self._poll, daemon=True)
        self._poll_thread.start()

    @property
    def _local_commit(self) -> threading.Event:
        # Created lazily because the base class makes its event in __init__.
        event: threading.Event | None = getattr(self, "_commit_event", None)
        if event is None:
            event = threading.Event()
            self._commit_event = event
        return event

    def _poll(self) -> None:
        datastore = self._recorder.datastore
        try:
            conn = datastore.new_connection()
        except PersistenceError as e:
            self._thread_error = e
            self.stop()
            return
        try:
            last = conn.execute("PRAGMA data_version").fetchall()[0][0]
            while not self._has_been_stopped:
                if self._local_commit.wait(self.poll_interval):
                    self._local_commit.clear()
                    self._has_been_notified.set()
                    continue
                version = conn.execute("PRAGMA data_version").fetchall()[0][0]
                if version != last:
                    last = version
                    self._has_been_notified.set()
        except apsw.Error as e:
            if self._thread_error is None:
                self._thread_error = translate(e)
            self.stop()
        finally:
            conn.close()

    def stop(self) -> None:
        super().stop()
        self._recorder.datastore.remove_listener(self._local_commit)

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._poll_thread.join()


class ApswTrackingRecorder(ApswRecorder, TrackingRecorder):
    """One row per upstream application: the last notification id it processed."""

    _insert_tracking_statement = (
        "INSERT INTO tracking VALUES (:name, :nid) "
        "ON CONFLICT (application_name) DO UPDATE SET notification_id = :nid "
        "WHERE tracking.notification_id < :nid RETURNING notification_id"
    )

    def __init__(self, datastore: ApswDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)

    def construct_create_table_statements(self) -> list[str]:
        statements = super().construct_create_table_statements()
        statements.append(TRACKING_DDL)
        return statements

    def insert_tracking(self, tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as c:
            self._insert_tracking(c, tracking)

    def _insert_tracking(self, c: apsw.Cursor, tracking: Tracking) -> None:
        rows = c.execute(
            self._insert_tracking_statement,
            {"name": tracking.application_name, "nid": tracking.notification_id},
        ).fetchall()
        if not rows:
            raise IntegrityError(
                f"Failed to record tracking for {tracking.application_name} "
                f"{tracking.notification_id}: not newer than the recorded position"
            )

    def max_tracking_id(self, application_name: str) -> int | None:
        with self.datastore.transaction(commit=False) as c:
            row = c.execute(
                "SELECT notification_id FROM tracking WHERE application_name=?",
                (application_name,),
            ).fetchone()
        return None if row is None else int(row[0])


#: Snapshots of folds of a stream (``commands.run_state`` keeps a run's): one row per stream,
#: the newest. A cache: the log is the truth, and a reader ignores a snapshot it cannot use.
#: Created with the first snapshot stored, so a store made before them needs no migration.
SNAPSHOTS_DDL = (
    "CREATE TABLE IF NOT EXISTS snapshots ("
    "originator_id TEXT PRIMARY KEY, originator_version INTEGER NOT NULL, "
    "topic TEXT NOT NULL, state BLOB NOT NULL) WITHOUT ROWID"
)
_UPSERT_SNAPSHOT = (
    "INSERT INTO snapshots VALUES (?,?,?,?) ON CONFLICT (originator_id) DO UPDATE SET "
    "originator_version=excluded.originator_version, topic=excluded.topic, state=excluded.state "
    "WHERE excluded.originator_version > snapshots.originator_version "
    "OR excluded.topic != snapshots.topic"
)
_SELECT_SNAPSHOT = "SELECT originator_version, topic, state FROM snapshots WHERE originator_id=?"


class ApswProcessRecorder(ApswTrackingRecorder, ApswApplicationRecorder, ProcessRecorder):
    """Events and a tracking position, recorded in one transaction."""

    def __init__(
        self, datastore: ApswDatastore, *, events_table_name: str = "stored_events"
    ) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self._select_version = (
            f"SELECT originator_version FROM {events_table_name} WHERE originator_id=? "
            "ORDER BY originator_version DESC LIMIT 1"
        )
        self._select_since = (
            f"SELECT originator_version, topic, state FROM {events_table_name} "
            "WHERE originator_id=? AND originator_version>? AND topic IN "
        )
        self._since_order = " ORDER BY originator_version"

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not stored_events and kwargs.get("tracking") is None:
            return []
        return super().insert_events(stored_events, **kwargs)

    def _insert_rows(
        self, c: apsw.Cursor, rows: Sequence[tuple[str, int, str, bytes]], **kwargs: Any
    ) -> list[int]:
        expected: tuple[str, int] | None = kwargs.get("expected")
        if expected is not None:
            row = c.execute(self._select_version, (expected[0],)).fetchone()
            if (int(row[0]) if row else 0) != expected[1]:
                raise IntegrityError(
                    f"stream {expected[0]} is at version {row[0] if row else 0}, not {expected[1]}"
                )
        ids = super()._insert_rows(c, rows, **kwargs)
        tracking: Tracking | None = kwargs.get("tracking")
        if tracking is not None:
            self._insert_tracking(c, tracking)
        snapshot: tuple[str, int, str, bytes] | None = kwargs.get("snapshot")
        if snapshot is not None:
            c.execute(SNAPSHOTS_DDL)
            c.execute(_UPSERT_SNAPSHOT, snapshot)
        return ids

    def select_since(
        self, originator_id: str, gt: int, topics: Sequence[str]
    ) -> tuple[int, list[tuple[int, str, bytes]]]:
        """The stream's version, and its events of ``topics`` after version ``gt`` up to it:
        (version, topic, state) each, oldest first, read in one transaction.
        """
        with self.datastore.transaction(commit=False) as c:
            row = c.execute(self._select_version, (originator_id,)).fetchone()
            version = int(row[0]) if row else 0
            if version <= gt:
                return version, []
            statement = self._select_since + f"({','.join('?' * len(topics))})"
            rows = c.execute(statement + self._since_order, (originator_id, gt, *topics))
            return version, [(int(v), str(t), bytes(s)) for v, t, s in rows]

    def select_snapshot(self, originator_id: str) -> tuple[int, str, bytes] | None:
        """The stream's stored snapshot: (version, topic, state), or None."""
        try:
            with self.datastore.transaction(commit=False) as c:
                row = c.execute(_SELECT_SNAPSHOT, (originator_id,)).fetchone()
        except OperationalError as e:
            if "no such table" in str(e):
                return None  # no snapshot was ever stored here
            raise
        return None if row is None else (int(row[0]), str(row[1]), bytes(row[2]))


R = TypeVar("R", bound=ApswRecorder)


class ApswFactory(InfrastructureFactory[ApswTrackingRecorder]):
    """Builds apsw recorders from the environment (``APSW_DBNAME``, ...)."""

    APSW_DBNAME = "APSW_DBNAME"
    APSW_SYNCHRONOUS = "APSW_SYNCHRONOUS"
    APSW_BUSY_TIMEOUT_MS = "APSW_BUSY_TIMEOUT_MS"
    ORIGINATOR_ID_TYPE = "ORIGINATOR_ID_TYPE"
    CREATE_TABLE = "CREATE_TABLE"

    aggregate_recorder_class = ApswAggregateRecorder
    application_recorder_class = ApswApplicationRecorder
    tracking_recorder_class = ApswTrackingRecorder
    process_recorder_class = ApswProcessRecorder

    def __init__(self, env: Environment | EnvType | None) -> None:
        super().__init__(env)
        db_name = self.env.get(self.APSW_DBNAME)
        if not db_name:
            keys = ", ".join(self.env.create_keys(self.APSW_DBNAME))
            raise OSError(f"apsw database name not found in environment with keys: {keys}")
        timeout = (self.env.get(self.APSW_BUSY_TIMEOUT_MS) or "").strip()
        try:
            busy_timeout_ms = int(timeout) if timeout else DEFAULT_BUSY_TIMEOUT_MS
        except ValueError:
            raise OSError(
                f"{self.APSW_BUSY_TIMEOUT_MS} must be an integer of milliseconds: {timeout!r}"
            ) from None
        synchronous = (self.env.get(self.APSW_SYNCHRONOUS) or DEFAULT_SYNCHRONOUS).upper()
        originator_id_type = (self.env.get(self.ORIGINATOR_ID_TYPE) or "uuid").lower()
        if originator_id_type not in ("uuid", "text"):
            raise OSError(
                f"Invalid {self.ORIGINATOR_ID_TYPE} {originator_id_type!r}, "
                "must be 'uuid' or 'text'"
            )
        self.datastore = ApswDatastore(
            db_name,
            synchronous=synchronous,
            busy_timeout_ms=busy_timeout_ms,
            originator_id_type=originator_id_type,
        )

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        return self._ready(self.aggregate_recorder_class(self.datastore, "stored_" + purpose))

    def application_recorder(self) -> ApplicationRecorder:
        cls = self._configured(self.APPLICATION_RECORDER_TOPIC, self.application_recorder_class)
        return self._ready(cls(self.datastore))

    def tracking_recorder(
        self, tracking_recorder_class: type[ApswTrackingRecorder] | None = None
    ) -> ApswTrackingRecorder:
        cls = tracking_recorder_class or self._configured(
            self.TRACKING_RECORDER_TOPIC, self.tracking_recorder_class
        )
        return self._ready(cls(self.datastore))

    def process_recorder(self) -> ProcessRecorder:
        cls = self._configured(self.PROCESS_RECORDER_TOPIC, self.process_recorder_class)
        return self._ready(cls(self.datastore))

    def _configured(self, key: str, default: type[R]) -> type[R]:
        """The recorder class named by the environment's topic ``key``, else ``default``."""
        topic = self.env.get(key)
        return resolve_topic(topic) if topic else default

    def _ready(self, recorder: R) -> R:
        if self.env_create_table():
            recorder.create_table()
        return recorder

    def env_create_table(self) -> bool:
        return bool(strtobool(self.env.get(self.CREATE_TABLE) or "yes"))

    def close(self) -> None:
        self.datastore.close()


Factory = ApswFactory
