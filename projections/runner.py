"""Keeps the read models current: catch up from the tracked position, or rebuild from scratch.

Each batch of events updates every projection's tables and its tracking row
in one transaction, so an event is applied exactly once even when several
processes catch up at the same time or one is killed mid-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import apsw

from events.base import Event
from events.catalog import UnknownEventTopicError, decode_event
from events.errors import StoreError
from events.schema import (
    TRACKING_DDL,
    connect,
    events_table_ddl,
    immediate_transaction,
    store_error,
)
from projections.base import Batch, Handler, Projection
from projections.decisions import DECISIONS
from projections.inbox import INBOX
from projections.logs import LOGS
from projections.runs import RUNS

PROJECTIONS: tuple[Projection, ...] = (RUNS, LOGS, INBOX, DECISIONS)

_REQUIRED_TABLES = ("stored_events", "tracking", *(t for p in PROJECTIONS for t in p.tables))
_TRACK = (
    "INSERT INTO tracking VALUES (?, ?) ON CONFLICT (application_name) DO UPDATE "
    "SET notification_id = excluded.notification_id "
    "WHERE tracking.notification_id < excluded.notification_id RETURNING notification_id"
)


def open_database(path: str | Path, *, readonly: bool = False) -> apsw.Connection:
    """Open shep.db for the read side; create missing tables unless read-only.

    Projections can always be rebuilt, so their transactions run with
    ``synchronous=NORMAL``: a power cut can only roll them back together
    with their tracking position.
    """
    try:
        conn = connect(path, synchronous="NORMAL", readonly=readonly)
        if not readonly:
            _ensure_tables(conn)
    except apsw.Error as e:
        raise store_error(e, path) from e
    return conn


def _ensure_tables(conn: apsw.Connection) -> None:
    names = ",".join("?" * len(_REQUIRED_TABLES))
    (count,) = conn.execute(
        f"SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ({names})",
        _REQUIRED_TABLES,
    ).fetchone() or (0,)
    if count == len(_REQUIRED_TABLES):
        return
    with immediate_transaction(conn):
        for statement in (*events_table_ddl("stored_events"), TRACKING_DDL):
            conn.execute(statement)
        for projection in PROJECTIONS:
            for statement in projection.ddl:
                conn.execute(statement)


def positions(conn: apsw.Connection) -> dict[str, int]:
    """Each projection's tracked position (0 when it has seen nothing)."""
    names = [p.name for p in PROJECTIONS]
    found: dict[str, int] = dict(
        conn.execute(  # type: ignore[arg-type]
            f"SELECT application_name, notification_id FROM tracking "
            f"WHERE application_name IN ({','.join('?' * len(names))})",
            names,
        ).fetchall()
    )
    return {name: int(found.get(name, 0)) for name in names}


def head_position(conn: apsw.Connection) -> int:
    """The newest event's position, 0 for an empty store."""
    row = conn.execute("SELECT max(notification_id) FROM stored_events").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def lag(conn: apsw.Connection) -> int:
    """How many events the slowest projection is behind the log."""
    return head_position(conn) - min(positions(conn).values())


def catch_up(conn: apsw.Connection, *, batch_size: int = 5000) -> int:
    """Apply every event past the tracked positions; return how many events were read."""
    total = 0
    try:
        if lag(conn) <= 0:
            return 0
        while True:
            read = _catch_up_batch(conn, batch_size)
            total += read
            if read < batch_size:
                return total
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e


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
    for position, topic, state, chain in rows:
        try:
            event = decode_event(topic, state)
        except UnknownEventTopicError as e:
            raise StoreError(
                f"Event {position} has topic {topic!r}, unknown to this version of shep. "
                "Upgrade shep."
            ) from e
        kind = type(event)
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
            continue
        batch.position = position
        batch.at = event.timestamp.isoformat()
        batch.stream = event.originator_id.hex
        batch.chain = chain
        for handler in handlers:
            handler(batch, event)


def rebuild(conn: apsw.Connection, *, batch_size: int = 5000) -> int:
    """Drop every projection table, recreate it, and replay the whole log into it."""
    try:
        with immediate_transaction(conn):
            for projection in PROJECTIONS:
                for table in projection.tables:
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
                for statement in projection.ddl:
                    conn.execute(statement)
                conn.execute("DELETE FROM tracking WHERE application_name=?", (projection.name,))
    except apsw.Error as e:
        raise store_error(e, conn.filename) from e
    return catch_up(conn, batch_size=batch_size)
