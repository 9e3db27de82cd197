"""The shared store: eventsourcing's PostgreSQL persistence, with shep's positions and hash chain.

``EventStore(url)`` opens it for ``SHEP_DATABASE_URL=postgresql://...``. The
library's datastore (psycopg pool, error translation) and tracking recorder
are used as they are; the events table differs from the library's in two ways
the log relies on, exactly as on SQLite (``events.sqlite``):

- ``notification_id`` is given by shep, not by a sequence: under the library's
  ``EXCLUSIVE`` table lock each insert reads the head and takes the next
  positions, so a rolled-back insert (a lost OCC race) leaves no gap.
- Each row carries ``chain_hash = H(previous hash, event)``, over the same
  bytes as on SQLite (the originator id as 32 hex digits), so a log copied
  between the two keeps its hashes and ``shep audit verify`` reads both.

A plain append is one statement, one round trip: the function
``stored_events_append`` locks, reads the head, hashes and inserts on the
server, and the autocommit statement commits. Appends with a tracking record,
or inside ``exclusive()``, hash in Python (``_chained``); the tests check both
against ``events.chain`` by verifying the server's chain in Python.

Rows can't be updated or deleted: a trigger refuses it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    Notification,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
    Tracking,
)
from eventsourcing.postgres import (
    PostgresDatastore,
    PostgresProcessRecorder,
)
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier, Literal

from events.chain import GENESIS_HASH, chain_hash
from events.postgres_url import redacted

#: Seconds to wait for the server when connecting (libpq's connect_timeout).
CONNECT_TIMEOUT = 3.0

_TRANSLATED: tuple[tuple[type[psycopg.Error], type[PersistenceError]], ...] = (
    (psycopg.InterfaceError, InterfaceError),
    (psycopg.OperationalError, OperationalError),
    (psycopg.DataError, DataError),
    (psycopg.IntegrityError, IntegrityError),
    (psycopg.InternalError, InternalError),
    (psycopg.ProgrammingError, ProgrammingError),
    (psycopg.NotSupportedError, NotSupportedError),
    (psycopg.DatabaseError, DatabaseError),
)


def translate(error: psycopg.Error) -> PersistenceError:
    """The library's PEP 249-named error for a psycopg error, as its datastore does."""
    for driver, library in _TRANSLATED:
        if isinstance(error, driver):
            return library(str(error))
    return PersistenceError(str(error))


class PgDatastore(PostgresDatastore):
    """The library's datastore, opened from a URL, with a held transaction per thread.

    ``hold()`` keeps one connection in a transaction holding the events
    table's write lock: every recorder call of the thread inside it runs in
    that transaction (see ``EventStore.exclusive``).
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 2,
        max_overflow: int = 8,
        connect_timeout: float = CONNECT_TIMEOUT,
        originator_id_type: str = "uuid",
        lock_timeout: int = 0,
    ) -> None:
        try:
            params = conninfo_to_dict(url)
        except psycopg.ProgrammingError as e:
            raise ProgrammingError(f"not a PostgreSQL URL: {redacted(url)}") from e
        self.url = url
        super().__init__(
            dbname=str(params.pop("dbname", "")),
            host=str(params.pop("host", "")),
            port=str(params.pop("port", "")),
            user=str(params.pop("user", "")),
            password=str(params.pop("password", "")),
            connect_timeout=connect_timeout,
            pool_size=pool_size,
            max_overflow=max_overflow,
            max_waiting=0,
            lock_timeout=lock_timeout,
            originator_id_type="text",
        )
        # Leave out what the URL did not say: libpq then reads PGHOST, PGPASSWORD,
        # ~/.pgpass and the rest, as psql does.
        kwargs = cast(dict[str, Any], self.pool.kwargs)
        for key in ("dbname", "host", "port", "user", "password"):
            if not kwargs.get(key):
                kwargs.pop(key, None)
        kwargs.update(params)
        kwargs.setdefault("connect_timeout", max(1, round(connect_timeout)))
        kwargs.setdefault("application_name", "shep")
        self.id_type = originator_id_type
        self._held = threading.local()

    def register_type_adapters(self) -> None:
        """Nothing to register: shep's statements use no composite types."""

    def encode_id(self, originator_id: UUID | str) -> str:
        return originator_id.hex if isinstance(originator_id, UUID) else originator_id

    def decode_id(self, value: str) -> UUID | str:
        return UUID(value) if self.id_type == "uuid" else value

    @contextmanager
    def get_connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        held: psycopg.Connection[DictRow] | None = getattr(self._held, "conn", None)
        if held is None:
            with super().get_connection() as conn:
                yield conn
            return
        try:
            yield held
        except psycopg.Error as e:
            raise translate(e) from e

    @contextmanager
    def hold(self, lock: Sequence[Composed]) -> Iterator[None]:
        """Run the thread's recorder calls in one transaction that first takes ``lock``."""
        if getattr(self._held, "conn", None) is not None:
            yield  # already held by this thread
            return
        with super().get_connection() as conn, conn.transaction():
            with conn.cursor() as curs:
                for statement in lock:
                    curs.execute(statement)
            self._held.conn = conn
            try:
                yield
            finally:
                self._held.conn = None

    def connect_error(self) -> psycopg.Error | None:
        """Why a connection fails, in libpq's words (None: one opens now).

        The pool only says it got no connection in time; a direct connection
        says why (no such database, a refused login, a refused port).
        """
        try:
            psycopg.connect(self.url, **cast(dict[str, Any], self.pool.kwargs)).close()
        except psycopg.Error as e:
            return e
        return None

    @property
    def holding(self) -> bool:
        """Whether this thread is inside ``hold()``."""
        return getattr(self._held, "conn", None) is not None


def _columns(event: StoredEvent, encode_id: Callable[[UUID | str], str]) -> tuple[Any, ...]:
    """One event's columns, as the append function takes them."""
    return (encode_id(event.originator_id), event.originator_version, event.topic, event.state)


def _column_lists(
    events: Sequence[StoredEvent], encode_id: Callable[[UUID | str], str]
) -> tuple[list[Any], ...]:
    """Several events' columns, a list each (the append function's arrays)."""
    rows = [_columns(e, encode_id) for e in events]
    return tuple(list(column) for column in zip(*rows, strict=True))


def _once(method: Any) -> Any:
    """A library method without its ``@retry`` wrapper."""
    return getattr(method, "__wrapped__", method)


class PgProcessRecorder(PostgresProcessRecorder):
    """Events, gap-free positions, a hash chain, and tracking, on PostgreSQL."""

    datastore: PgDatastore

    def __init__(
        self,
        datastore: PgDatastore,
        *,
        events_table_name: str = "stored_events",
        tracking_table_name: str = "notification_tracking",
    ) -> None:
        super().__init__(
            datastore,
            events_table_name=events_table_name,
            tracking_table_name=tracking_table_name,
        )
        schema, table = Identifier(datastore.schema), Identifier(events_table_name)
        tracking = [s for s in self.sql_create_statements if tracking_table_name in s.as_string()]
        trigger = Identifier(f"{events_table_name}_append_only")
        self.append_function = f"{events_table_name}_append"
        function = Identifier(self.append_function)
        self.sql_create_statements = [
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{table} ("
                "notification_id bigint PRIMARY KEY, "
                "originator_id text NOT NULL, "
                "originator_version bigint NOT NULL, "
                "topic text NOT NULL, "
                "state bytea NOT NULL, "
                "chain_hash bytea NOT NULL, "
                "UNIQUE (originator_id, originator_version))"
            ).format(schema=schema, table=table),
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.shep_append_only() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'events are append-only'; END $$"
            ).format(schema=schema),
            SQL(
                "CREATE OR REPLACE TRIGGER {trigger} BEFORE UPDATE OR DELETE ON "
                "{schema}.{table} FOR EACH ROW EXECUTE FUNCTION {schema}.shep_append_only()"
            ).format(trigger=trigger, schema=schema, table=table),
            # The common append (events, no tracking) in one statement, so in one round
            # trip: the lock, the head, the rows with their chain hashes (the same bytes
            # as events.chain.chain_hash: SHA-256 over the previous hash, a big-endian
            # header of position, version and the three lengths, then the id, topic and
            # state), and the commit of an autocommit statement.
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.{function}("
                "oids text[], versions bigint[], topics text[], states bytea[]) "
                "RETURNS SETOF bigint LANGUAGE plpgsql AS $$ "
                "DECLARE head bigint; previous bytea; o bytea; t bytea; "
                "BEGIN "
                "LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE; "
                "PERFORM pg_notify({channel}, ''); "
                "SELECT notification_id, chain_hash INTO head, previous FROM {schema}.{table} "
                "ORDER BY notification_id DESC LIMIT 1; "
                "IF head IS NULL THEN head := 0; previous := decode(repeat('00', 32), 'hex'); "
                "END IF; "
                "FOR i IN 1 .. coalesce(array_length(oids, 1), 0) LOOP "
                "head := head + 1; "
                "o := convert_to(oids[i], 'UTF8'); t := convert_to(topics[i], 'UTF8'); "
                "previous := sha256(previous || int8send(head) || int8send(versions[i]) "
                "|| int4send(length(o)) || int4send(length(t)) || int4send(length(states[i])) "
                "|| o || t || states[i]); "
                "INSERT INTO {schema}.{table} "
                "VALUES (head, oids[i], versions[i], topics[i], states[i], previous); "
                "RETURN NEXT head; "
                "END LOOP; "
                "END $$"
            ).format(
                schema=schema,
                function=function,
                table=table,
                channel=Literal(self.channel_name),
            ),
            *tracking,
        ]
        self._append = (
            SQL("SELECT {schema}.{function}(%s, %s, %s, %s)")
            .format(schema=schema, function=function)
            .as_bytes(None)
        )
        # One event, the usual append, as four scalars: psycopg dumps them in C, where
        # lists go through its Python array dumper (a tenth of a durable append's time).
        self._append_one = (
            SQL(
                "SELECT {schema}.{function}(ARRAY[%s::text], ARRAY[%s::bigint], "
                "ARRAY[%s::text], ARRAY[%s::bytea])"
            )
            .format(schema=schema, function=function)
            .as_bytes(None)
        )
        columns = SQL(
            "SELECT originator_id, originator_version, topic, state FROM {schema}.{table} "
        ).format(schema=schema, table=table)
        self._select_events = columns + SQL("WHERE originator_id = %s")
        self._select_topics = columns + SQL(
            "WHERE originator_id = %s AND originator_version > %s AND topic = ANY(%s) "
            "ORDER BY originator_version"
        )
        self._select_notifications = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{table}"
        ).format(schema=schema, table=table)
        self._select_head = SQL(
            "SELECT notification_id, chain_hash FROM {schema}.{table} "
            "ORDER BY notification_id DESC LIMIT 1"
        ).format(schema=schema, table=table)
        # Rendered once: composing SQL on every append costs more than the server takes.
        lock_and_head = SQL("; ").join(
            [
                *self.lock_table_statements,
                SQL("NOTIFY {0}").format(Identifier(self.channel_name)),
                self._select_head,
            ]
        )
        self._lock_and_head = lock_and_head.as_bytes(None)
        self._begin_lock_and_head = b"BEGIN; " + self._lock_and_head
        self._insert = (
            SQL("INSERT INTO {schema}.{table} VALUES (%s, %s, %s, %s, %s, %s)")
            .format(schema=schema, table=table)
            .as_bytes(None)
        )
        self._select_positions = SQL(
            "SELECT notification_id, state FROM {schema}.{table} "
            "WHERE originator_id = %s AND originator_version = %s"
        ).format(schema=schema, table=table)

    # The library retries these ten times, each waiting up to the pool's timeout for
    # a connection: half a minute before a caller hears that the server is gone.
    # EventStore decides how long to wait for it (retry_for), so they run once here.
    def max_notification_id(self) -> int | None:
        return cast(int | None, _once(PostgresProcessRecorder.max_notification_id)(self))

    def max_tracking_id(self, application_name: str) -> int | None:
        return cast(
            int | None, _once(PostgresProcessRecorder.max_tracking_id)(self, application_name)
        )

    def has_tracking_id(self, application_name: str, notification_id: int | None) -> bool:
        has = _once(PostgresProcessRecorder.has_tracking_id)
        return bool(has(self, application_name, notification_id))

    def insert_tracking(self, tracking: Tracking) -> None:
        _once(PostgresProcessRecorder.insert_tracking)(self, tracking)

    def lock_for_import(self, curs: psycopg.Cursor[DictRow]) -> None:
        """In ``curs``'s transaction, take the lock every insert takes: an import of a whole
        log (``shep store migrate``) then never interleaves with a writer."""
        self._lock_table(curs)

    def track_in(self, curs: psycopg.Cursor[DictRow], name: str, position: int) -> None:
        """Record in ``curs``'s transaction that reader ``name`` handled up to ``position``."""
        self._insert_tracking(curs, Tracking(name, position))

    def create_table(self) -> None:
        # Several processes may create the tables at once: DDL on PostgreSQL can
        # fail with "tuple concurrently updated" then; an advisory lock queues them.
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(7364657)")
            for statement in self.sql_create_statements:
                curs.execute(statement, prepare=False)
        super().create_table()  # the library's tracking-table migration bookkeeping

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        tracking: Tracking | None = kwargs.get("tracking")
        if not stored_events and tracking is None:
            return []
        if self.datastore.holding:
            # Inside exclusive(): that transaction holds the lock and commits at its end.
            with self.datastore.transaction(commit=True) as curs:
                if tracking is not None:
                    self._insert_tracking(curs, tracking)
                if not stored_events:
                    return []
                head = self._lock_and_read_head(curs, self._lock_and_head)
                rows = self._chained(head, stored_events)
                curs.executemany(self._insert, rows)
                return [row[0] for row in rows]
        if tracking is None:
            encode_id = self.datastore.encode_id
            statement, params = (
                (self._append_one, _columns(stored_events[0], encode_id))
                if len(stored_events) == 1
                else (self._append, _column_lists(stored_events, encode_id))
            )
            with self.datastore.get_connection() as conn:  # autocommit: one transaction
                appended = conn.execute(statement, params, prepare=True).fetchall()
            return [int(row[self.append_function]) for row in appended]
        with self.datastore.get_connection() as conn:
            return self._insert_and_commit(conn, stored_events, tracking)

    def _insert_and_commit(
        self,
        conn: psycopg.Connection[DictRow],
        stored_events: Sequence[StoredEvent],
        tracking: Tracking | None,
    ) -> list[int]:
        """One transaction in two round trips: BEGIN, the lock and the head; then the
        rows and COMMIT, pipelined. (A durable append is mostly waiting for the
        server: psycopg's own transaction() would take five.)"""
        curs = conn.cursor()
        try:
            head = self._lock_and_read_head(curs, self._begin_lock_and_head)
            rows = self._chained(head, stored_events)
            with conn.pipeline():
                if tracking is not None:
                    self._insert_tracking(curs, tracking)
                for row in rows:
                    curs.execute(self._insert, row, prepare=True)
                curs.execute(b"COMMIT")
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            raise
        return [row[0] for row in rows]

    @staticmethod
    def _lock_and_read_head(curs: psycopg.Cursor[DictRow], statements: bytes) -> DictRow | None:
        # A statement list without parameters goes as one simple query, in one round
        # trip; its last result is the head's.
        curs.execute(statements)
        while curs.nextset():
            pass
        return curs.fetchone()

    def _chained(
        self, head: DictRow | None, stored_events: Sequence[StoredEvent]
    ) -> list[tuple[int, str, int, str, bytes, bytes]]:
        """The rows to insert after ``head``: the next positions, each hash over the one before."""
        position, previous = (
            (int(head["notification_id"]), bytes(head["chain_hash"])) if head else (0, GENESIS_HASH)
        )
        encode_id = self.datastore.encode_id
        rows = []
        for s in stored_events:
            position += 1
            oid = encode_id(s.originator_id)
            previous = chain_hash(
                previous, position, oid.encode(), s.originator_version, s.topic.encode(), s.state
            )
            rows.append((position, oid, s.originator_version, s.topic, s.state, previous))
        return rows

    def positions_if_stored(self, stored_events: Sequence[StoredEvent]) -> list[int] | None:
        """The positions of these very events if the store holds them all, else None.

        For a retry after a lost connection: the insert may have committed
        before the connection dropped, and must not be applied twice.
        """
        if not stored_events:
            return None
        encode_id = self.datastore.encode_id
        ids = []
        with self.datastore.transaction(commit=False) as curs:
            for s in stored_events:
                row = curs.execute(
                    self._select_positions, (encode_id(s.originator_id), s.originator_version)
                ).fetchone()
                if row is None or bytes(row["state"]) != s.state:
                    return None
                ids.append(int(row["notification_id"]))
        return ids

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        statement = self._select_events
        params: list[Any] = [self.datastore.encode_id(originator_id)]
        if gt is not None:
            statement += SQL(" AND originator_version > %s")
            params.append(gt)
        if lte is not None:
            statement += SQL(" AND originator_version <= %s")
            params.append(lte)
        statement += SQL(
            " ORDER BY originator_version DESC" if desc else " ORDER BY originator_version"
        )
        if limit is not None:
            statement += SQL(" LIMIT %s")
            params.append(limit)
        with self.datastore.transaction(commit=False) as curs:
            return [self._stored(row) for row in curs.execute(statement, params, prepare=True)]

    def _stored(self, row: DictRow) -> StoredEvent:
        return StoredEvent(
            originator_id=self.datastore.decode_id(row["originator_id"]),
            originator_version=row["originator_version"],
            topic=row["topic"],
            state=bytes(row["state"]),
        )

    def select_events_of_topics(
        self, originator_id: UUID | str, topics: Sequence[str], *, gt: int = 0
    ) -> Sequence[StoredEvent]:
        """The originator's events after version ``gt`` whose topic is one of ``topics``,
        oldest first.
        """
        params = (self.datastore.encode_id(originator_id), gt, list(topics))
        with self.datastore.transaction(commit=False) as curs:
            rows = curs.execute(self._select_topics, params, prepare=True)
            return [self._stored(row) for row in rows]

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        clauses: list[SQL] = []
        params: list[Any] = []
        if start is not None:
            clauses.append(
                SQL("notification_id >= %s" if inclusive_of_start else "notification_id > %s")
            )
            params.append(start)
        if stop is not None:
            clauses.append(SQL("notification_id <= %s"))
            params.append(stop)
        if topics:
            clauses.append(SQL("topic = ANY(%s)"))
            params.append(list(topics))
        statement = self._select_notifications
        if clauses:
            statement += SQL(" WHERE ") + SQL(" AND ").join(clauses)
        statement += SQL(" ORDER BY notification_id LIMIT %s")
        params.append(limit)
        decode_id = self.datastore.decode_id
        with self.datastore.transaction(commit=False) as curs:
            return [
                Notification(
                    id=row["notification_id"],
                    originator_id=decode_id(row["originator_id"]),
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in curs.execute(statement, params, prepare=True)
            ]


class PgAggregateRecorder(PgProcessRecorder):
    """The same table, answering as eventsourcing's aggregate recorders do: no positions."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        super().insert_events(stored_events, **kwargs)
        return None


__all__ = [
    "CONNECT_TIMEOUT",
    "PgAggregateRecorder",
    "PgDatastore",
    "PgProcessRecorder",
    "translate",
]
