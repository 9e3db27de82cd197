"""Keeps the read models current: catch up from the tracked position, or rebuild from scratch.

Each batch of events updates every projection's tables and its tracking row
in one transaction, so an event is applied exactly once even when several
processes catch up at the same time or one is killed mid-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime
from typing import cast

import apsw

from events.base import Event
from events.catalog import EVENT_CLASSES, decode_event
from events.errors import StoreError, UnknownEventError
from events.schema import (
    immediate_transaction,
    store_error,
)
from projections.base import Batch, Handler
from projections.database import (
    ensure_schema,
    lag,
    positions,
)
from projections.mirror import pull_registered
from projections.schema import INDEX_DDL, PROJECTIONS

_TRACK = (
    "INSERT INTO tracking VALUES (?, ?) ON CONFLICT (application_name) DO UPDATE "
    "SET notification_id = excluded.notification_id "
    "WHERE tracking.notification_id < excluded.notification_id RETURNING notification_id"
)


def catch_up(conn: apsw.Connection, *, batch_size: int = 5000, pull: bool = True) -> int:
    """Apply every event past the tracked positions; return how many events were read.

    Missing tables or indexes are created first (a killed rebuild leaves its
    tables without indexes). A read-only store is left as it is: its
    projections are read as they are, and this returns 0. A home's copy of a
    shared log (``projections.mirror``) is brought up to date from the server first,
    unless the caller has just done so (``pull=False``).
    """
    if pull:
        pull_registered(conn)  # a copy of a shared log; nothing otherwise
    try:
        if conn.readonly("main") or lag(conn) <= 0:
            return 0
        ensure_schema(conn)
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return _catch_up(conn, batch_size)


def _catch_up(conn: apsw.Connection, batch_size: int) -> int:
    total = 0
    try:
        while True:
            read = _catch_up_batch(conn, batch_size)
            total += read
            if read < batch_size:
                return total
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    except UnknownEventError as e:
        # An event a newer shep wrote: the refusal names it (the store says which).
        raise _naming_writer(conn, e) from None


def _catch_up_batch(conn: apsw.Connection, batch_size: int) -> int:
    with immediate_transaction(conn):
        tracked = positions(conn)
        start = min(tracked.values())
        rows = cast(
            list[tuple[int, str, bytes, bytes]],
            conn.execute(
                "SELECT notification_id, topic, state, chain_hash FROM stored_events "
                "WHERE notification_id > ? ORDER BY notification_id LIMIT ?",
                (start, batch_size),
            ).fetchall(),
        )
        if not rows:
            return 0
        batch = Batch(conn.cursor())
        _apply(batch, rows, tracked)
        batch.flush()
        cursor = batch.cursor
        last = rows[-1][0]
        for projection in PROJECTIONS:
            if (
                last > tracked[projection.name]
                and not cursor.execute(_TRACK, (projection.name, last)).fetchall()
            ):
                raise StoreError(f"projection {projection.name} was updated concurrently")
        return len(rows)


def _apply(
    batch: Batch, rows: Sequence[tuple[int, str, bytes, bytes]], tracked: dict[str, int]
) -> None:
    lagging = [p for p in PROJECTIONS if tracked[p.name] < rows[-1][0]]
    # Usually every projection is at the same position: then the handlers for an
    # event type are the same for the whole batch.
    uniform = len(set(tracked.values())) == 1
    by_kind: dict[type[Event], list[Handler]] = {}
    last_time: datetime | None = None
    last_at = ""
    for position, topic, state, chain in rows:
        kind = EVENT_CLASSES.get(topic)
        if kind is None:
            raise UnknownEventError(topic)
        handlers = by_kind.get(kind) if uniform else None
        if handlers is None:
            handlers = [
                handler
                for projection in lagging
                if position > tracked[projection.name]
                and (handler := projection.handlers.get(kind)) is not None
            ]
            if uniform:
                by_kind[kind] = handlers
        if not handlers:
            # Most events of a run (checkpoints, heartbeats) concern few projections:
            # decode only what some handler reads.
            continue
        event = decode_event(topic, state)
        batch.position = position
        if event.timestamp != last_time:
            # Events appended together share their timestamp: format it once.
            last_time = event.timestamp
            last_at = last_time.isoformat()
        batch.at = last_at
        batch.stream = event.originator_id.hex
        batch.chain = chain
        for handler in handlers:
            handler(batch, event)


def _naming_writer(conn: apsw.Connection, error: UnknownEventError) -> UnknownEventError:
    """The refusal to read a newer shep's event, naming the newest shep that wrote the log:
    this file's, or for a copy of a shared log, the server's."""
    from events.migrations import written_by
    from events.postgres_url import where
    from projections.mirror import newest_writer, url_of

    url = url_of(conn)
    if url is None:
        return error.naming(written_by(conn), where=f"The event store {conn.filename}")
    return error.naming(newest_writer(url), where=f"The shared store at {where(url)}")


def rebuild(conn: apsw.Connection, *, batch_size: int = 20_000) -> int:
    """Drop every projection table, recreate it, and replay the whole log into it.

    Secondary indexes are created after the replay: building an index once over
    a full table is cheaper than keeping it sorted through a million inserts.
    Killed before that, it leaves tables without indexes, which the next
    ``open_database`` or ``catch_up`` creates (``ensure_schema``).
    """
    indexes = INDEX_DDL
    # A rebuild writes the projections anew: checkpointing the WAL every 80 MiB
    # instead of every 4 MiB saves most of the checkpoints' syncs meanwhile.
    (previous_autocheckpoint,) = conn.execute("PRAGMA wal_autocheckpoint").fetchone() or (1000,)
    conn.execute("PRAGMA wal_autocheckpoint=20000")
    try:
        with immediate_transaction(conn):
            for projection in PROJECTIONS:
                for table in projection.tables:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                for statement in projection.ddl:
                    if statement not in indexes:
                        conn.execute(statement)
                conn.execute("DELETE FROM tracking WHERE application_name=?", (projection.name,))
        count = _catch_up(conn, batch_size)
        with immediate_transaction(conn):
            for statement in indexes:
                conn.execute(statement)
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    finally:
        with suppress(apsw.Error):
            conn.execute(f"PRAGMA wal_autocheckpoint={int(previous_autocheckpoint)}")
    return count
